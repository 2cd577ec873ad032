"""Spreadsheet-safe text in CSV: the one rule against CSV (formula) injection.

A text value that a device or a user chose (a firmware string, a name) and that starts like a
formula (`=`, `+`, `-`, `@`, TAB, CR) runs as one when the CSV is opened in a spreadsheet
(OWASP "CSV injection"). Such a value is written with a leading `'`, which spreadsheets show as
plain text. Numbers are never touched: only text columns pass through here.

Two forms:
- for reading (the API's CSV answers): the prefix only, as spreadsheets expect;
- reversible (the retention archive, which must restore exactly): values starting with `'`
  are prefixed too, so stripping exactly one leading `'` from every value that has one
  (`unescape_sql`) gives back the stored text.
"""

from __future__ import annotations

from psycopg import sql

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ESCAPE = "'"


def _starts(reversible: bool) -> sql.Composable:
    chars = FORMULA_STARTS + ((ESCAPE,) if reversible else ())
    return sql.SQL(", ").join(sql.Literal(c) for c in chars)


def text_expr(ref: sql.Composable, *, reversible: bool = False) -> sql.Composable:
    """SQL for a text column's value made spreadsheet-safe (see the module docstring)."""
    return sql.SQL("CASE WHEN left({0}, 1) IN ({1}) THEN {2} || {0} ELSE {0} END").format(
        ref, _starts(reversible), sql.Literal(ESCAPE))


def unescape_sql(column: sql.Composable) -> sql.Composable:
    """SQL that restores a value written with reversible=True (strip one leading `'`)."""
    return sql.SQL("CASE WHEN left({0}, 1) = {1} THEN substr({0}, 2) ELSE {0} END").format(
        column, sql.Literal(ESCAPE))


def escape(value: str, *, reversible: bool = False) -> str:
    """The Python form of text_expr, for CSV written outside SQL."""
    starts = FORMULA_STARTS + ((ESCAPE,) if reversible else ())
    return ESCAPE + value if value[:1] in starts else value


def unescape(value: str) -> str:
    """The Python form of unescape_sql."""
    return value[1:] if value[:1] == ESCAPE else value
