"""A `/data/calibrated` page that lies wholly in the cold tier, formatted without PostgreSQL.

serve.coldread reads a page's cold rows; when no hot row of the listing lies in the page's span
(the usual case: the files are live and no late reading arrived since) the page is exactly
those rows, and this module writes them as the page's SQL would (serve.queries.column_expr):
a stored float32 as its shortest text read back as float8 (`x::text::float8`), a converted
value as `round((x * scale + offset) * 10^d) / 10^d` in float8 (rint: half to even), CSV
numbers as float8out writes them, times and `local_time` as `sds_iso_time`, text made
spreadsheet-safe and quoted as COPY quotes it. Each rule is held equal to PostgreSQL's over
many values by tests/serve/test_cold_page.py; whole answers before and after a move by
tests/serve/test_cold_tier.py. Passing 10,000 rows through SQL cost 2-4x the hot page
(docs/benchmarks.md "Cold tier").
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction
from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from serve import render
from serve.cursor import Position
from serve.queries import Scan, unit_for
from shared import spreadsheet, units
from shared.columns import TS, Column
from shared.timeutil import format_local

# float8out writes a double in fixed notation when its decimal exponent is in [-4, 15), else
# as `1.5e-05` / `1e+15`; Arrow's own thresholds differ, so those values are written here.
_FIXED_LO, _FIXED_HI = 1e-4, 1e15
# Below this a double's shortest text cannot lie exactly between two doubles (a midpoint has
# more than 17 digits there), so Python's shortest is PostgreSQL's.
_TIES = 2.0 ** 52
# Session time zones whose datetimes psycopg returns at offset 0 (Arrow reads UTC).
_UTC_KEYS = frozenset({"UTC", "Etc/UTC"})


def float8(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """`x::text::float8` of a float32 column: its shortest decimal text, read back as the
    nearest double. Arrow prints a float32 shortest and parses text correctly rounded; where
    that shortest text lies exactly halfway between two float32 values (it reads back right,
    rounding half to even), PostgreSQL's printer takes a longer one: see _inside."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    values = pc.cast(pc.cast(arr, pa.string()), pa.float64())
    d = values.to_numpy(zero_copy_only=False).copy()
    f = arr.to_numpy(zero_copy_only=False).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        exact = f.astype(np.float64)
        toward = np.nextafter(f, np.where(d > exact, np.float32(np.inf), np.float32(-np.inf)))
        ties = np.isfinite(d) & (d != exact) & (d - exact == toward.astype(np.float64) - d)
    ties &= ~np.asarray(arr.is_null())
    if not ties.any():
        return values
    for i in np.flatnonzero(ties):
        d[i] = float(_float32_inside(float(f[i])))
    return pa.array(d, mask=np.asarray(arr.is_null()))


def _inside(value: float, down: float, up: float, max_digits: int) -> Decimal:
    """The shortest decimal strictly between the rounding bounds of `value` (whose neighbours
    are `down` and `up`), the closest to it: what PostgreSQL's printers (Ryu, not accepting
    the bounds) write where the shortest text lies exactly on a bound."""
    exact = Fraction(value)
    lo, hi = (exact + Fraction(down)) / 2, (exact + Fraction(up)) / 2
    for digits in range(1, max_digits + 1):
        with localcontext() as ctx:
            ctx.prec = digits
            near = Decimal(exact.numerator) / Decimal(exact.denominator)
            step = Decimal(1).scaleb(near.adjusted() - digits + 1)
        candidates = [c for c in (near - step, near, near + step) if lo < Fraction(c) < hi]
        if candidates:
            return min(candidates, key=lambda c: abs(Fraction(c) - exact))
    return Decimal(value)


def _float32_inside(value: float) -> Decimal:
    f = np.float32(value)
    return _inside(value, float(np.nextafter(f, np.float32(-np.inf))),
                   float(np.nextafter(f, np.float32(np.inf))), 9)


def converted(values: pa.Array, col: Column, unit: units.Unit | None) -> pa.Array:
    """A float8 column converted to `unit` and rounded exactly as serve.queries does."""
    if unit is None:
        return values
    scale, offset = units.factors(col, unit)
    if (scale, offset) == (1.0, 0.0):
        return values
    power = float(10 ** units.decimals(col, unit))
    x = values.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        # Two roundings, as PostgreSQL's float8mul then float8pl (no fused multiply-add).
        y = np.rint((x * scale + offset) * power) / power
    return pa.array(y, mask=np.asarray(values.is_null()))


def pg_float8(value: float) -> str:
    """float8out's text of `value` (extra_float_digits > 0: shortest, exact)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if abs(value) >= _TIES:
        shortest = Decimal(repr(value))
        if Fraction(shortest) in ((Fraction(value) + Fraction(math.nextafter(value, side))) / 2
                                  for side in (-math.inf, math.inf)):
            sign, digits, exp = _inside(value, math.nextafter(value, -math.inf),
                                        math.nextafter(value, math.inf), 17).as_tuple()
            text = "".join(map(str, digits)).rstrip("0")
            power = len(digits) - 1 + int(exp)
            return (f"{'-' if sign else ''}{text[0]}{'.' + text[1:] if len(text) > 1 else ''}"
                    f"e+{power:02d}")
    text = repr(value)
    if "e" in text:
        return text  # Python and PostgreSQL agree on `1.5e-05` and `1e+16`
    text = text.removesuffix(".0")
    if abs(value) < _FIXED_HI:
        return text
    # 1e15 <= |value| < 1e16: fixed in Python, scientific in PostgreSQL.
    sign, digits = ("-", text[1:]) if text[0] == "-" else ("", text)
    whole, _, fraction = digits.partition(".")
    exp, digits = len(whole) - 1, (whole + fraction).rstrip("0")
    return f"{sign}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e+{exp:02d}"


def csv_numbers(values: pa.Array) -> list[str]:
    """A float8 column as COPY writes it: float8out's text, '' for NULL (Arrow formats the
    common values in C; the ones whose notation differs are written by pg_float8)."""
    arrow = pc.cast(values, pa.string())
    text = arrow.fill_null("").to_pylist()
    x = values.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        ax = np.abs(x)
        odd = ~np.isfinite(x) | ((ax < _FIXED_LO) & (ax != 0)) | (ax >= _FIXED_HI)
    odd |= np.asarray(pc.match_substring(arrow, "e").fill_null(False))
    odd &= ~np.asarray(values.is_null())
    for i in np.flatnonzero(odd):
        text[i] = pg_float8(float(x[i]))
    return text


def csv_field(value: str | None) -> str:
    """One text field as COPY (FORMAT csv) writes it: NULL empty, '' quoted, quoted when it
    holds a comma, quote, CR or LF (quotes doubled)."""
    if value is None:
        return ""
    if value == "" or any(c in value for c in ',"\n\r'):
        return '"' + value.replace('"', '""') + '"'
    return value


def _csv_time(times: pa.Array) -> list[str]:
    """`sds_iso_time(t, interval '0')`: `2019-07-01T00:00:00+0000`, `.ffffff` when present."""
    try:
        whole = pc.cast(times, pa.timestamp("s", tz="UTC"))  # refused when any has micros
    except pa.ArrowInvalid:
        return [format_local(t, UTC) for t in times.to_pylist()]
    return pc.strftime(whole, format="%Y-%m-%dT%H:%M:%S+0000").to_pylist()


def _column(table: pa.Table, col: Column, scan: Scan, csv: bool) -> list[object]:
    arr = table.column(col.name).combine_chunks()
    if col.dtype == "real":
        values = converted(float8(arr), col, unit_for(col, scan.units))
        return csv_numbers(values) if csv else values.to_pylist()
    if col.dtype == TS:
        return _csv_time(arr) if csv else arr.to_pylist()
    names = arr.to_pylist()
    if not csv:
        return names
    if col.dtype == "text":
        names = [None if v is None else spreadsheet.escape(v) for v in names]
    return [csv_field(v) for v in names]


def _following(table: pa.Table, limit: int) -> Position | None:
    if table.num_rows <= limit:
        return None
    return Position(table.column("time")[limit].as_py(), table.column("device")[limit].as_py())


def json_body(table: pa.Table, scan: Scan, local_tz: tzinfo | None, conn_tz: tzinfo,
              ) -> tuple[Iterator[bytes], Position | None]:
    """The JSON body of the page (table: the page's rows and the next page's first row, in
    order) and the next page's key, as serve.api.data writes a hot page."""
    following = _following(table, scan.limit)
    rows = table.slice(0, scan.limit)
    times: list[datetime] = rows.column("time").to_pylist()
    if getattr(conn_tz, "key", None) not in _UTC_KEYS and conn_tz is not UTC:
        times = [t.astimezone(conn_tz) for t in times]  # as the session's TimeZone reads them
    columns = [times if c.dtype == TS else _column(rows, c, scan, False) for c in scan.columns]
    tuples = list(zip(*columns, times, rows.column("device").to_pylist(), strict=True))
    writer = render.JsonRows([c.name for c in scan.columns], local_tz)
    return render.json_body(writer, tuples, list, len(tuples) + 1), following


def csv_body(table: pa.Table, scan: Scan, local_tz: tzinfo | None,
             ) -> tuple[Iterator[bytes], Position | None]:
    """The CSV body of the page (header line included) and the next page's key."""
    following = _following(table, scan.limit)
    rows = table.slice(0, scan.limit)
    columns = [_column(rows, c, scan, True) for c in scan.columns]
    if local_tz is not None:
        columns.append([format_local(t, local_tz) for t in rows.column("time").to_pylist()])
    if len(columns) == 1:  # COPY quotes a lone `\.` (an end-of-data marker in CSV input)
        columns[0] = ['"\\."' if v == "\\." else v for v in columns[0]]
    lines = "".join(",".join(r) + "\n" for r in zip(*columns, strict=True))
    header = render.csv_header(scan.columns, local_tz is not None)
    return iter((header + lines.encode(),)), following


def body(scan: Scan, local_tz: tzinfo | None, conn: psycopg.Connection,
         ) -> tuple[Iterator[bytes], Position | None]:
    """The page `scan.cold.page` holds, JSON or CSV as `scan.csv` says, and the next page's
    key (`conn`: the page's connection, for its session time zone)."""
    assert scan.cold is not None
    if scan.csv:
        return csv_body(scan.cold.page, scan, local_tz)
    return json_body(scan.cold.page, scan, local_tz, conn.info.timezone)
