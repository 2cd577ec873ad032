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
from collections.abc import Callable, Iterator
from datetime import UTC, tzinfo
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np
import orjson
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
_WHOLE = r"^(-?[0-9]+)$"  # a whole number as Arrow writes it (odd notations go elsewhere)
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
            inside = _inside(value, math.nextafter(value, -math.inf),
                             math.nextafter(value, math.inf), 17).as_tuple()
            mantissa = "".join(map(str, inside.digits)).rstrip("0")
            power = len(inside.digits) - 1 + int(inside.exponent)
            return (f"{'-' if inside.sign else ''}{mantissa[0]}"
                    f"{'.' + mantissa[1:] if len(mantissa) > 1 else ''}e+{power:02d}")
    text = repr(value)
    if "e" in text:
        return text  # Python and PostgreSQL agree on `1.5e-05` and `1e+16`
    text = text.removesuffix(".0")
    if abs(value) < _FIXED_HI:
        return text
    # 1e15 <= |value| < 1e16: fixed in Python, scientific in PostgreSQL.
    sign, unsigned = ("-", text[1:]) if text[0] == "-" else ("", text)
    whole, _, fraction = unsigned.partition(".")
    exp, kept = len(whole) - 1, (whole + fraction).rstrip("0")
    return f"{sign}{kept[0]}{'.' + kept[1:] if len(kept) > 1 else ''}e+{exp:02d}"


def csv_numbers(values: pa.Array) -> pa.Array:
    """A float8 column as COPY writes it: float8out's text, '' for NULL (Arrow formats the
    common values in C; the ones whose notation differs are written by pg_float8)."""
    arrow = pc.cast(values, pa.string())
    x = values.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        ax = np.abs(x)
        odd = ~np.isfinite(x) | ((ax < _FIXED_LO) & (ax != 0)) | (ax >= _FIXED_HI)
    odd |= np.asarray(pc.match_substring(arrow, "e").fill_null(False))
    odd &= ~np.asarray(values.is_null())
    return _patched(arrow.fill_null(""), odd, lambda i: pg_float8(float(x[i])))


def _patched(text: pa.Array, odd: np.ndarray, write: Callable[[int], str]) -> pa.Array:
    """`text` with the values at the indexes `odd` marks rewritten by `write` (rare)."""
    if not odd.any():
        return text
    values = text.to_pylist()
    for i in np.flatnonzero(odd):
        values[i] = write(int(i))
    return pa.array(values, pa.string())


def csv_field(value: str | None, *, alone: bool = False) -> str:
    """One text field as COPY (FORMAT csv) writes it: NULL empty, '' quoted, quoted when it
    holds a comma, quote, CR or LF (quotes doubled), or is a lone `\\.` (`alone`)."""
    if value is None:
        return ""
    if value == "" or any(c in value for c in ',"\n\r') or (alone and value == "\\."):
        return '"' + value.replace('"', '""') + '"'
    return value


def csv_texts(arr: pa.Array, *, guard: bool, alone: bool = False) -> pa.Array:
    """A text column as COPY writes it, made spreadsheet-safe first when `guard`
    (shared.spreadsheet); `alone`: the only column, where COPY also quotes a lone `\\.`."""
    odd = pc.match_substring_regex(arr, _QUOTED_ALONE if alone else _QUOTED)
    if guard:
        odd = pc.or_(odd, pc.match_substring_regex(arr, _FORMULA))
    values = arr.to_pylist()
    return _patched(arr.fill_null(""), np.asarray(odd.fill_null(False)), lambda i: csv_field(
        spreadsheet.escape(values[i]) if guard else values[i], alone=alone))


# What COPY quotes (an empty string, a comma, quote, CR or LF) and what starts a formula.
_QUOTED = r'^$|[,"\r\n]'
_QUOTED_ALONE = _QUOTED + r"|^\\\.$"
_FORMULA = "^[" + "".join("\\" + c if c in "-" else c for c in spreadsheet.FORMULA_STARTS) + "]"


def _csv_time(times: pa.Array) -> pa.Array:
    """`sds_iso_time(t, interval '0')`: `2019-07-01T00:00:00+0000`, `.ffffff` when present."""
    try:
        whole = pc.cast(times, pa.timestamp("s", tz="UTC"))  # refused when any has micros
    except pa.ArrowInvalid:
        return pa.array([format_local(t, UTC) for t in times.to_pylist()], pa.string())
    return pc.strftime(whole, format="%Y-%m-%dT%H:%M:%S+0000")


def numbers(arr: pa.Array, col: Column, unit: units.Unit | None, *, json: bool) -> pa.Array:
    """A real column as the page writes it: JSON (orjson's text) or CSV (float8out's).

    Unconverted, the text is Arrow's shortest text of the float32 itself: PostgreSQL's float8
    of that text prints back as the same digits, and where the notations differ (tiny and big
    values, and from 2^20 on, where the shortest text can lie on a rounding bound: float8)
    the value goes the long way. Converted values are computed in float8 first."""
    scale, offset = units.factors(col, unit) if unit is not None else (1.0, 0.0)
    if (scale, offset) != (1.0, 0.0):
        values = converted(float8(arr), col, unit)
        return json_numbers(values) if json else csv_numbers(values)
    text = pc.cast(arr, pa.string())
    with np.errstate(invalid="ignore"):
        ax = np.abs(arr.to_numpy(zero_copy_only=False).astype(np.float64))
        odd = ~np.isfinite(ax) | ((ax < _FIXED_LO * 1.0001) & (ax != 0)) | (ax >= 2.0 ** 20)
    odd |= np.asarray(pc.match_substring(text, "e").fill_null(False))
    odd &= ~np.asarray(arr.is_null())
    if json:
        text = pc.replace_substring_regex(text, _WHOLE, r"\1.0")
    if odd.any():
        slow = float8(arr.filter(pa.array(odd))).to_pylist()
        written = dict(zip(np.flatnonzero(odd).tolist(), slow, strict=True))
        return _patched(text.fill_null("null" if json else ""), odd, lambda i: (
            orjson.dumps(written[i]).decode() if json else pg_float8(written[i])))
    return text.fill_null("null" if json else "")


def _following(table: pa.Table, limit: int) -> Position | None:
    if table.num_rows <= limit:
        return None
    return Position(table.column("time")[limit].as_py(), table.column("device")[limit].as_py())


def _json_times(times: pa.Array, conn_tz: tzinfo) -> pa.Array:
    """`time` as orjson writes the datetime psycopg reads (`"2019-07-01T00:00:00Z"` in a
    UTC session; microseconds or another session zone: orjson's own text of each)."""
    if getattr(conn_tz, "key", None) in _UTC_KEYS or conn_tz is UTC:
        try:
            whole = pc.cast(times, pa.timestamp("s", tz="UTC"))
            return pc.strftime(whole, format='"%Y-%m-%dT%H:%M:%SZ"')
        except pa.ArrowInvalid:
            pass
    return pa.array([orjson.dumps(t.astimezone(conn_tz), option=orjson.OPT_UTC_Z).decode()
                     for t in times.to_pylist()], pa.string())


def json_numbers(values: pa.Array) -> pa.Array:
    """A float8 column as orjson writes each value (`21.0`, `0.00001`, `1e+16`, null for NULL,
    NaN and infinities): Arrow's text where the two notations agree (fixed, |v| in [1e-4,
    1e15), with `.0` added to whole numbers), orjson's own for the rest."""
    arrow = pc.cast(values, pa.string())
    x = values.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        ax = np.abs(x)
        odd = ~np.isfinite(x) | ((ax < _FIXED_LO) & (ax != 0)) | (ax >= _FIXED_HI)
    odd |= np.asarray(pc.match_substring(arrow, "e").fill_null(False))
    odd &= ~np.asarray(values.is_null())
    text = pc.replace_substring_regex(arrow, _WHOLE, r"\1.0")  # orjson writes 21 as 21.0
    return _patched(text.fill_null("null"), odd, lambda i: orjson.dumps(float(x[i])).decode())


def _json_texts(arr: pa.Array) -> pa.Array:
    """A text column as JSON strings (orjson's escaping where a value needs any)."""
    odd = np.asarray(pc.match_substring_regex(arr, r'["\\\x00-\x1f]').fill_null(False))
    quoted = pc.binary_join_element_wise('"', arr, '"', "")
    values = arr.to_pylist()
    return _patched(quoted.fill_null("null"), odd, lambda i: orjson.dumps(values[i]).decode())


def json_body(table: pa.Table, scan: Scan, local_tz: tzinfo | None, conn_tz: tzinfo,
              ) -> tuple[Iterator[bytes], Position | None]:
    """The JSON body of the page (table: the page's rows and the next page's first row, in
    order) and the next page's key, byte for byte as serve.render writes the hot page with
    orjson: each value made JSON text as orjson writes it, the objects joined by Arrow."""
    following = _following(table, scan.limit)
    rows = table.slice(0, scan.limit).combine_chunks()
    if not rows.num_rows:
        return iter((b"[]",)), following
    names = [c.name for c in scan.columns] + (["local_time"] if local_tz is not None else [])
    texts: list[pa.Array] = []
    for col in scan.columns:
        arr = rows.column(col.name).chunk(0)
        texts.append(numbers(arr, col, unit_for(col, scan.units), json=True)
                     if col.dtype == "real" else
                     _json_times(arr, conn_tz) if col.dtype == TS else _json_texts(arr))
    if local_tz is not None:  # local_time is formatted from the row's time, after the values
        texts.append(_json_texts(pa.array([format_local(t, local_tz) for t in
                                           rows.column("time").to_pylist()], pa.string())))
    parts: list[Any] = []
    for k, (name, text) in enumerate(zip(names, texts, strict=True)):
        parts += [("{" if k == 0 else ",") + orjson.dumps(name).decode() + ":", text]
    objects = pc.binary_join_element_wise(*parts, "}", "")
    offsets = pa.array([0, len(objects)], pa.int32())
    body = pc.binary_join(pa.ListArray.from_arrays(offsets, objects), ",")[0].as_py()
    return iter((b"[" + body.encode() + b"]",)), following


def csv_body(table: pa.Table, scan: Scan, local_tz: tzinfo | None,
             ) -> tuple[Iterator[bytes], Position | None]:
    """The CSV body of the page (header line included) and the next page's key: each column
    made text as COPY writes it, the lines joined by Arrow."""
    following = _following(table, scan.limit)
    rows = table.slice(0, scan.limit).combine_chunks()
    header = render.csv_header(scan.columns, local_tz is not None)
    if not rows.num_rows:
        return iter((header,)), following
    columns: list[pa.Array] = []
    for col in scan.columns:
        arr = rows.column(col.name).chunk(0)
        columns.append(
            numbers(arr, col, unit_for(col, scan.units), json=False)
            if col.dtype == "real" else
            _csv_time(arr) if col.dtype == TS else
            csv_texts(arr, guard=col.dtype == "text", alone=len(scan.columns) == 1
                      and local_tz is None))
    if local_tz is not None:
        columns.append(pa.array([format_local(t, local_tz)
                                 for t in rows.column("time").to_pylist()], pa.string()))
    lines = pc.binary_join_element_wise(*columns, ",") if len(columns) > 1 else columns[0]
    offsets = pa.array([0, len(lines)], pa.int32())
    text = pc.binary_join(pa.ListArray.from_arrays(offsets, lines), "\n")[0].as_py()
    return iter((header + text.encode() + b"\n",)), following


def body(scan: Scan, local_tz: tzinfo | None, conn: psycopg.Connection,
         ) -> tuple[Iterator[bytes], Position | None]:
    """The page `scan.cold.page` holds, JSON or CSV as `scan.csv` says, and the next page's
    key (`conn`: the page's connection, for its session time zone)."""
    assert scan.cold is not None
    if scan.csv:
        return csv_body(scan.cold.page, scan, local_tz)
    return json_body(scan.cold.page, scan, local_tz, conn.info.timezone)
