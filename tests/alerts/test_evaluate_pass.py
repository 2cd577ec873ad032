"""Evaluation passes in-process on a real database, as the evaluator's role sds_alerts: the
`silent` kind, hourly and daily rules on rollup buckets (a recomputed bucket re-evaluated, an
older one ignored, nothing repeated), another organisation's device never watched, and the
operator CLI and the demo's rule."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import psycopg
from click.testing import CliRunner

from admin.cli import main
from alerts.evaluator import machine
from alerts.evaluator.passes import Evaluator
from shared import alertrules, db
from shared.config import Settings
from tests.support.alerting import add_rule, events
from tests.support.ingesting import make_site, now_slot
from tests.support.readings import insert_readings


def evaluator_conn(settings: Settings) -> psycopg.Connection:
    return db.connect(settings, name="test-alerts", role=db.ROLE_ALERTS)


def test_silent_device_fires_and_a_new_reading_resolves(
        conn: psycopg.Connection, settings: Settings, database_url: str) -> None:
    site = make_site(conn, device="S1")
    other = make_site(conn, device="S2", org_name="Other Org")
    conn.execute("UPDATE devices SET last_post = now() - interval '31 minutes'")
    conn.commit()
    add_rule(database_url, site.org, {"name": "Dead", "kind": "silent",
                                      "scope": {"organisation": True},
                                      "condition": {"threshold": 3}})
    ev = Evaluator(settings)
    with evaluator_conn(settings) as work:
        ev.reload(work)
        out = ev.run(work, None, rollups=False)
        assert [(e.device, e.kind) for e in out.events] == [("S1", "firing")]
        assert 31 <= out.events[0].value < 32 and out.events[0].unit == "min"
        assert ev.run(work, None, rollups=False).events == []  # still silent: nothing new
        conn.execute("UPDATE devices SET last_post = now() WHERE name = 'S1'")
        conn.commit()
        out = ev.run(work, {"S1"}, rollups=False)
        assert [(e.device, e.kind) for e in out.events] == [("S1", "resolved")]
    assert [e[0] for e in events(database_url)] == ["S1", "S1"]
    assert other.device not in {e[0] for e in events(database_url)}


def test_hourly_and_daily_rules_follow_rewritten_buckets(
        conn: psycopg.Connection, settings: Settings, database_url: str) -> None:
    site = make_site(conn, device="H1")
    make_site(conn, device="H2", org_name="Other Org")
    add_rule(database_url, site.org, {"name": "Cold hour", "table": "hourly", "column": "tair",
                                      "scope": {"location": str(site.location)},
                                      "condition": {"op": "<", "threshold": 0},
                                      "clear": {"op": ">=", "threshold": 1}})
    add_rule(database_url, site.org, {"name": "Wet day", "table": "daily", "column": "precip",
                                      "scope": {"organisation": True},
                                      "condition": {"op": ">", "threshold": 1},
                                      "units": {"size": "in"}})
    hour = now_slot(120).replace(minute=0)
    day = hour.replace(hour=0)

    def bucket(table: str, device: str, t: object, location: UUID, **values: float) -> None:
        cols = ", ".join(values)
        marks = ", ".join(["%s"] * len(values))
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in values)
        conn.execute(f"INSERT INTO {table} (time, device, location, {cols}) VALUES"
                     f" (%s, %s, %s, {marks}) ON CONFLICT (device, time) DO UPDATE SET {sets},"
                     " update_time = now()", (t, device, location, *values.values()))
        conn.commit()

    other_loc = conn.execute("SELECT location_id FROM deployments dp JOIN devices d"
                             " ON d.id = dp.device_id WHERE d.name = 'H2'").fetchone()[0]
    ev = Evaluator(settings)
    with evaluator_conn(settings) as work:
        ev.reload(work)
        bucket("hourly", "H1", hour, site.location, tair=-2.0)
        bucket("hourly", "H2", hour, other_loc, tair=-9.0)  # another organisation's device
        bucket("daily", "H1", day, site.location, precip=30.0)  # 30 mm > 1 in (25.4 mm)
        out = ev.run(work, None, rollups=True)
        assert sorted((e.device, e.kind, e.column_name, e.value)
                      for e in out.events) == [("H1", "firing", "precip", 30.0),
                                               ("H1", "firing", "tair", -2.0)]
        assert ev.run(work, None, rollups=True).events == []  # read again: nothing repeated
        # The same hour recomputed warmer: re-evaluated, the clear condition resolves it.
        bucket("hourly", "H1", hour, site.location, tair=1.5)
        # A rewritten bucket older than the newest one applied is not evaluated.
        bucket("hourly", "H1", hour - timedelta(hours=1), site.location, tair=-5.0)
        out = ev.run(work, None, rollups=True)
        assert [(e.kind, e.at) for e in out.events] == [("resolved", hour)]
    # A new evaluator (a restart) starts from the stored cursors: nothing is repeated.
    again = Evaluator(settings)
    with evaluator_conn(settings) as work:
        again.reload(work)
        assert again.run(work, None, rollups=True).events == []
    assert len(events(database_url)) == 3


def _cli(url: str, *args: str) -> str:
    result = CliRunner().invoke(main, list(args), env={"SDS_DATABASE_URL": url},
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_operator_cli_creates_lists_and_deletes(conn: psycopg.Connection,
                                                database_url: str) -> None:
    make_site(conn, device="C1", org_name="Cli Org")
    out = _cli(database_url, "alert", "create", "--org", "Cli Org",
               '{"name": "Frost", "table": "calibrated", "column": "tair", "scope": {"device":'
               ' "C1"}, "condition": {"op": "<", "threshold": 32}, "units": {"temp": "f"}}')
    rid = out.split()[2].rstrip(":")
    assert "tair < 32 F" in out
    listed = _cli(database_url, "alert", "list", "--org", "Cli Org")
    assert rid in listed and "1 rule(s)" in listed
    bad = CliRunner().invoke(main, ["alert", "create", "--org", "Cli Org", '{"name": ""}'],
                             env={"SDS_DATABASE_URL": database_url})
    assert bad.exit_code != 0 and "name" in bad.output
    assert "deleted" in _cli(database_url, "alert", "delete", rid)
    assert "0 rule(s)" in _cli(database_url, "alert", "list")


def test_the_demo_has_a_frost_rule(database_url: str) -> None:
    _cli(database_url, "demo")
    listed = _cli(database_url, "alert", "list", "--org", "Demo Farms")
    assert "Frost" in listed and "tair < 0 C for 15 min" in listed


def test_a_pass_lost_in_a_crash_is_written_again_with_the_same_event_ids(
        conn: psycopg.Connection, settings: Settings, database_url: str) -> None:
    # The evaluator commits without waiting for the WAL flush: a database crash can lose its
    # last pass (events, states and cursors together) after the deliverer saw the events.
    # Evaluated again, the events must carry the same ids (the webhook-id of their delivery).
    site = make_site(conn, device="D1")
    add_rule(database_url, site.org, {"name": "Cold", "table": "calibrated", "column": "tair",
                                      "scope": {"device": "D1"},
                                      "condition": {"op": "<", "threshold": 0},
                                      "clear": {"op": ">=", "threshold": 1}})
    insert_readings(conn, "D1", site.location, [
        {"time": now_slot(minutes), "tair": tair}
        for minutes, tair in ((20, -1.0), (15, 2.0), (10, -3.0))])
    conn.commit()

    def evaluate() -> list[str]:
        ev = Evaluator(settings)
        with evaluator_conn(settings) as work:
            ev.reload(work)
            ev.run(work, None, rollups=False)
        with psycopg.connect(database_url) as c:
            return [str(r[0]) for r in c.execute("SELECT id FROM alert_events ORDER BY at")]

    first = evaluate()
    assert len(first) == 3
    conn.execute("DELETE FROM alert_events; DELETE FROM alert_states; DELETE FROM alert_cursors")
    conn.commit()
    assert evaluate() == first


def test_the_rollup_jobs_notify_the_evaluator(conn: psycopg.Connection,
                                              settings: Settings) -> None:
    # aggregate/jobs.py sends NOTIFY sds_rollups after a batch of buckets is rewritten, at
    # commit: the evaluator's cue for hourly and daily rules.

    from aggregate import jobs

    site = make_site(conn, device="R1")
    t = now_slot(60)
    insert_readings(conn, "R1", site.location, [{"time": t, "tair": -1.0}], marks=True)
    conn.commit()
    with psycopg.connect(settings.database_url, autocommit=True) as listener:
        listener.execute("LISTEN sds_rollups")
        pool = db.make_pool(settings, name="test-rollups", role=db.ROLE_AGGREGATE)
        try:
            assert jobs.drain(pool, table="hourly", low_quality_pct=80.0) >= 1
            assert jobs.drain(pool, table="hourly", low_quality_pct=80.0) == 0
        finally:
            pool.close()
        heard = [n.payload for n in listener.notifies(timeout=2.0, stop_after=2)]
    assert heard == ["hourly"]  # once: the empty second run sends nothing


def test_passes_of_one_reading_equal_the_state_machine(
        conn: psycopg.Connection, settings: Settings, database_url: str) -> None:
    """A pass per reading (the live shape) skips the rules that cannot change: ok without a
    value meeting the condition, firing without one meeting the clear condition. The events
    over a plan that dwells in the hysteresis band while firing, and clears for shorter and
    longer than `clear_for`, are the pure state machine's."""
    site = make_site(conn, device="P1")
    body = {"name": "Cold", "table": "calibrated", "column": "tair", "scope": {"device": "P1"},
            "condition": {"op": "<", "threshold": 0}, "clear": {"op": ">=", "threshold": 1},
            "for": 600, "clear_for": 900}
    add_rule(database_url, site.org, body)
    plan = [-1, -2, -1, 0.5, 0.5, 2, 0.5, -1, 2, 2, 2, 2, 0.5, 2, -1, -1, -1, 0.5, 2, 2, 2, 2]
    times = [now_slot(5 * (len(plan) - i)) for i in range(len(plan))]
    ev = Evaluator(settings)
    with evaluator_conn(settings) as work:
        ev.reload(work)
        for at, tair in zip(times, plan, strict=True):
            insert_readings(conn, "P1", site.location, [{"time": at, "tair": tair}])
            conn.commit()
            ev.run(work, {"P1"}, rollups=False)
    _state, want = machine.run(alertrules.parse(body), list(zip(times, plan, strict=True)))
    assert len(want) >= 4
    assert [(e[1], e[2]) for e in events(database_url)] == [(t.kind, t.at) for t in want]


def test_a_restart_between_cursor_writes_reads_again_but_evaluates_nothing_twice(
        conn: psycopg.Connection, settings: Settings, database_url: str) -> None:
    """The evaluator writes its cursors every few seconds, not with every pass
    (alerts/evaluator/passes.py): an evaluator that ends without writing them (SIGKILL, a
    lost lock) leaves states newer than the stored cursors, and the next one reads those
    readings again. Killed where the state is pending, firing, clearing and ok again, the
    events over the whole plan are still the pure state machine's, each once."""
    site = make_site(conn, device="K1")
    body = {"name": "Cold", "table": "calibrated", "column": "tair", "scope": {"device": "K1"},
            "condition": {"op": "<", "threshold": 0}, "clear": {"op": ">=", "threshold": 1},
            "for": 600, "clear_for": 900}
    add_rule(database_url, site.org, body)
    # Replayed onto the state it led to, the opening clear values would resolve the rule
    # that fired at index 6: the machine ignores samples older than its state's.
    plan = [2, 2, 2, 2, -1, -2, -1, 0.5, 2, 2, -1, 2, 2, 2, 2, 0.5, -1, -1, -1, 2, 2, 2, 2, 2]
    times = [now_slot(5 * (len(plan) - i)) for i in range(len(plan))]
    kills = {5, 6, 9, 12, 16, 20}  # pending, fired, clearing, clearing again, pending, ok
    written = 13  # one flush between two kills

    def stored_cursor() -> object:
        row = conn.execute("SELECT at FROM alert_cursors WHERE source = 'calibrated'"
                           " AND device = 'K1'").fetchone()
        conn.commit()
        return row[0] if row else None

    with evaluator_conn(settings) as work:
        ev = Evaluator(settings, cursor_every=3600.0)
        ev.reload(work)
        for i, (at, tair) in enumerate(zip(times, plan, strict=True)):
            insert_readings(conn, "K1", site.location, [{"time": at, "tair": tair}])
            conn.commit()
            ev.run(work, {"K1"}, rollups=False)
            if i == written:
                ev.flush(work)
            if i in kills:
                # Killed before its next write: the next evaluator reads again every reading
                # after the stored cursor (none stored: every reading of the last day).
                assert stored_cursor() == (times[written] if i > written else None)
                ev = Evaluator(settings, cursor_every=3600.0)
                ev.reload(work)
        ev.flush(work)
    assert stored_cursor() == times[-1]
    _state, want = machine.run(alertrules.parse(body), list(zip(times, plan, strict=True)))
    assert len(want) >= 4
    assert [(e[1], e[2]) for e in events(database_url)] == [(t.kind, t.at) for t in want]
