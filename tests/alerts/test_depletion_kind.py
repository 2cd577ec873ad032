"""The alert kind `depletion` (issue 35): a rule on the root-zone water balance's forecast
(`water_balance.days_to_raw`) fires when the depletion will reach RAW within N days (0: it is
beyond RAW now), evaluated as the evaluator's role sds_alerts, and resolves after irrigation."""

from __future__ import annotations

import psycopg

from alerts.evaluator.passes import Evaluator
from shared import alertrules, db
from shared.config import Settings
from shared.errors import BadRequest
from tests.support.alerting import add_rule
from tests.support.ingesting import make_site, now_slot


def evaluator_conn(settings: Settings) -> psycopg.Connection:
    """A connection as the evaluator's role (sds_alerts)."""
    return db.connect(settings, name="test-alerts", role=db.ROLE_ALERTS)


def test_depletion_rule_fires_within_n_days_and_resolves(
        conn: psycopg.Connection, settings: Settings, database_url: str) -> None:
    site = make_site(conn, device="W1")
    rule = add_rule(database_url, site.org, {"name": "Irrigate soon", "kind": "depletion",
                                             "scope": {"location": str(site.location)},
                                             "condition": {"threshold": 2}})
    assert rule is not None
    day = now_slot(120).replace(hour=0, minute=0)

    def balance(days_to_raw: float) -> None:
        conn.execute("INSERT INTO water_balance (time, device, location, depletion, raw,"
                     " days_to_raw) VALUES (%s, 'W1', %s, 30, 40, %s) ON CONFLICT (device, time)"
                     " DO UPDATE SET days_to_raw = EXCLUDED.days_to_raw, update_time = now()",
                     (day, site.location, days_to_raw))
        conn.commit()

    ev = Evaluator(settings)
    with evaluator_conn(settings) as work:
        ev.reload(work)
        balance(5.0)
        assert ev.run(work, None, rollups=True).events == []
        balance(1.0)  # the same day recomputed drier (a late reading)
        out = ev.run(work, None, rollups=True)
        assert [(e.device, e.kind, e.column_name, e.value) for e in out.events] \
            == [("W1", "firing", "days_to_raw", 1.0)]
        balance(6.0)  # irrigated: the forecast moves away
        out = ev.run(work, None, rollups=True)
        assert [e.kind for e in out.events] == ["resolved"]


def test_depletion_rule_takes_no_table() -> None:
    try:
        alertrules.parse({"name": "x", "kind": "depletion", "table": "daily",
                          "scope": {"organisation": True}, "condition": {"threshold": 0}})
    except BadRequest as exc:
        assert "table" in (exc.errors or {}).get("json", {})
    else:
        raise AssertionError("a table was accepted for the depletion kind")
    parsed = alertrules.parse({"name": "Beyond RAW", "kind": "depletion",
                               "scope": {"organisation": True}, "condition": {"threshold": 0}})
    assert (parsed.source, parsed.column, parsed.op) == ("water_balance", "days_to_raw", "<=")
    assert "beyond RAW" in alertrules.describe(parsed)
