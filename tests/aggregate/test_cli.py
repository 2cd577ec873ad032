"""`sds aggregate run|backfill|status|mark-location` against a real database."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from click.testing import CliRunner

from admin.aggregate import aggregate
from tests.support.readings import insert_readings, series
from tests.support.rollups import fetch, make_location


def _invoke(database_url: str, *args: str):
    runner = CliRunner()
    return runner.invoke(aggregate, list(args), env={"SDS_DATABASE_URL": database_url},
                         catch_exceptions=False)


def test_run_status_backfill(db, database_url) -> None:
    loc = make_location(db, "America/Santiago", lat=-33.4, lon=-70.6)
    start = datetime(2024, 9, 7, tzinfo=UTC)
    insert_readings(db, "C1", loc, series(start, start + timedelta(days=2),
                                          tair=lambda i, t: 12.0), marks=True)
    db.commit()

    before = _invoke(database_url, "status")
    assert before.exit_code == 0
    assert "no job has run yet" in before.output
    assert "hourly" in before.output and " 48 " in before.output  # pending hourly marks
    # The lag for people (issue 34: it was printed `0:00:26.138358`).
    assert re.search(r"^hourly +48 +\d+ s ", before.output, re.M), before.output

    result = _invoke(database_url, "run")
    assert result.exit_code == 0, result.output
    assert "hourly: 48 buckets recomputed" in result.output
    assert "daily: 3 buckets recomputed" in result.output

    after = _invoke(database_url, "status")
    assert "job daily: last start" in after.output and "by cli:" in after.output
    assert "scheduler leader: none" in after.output
    assert fetch(db, "SELECT count(*) AS n FROM rollup_dirty")[0]["n"] == 0

    db.execute("DELETE FROM daily")
    db.commit()
    filled = _invoke(database_url, "backfill", "--table", "daily", "--device", "C1",
                     "--from", "2024-09-07", "--to", "2024-09-09T00:00:00Z")
    assert filled.exit_code == 0, filled.output
    assert "3 rows written" in filled.output
    days = [r["time"] for r in fetch(db, "SELECT time FROM daily ORDER BY time")]
    # 2024-09-08 begins at 04:00Z: local midnight does not exist in Santiago that day.
    assert datetime(2024, 9, 8, 4, tzinfo=UTC) in days


def test_bad_arguments_are_clear_errors(database_url) -> None:
    bad = _invoke(database_url, "backfill", "--from", "yesterday")
    assert bad.exit_code == 2 and "--from" in bad.output and "ISO 8601" in bad.output
    order = _invoke(database_url, "backfill", "--from", "2024-09-09", "--to", "2024-09-01")
    assert order.exit_code == 2 and "after --from" in order.output
    loc = _invoke(database_url, "mark-location", "not-a-uuid")
    assert loc.exit_code == 2 and "uuid" in loc.output
    missing = _invoke(database_url, "mark-location", "00000000-0000-0000-0000-000000000000")
    assert missing.exit_code == 1 and "unknown location" in missing.output
