"""Pure parts of the cold tier's rewrites (aggregate.coldrewrite, aggregate.coldrelabel): a hot
row wins over its cold copy, and a relabel changes exactly the device's rows in its range."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from aggregate.coldrelabel import relabel_table
from aggregate.coldrewrite import without_hot
from shared import coldfiles

T0 = datetime(2025, 3, 1, tzinfo=UTC)
A = UUID("00000000-0000-0000-0000-00000000000a")
B = UUID("00000000-0000-0000-0000-00000000000b")


def _rows(device: str, n: int, location: UUID | None, tair: float) -> list[tuple[object, ...]]:
    blank = (None,) * (len(coldfiles.NAMES) - 4)
    return [(T0 + timedelta(minutes=5 * i), device, location, tair, *blank) for i in range(n)]


def test_a_hot_row_replaces_its_cold_copy_and_nothing_else() -> None:
    cold = coldfiles.table_from_rows(_rows("D1", 4, A, 1.0) + _rows("D2", 2, A, 1.0))
    hot = coldfiles.table_from_rows(_rows("D1", 4, A, 2.0)[1:3])
    left = without_hot(cold, hot)
    assert sorted((r["device"], r["time"]) for r in left.to_pylist()) == [
        ("D1", T0), ("D1", T0 + timedelta(minutes=15)), ("D2", T0),
        ("D2", T0 + timedelta(minutes=5))]
    assert without_hot(cold, coldfiles.table_from_rows([])).num_rows == 6


def test_a_relabel_changes_the_device_rows_in_its_range_only() -> None:
    table = coldfiles.table_from_rows(_rows("D1", 6, A, 1.0) + _rows("D2", 6, A, 1.0)
                                      + _rows("D3", 2, None, 1.0))
    lo, hi = T0 + timedelta(minutes=10), T0 + timedelta(minutes=25)
    out, moved = relabel_table(table, "D1", B, lo, hi)
    assert moved == [lo, lo + timedelta(minutes=5), lo + timedelta(minutes=10)]
    located = {(r["device"], r["time"]): r["location"] for r in out.to_pylist()}
    assert {k for k, v in located.items() if v == str(B)} == {("D1", t) for t in moved}
    assert out.num_rows == table.num_rows
    # Open-ended, and readings that had no location get one too; a second pass moves nothing.
    again, moved_again = relabel_table(out, "D1", B, lo, None)
    assert moved_again == [T0 + timedelta(minutes=25)]
    assert relabel_table(again, "D1", B, lo, None)[1] == []
    assert relabel_table(table, "D3", B, T0, None)[1] == [T0, T0 + timedelta(minutes=5)]
