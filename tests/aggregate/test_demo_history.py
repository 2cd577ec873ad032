"""The demo shows the cold tier at once (issue 36): `sds demo --history-days N`, as
deploy/run.sh runs it (N = 500), writes 5-minute readings of every demo device with their
rollups from N days ago, and the mover with the default SDS_HOT_DAYS then has whole months to
move, which `sds cold status` lists. Here only the oldest 70 of those days are written
(--history-until), which is the part the mover takes."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from admin.cli import main
from admin.demo import DEMO_SITES
from aggregate import coldmove
from shared.config import Settings


@pytest.mark.timeout(900)  # ~100k readings written and rolled up
def test_demo_history_gives_the_cold_tier_months_to_move(database_url: str,
                                                         tmp_path: Path) -> None:
    env = {"SDS_DATABASE_URL": database_url, "SDS_COLD_PATH": str(tmp_path / "cold"),
           "SDS_DB_ROLES": "false"}
    began = time.monotonic()
    made = CliRunner().invoke(main, ["demo", "--history-days", "470",
                                      "--history-until", "400"], env=env,
                              catch_exceptions=False)
    seeded = time.monotonic() - began
    assert made.exit_code == 0, made.output
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start, end = today - timedelta(days=470), today - timedelta(days=400)
    with psycopg.connect(database_url) as conn:
        counts: dict[str, int] = dict(conn.execute(
            "SELECT device, count(*) FROM calibrated GROUP BY 1").fetchall())
        bad = conn.execute("SELECT count(*) FROM calibrated WHERE tdew IS NULL OR rh > 1"
                           " OR rh <= 0 OR slp IS NULL OR vpd < 0").fetchone()
        daily = conn.execute("SELECT count(*), count(*) FILTER (WHERE low_quality)"
                             " FROM daily").fetchone()
    per_device = int((end - start) / timedelta(minutes=5))
    assert counts == {d[0]: per_device for d in DEMO_SITES}
    assert bad == (0,)
    assert daily is not None and daily[0] >= 5 * 69 and daily[1] <= 5 * 2  # partial edges only
    moved_at = time.monotonic()
    moved = CliRunner().invoke(main, ["cold", "move"], env=env, catch_exceptions=False)
    move_s = time.monotonic() - moved_at
    assert moved.exit_code == 0, moved.output
    edge = coldmove.cutoff(Settings().hot_days)
    months = (edge.year - start.year) * 12 + edge.month - start.month
    assert months >= 1 and f"{months} file(s) made live" in moved.output
    shown = CliRunner().invoke(main, ["cold", "status"], env=env, catch_exceptions=False)
    assert shown.output.startswith(f"live: {months} files, ")
    print(f"demo history: {sum(counts.values())} readings, seed and rollups {seeded:.1f} s;"
          f" {months} cold months moved in {move_s:.1f} s\n{shown.output}")
