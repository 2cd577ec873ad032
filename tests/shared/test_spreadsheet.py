"""shared.spreadsheet: formula-like text is neutralised, and the reversible form restores exactly
(pure, and the SQL form against PostgreSQL's own evaluation)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from shared import spreadsheet

SAMPLES = ["fw 1.0", "=1+1", "+1", "-x", "@SUM(A1)", "\tTAB", "\rCR", "'quoted", "''two", "", "a=b"]


@pytest.mark.parametrize("value", SAMPLES)
def test_reversible_escape_round_trips_and_never_starts_a_formula(value: str) -> None:
    out = spreadsheet.escape(value, reversible=True)
    assert out[:1] not in spreadsheet.FORMULA_STARTS
    assert spreadsheet.unescape(out) == value


def test_reading_form_leaves_a_leading_quote_alone() -> None:
    assert spreadsheet.escape("'quoted") == "'quoted"
    assert spreadsheet.escape("=1") == "'=1"
    assert spreadsheet.escape("12.5") == "12.5"


def test_sql_forms_agree_with_python(database_url: str) -> None:
    v = sql.Placeholder("v")
    with psycopg.connect(database_url) as c:
        for value in SAMPLES:
            for reversible in (False, True):
                got = c.execute(sql.SQL("SELECT {}").format(
                    spreadsheet.text_expr(sql.SQL("%(v)s::text"), reversible=reversible)),
                    {"v": value}).fetchone()[0]
                assert got == spreadsheet.escape(value, reversible=reversible)
            back = c.execute(sql.SQL("SELECT {}").format(spreadsheet.unescape_sql(v)),
                             {"v": spreadsheet.escape(value, reversible=True)}).fetchone()[0]
            assert back == value
