"""What the cold tier looks like and whether it needs an operator (`sds cold status`,
`deploy/run.sh status`; docs/operations.md "Cold tier"): files, bytes and rows by state, the
oldest hot and cold readings, where the files are, the scheduler's last mover run and its
outcome, and the problems worth a look. Read-only; functions take `conn` first."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg

COLD_JOB = "cold"  # the scheduler's mover job (aggregate.jobs.run_cold), in aggregate_runs
# A file that is not live nor gone a day after it was created: a run was interrupted and no run
# has finished it since (the mover runs hourly and recovers first), or recovery itself fails.
STUCK_AFTER = timedelta(days=1)
# The mover's last success older than this (while it is on): it has not run or kept failing.
SILENT_AFTER = timedelta(days=2)


@dataclass(slots=True)
class Status:
    """The tier at one moment."""

    by_state: dict[str, tuple[int, int, int]]  # state -> (files, bytes, rows)
    oldest_hot: datetime | None
    oldest_cold: datetime | None
    newest_cold: datetime | None
    stuck: int  # files neither live nor gone after STUCK_AFTER
    relabels: int  # queued relabels of cold rows (cold_relabels)
    oldest_relabel: datetime | None
    last_start: datetime | None = None
    last_ok: datetime | None = None
    last_error: str | None = None
    last_error_at: datetime | None = None
    problems: list[str] = field(default_factory=list)


def status(conn: psycopg.Connection, *, hot_days: int, now: datetime | None = None) -> Status:
    """The tier's figures and, in `problems`, what an operator should look at."""
    now = now or datetime.now(UTC)
    by_state = {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in conn.execute(
        "SELECT state, count(*), coalesce(sum(bytes), 0), coalesce(sum(rows), 0)"
        " FROM cold_files GROUP BY state").fetchall()}
    oldest_hot = conn.execute("SELECT min(time) FROM calibrated").fetchone()
    span = conn.execute("SELECT min(first_time), max(last_time) FROM cold_files"
                        " WHERE state = 'live'").fetchone()
    stuck = conn.execute("SELECT count(*) FROM cold_files WHERE state <> 'live'"
                         " AND created < %s", (now - STUCK_AFTER,)).fetchone()
    relabels = conn.execute("SELECT count(*), min(requested) FROM cold_relabels").fetchone()
    out = Status(by_state, oldest_hot[0] if oldest_hot else None,
                 span[0] if span else None, span[1] if span else None,
                 int(stuck[0]) if stuck else 0, int(relabels[0]) if relabels else 0,
                 relabels[1] if relabels else None)
    run = conn.execute("SELECT last_start, last_ok, last_error, last_error_at"
                       " FROM aggregate_runs WHERE job = %s", (COLD_JOB,)).fetchone()
    if run:
        out.last_start, out.last_ok, out.last_error, out.last_error_at = run
    out.problems = problems(out, hot_days=hot_days, now=now)
    return out


def failing(s: Status) -> bool:
    """Whether the mover's last run ended in an error."""
    return s.last_error_at is not None and (s.last_ok is None or s.last_error_at > s.last_ok)


def problems(s: Status, *, hot_days: int, now: datetime) -> list[str]:
    """What needs an operator, one line each (empty: nothing)."""
    out = []
    if s.stuck:
        out.append(f"{s.stuck} cold file(s) neither live nor removed for over a day: an "
                   "interrupted move or rewrite that no run finished (run `sds cold move` and "
                   "read its error)")
    if failing(s):
        out.append(f"the last mover run failed at {s.last_error_at:%Y-%m-%d %H:%M} UTC: "
                   f"{s.last_error}")
    if hot_days > 0 and s.last_start is not None and (
            s.last_ok is None or now - s.last_ok > SILENT_AFTER):
        out.append("the mover has not finished a run for over two days")
    if s.oldest_relabel is not None and now - s.oldest_relabel > STUCK_AFTER:
        out.append(f"{s.relabels} relabel(s) of cold readings queued for over a day")
    return out


__all__ = ["COLD_JOB", "Status", "failing", "problems", "status"]
