"""`sds water set|irrigate|status` against a real database, with `sds aggregate run` as the
scheduler: settings and an event recorded, audited, and the balance recomputed."""

from __future__ import annotations

from datetime import date, timedelta

from click.testing import CliRunner

from admin.cli import main
from tests.aggregate.weather import Place, day_readings
from tests.support.readings import insert_readings
from tests.support.rollups import fetch, make_location


def _sds(database_url: str, *args: str):
    result = CliRunner().invoke(main, list(args), env={"SDS_DATABASE_URL": database_url},
                                catch_exceptions=False)
    return result


def test_set_irrigate_status(db, database_url) -> None:
    loc = make_location(db, "Europe/Madrid", lat=39.47, lon=-0.38, elev=15.0, kc=1.1)
    for i in range(3):
        place = Place("v", 39.47, -0.38, "Europe/Madrid", 15.0, date(2024, 7, 1) +
                      timedelta(days=i), 0.9, tmean=26.0, rh_mean=0.55)
        insert_readings(db, "CLI1", loc, day_readings(place), marks=True)
    db.commit()
    bad = _sds(database_url, "water", "set", str(loc), "--soil", "loam", "--root-depth", "9",
               "--p", "0.5")
    assert bad.exit_code != 0 and "root_depth" in bad.output
    ok = _sds(database_url, "water", "set", str(loc), "--soil", "loam", "--root-depth", "0.4",
              "--crop", "tomato")
    assert ok.exit_code == 0, ok.output
    assert "TAW 52.0 mm" in ok.output  # 1000 x (0.25 - 0.12) x 0.4
    assert _sds(database_url, "aggregate", "run").exit_code == 0
    before = fetch(db, "SELECT depletion FROM water_balance WHERE device = 'CLI1' ORDER BY time")
    assert len(before) == 3 and before[-1]["depletion"] > 0
    irrigated = _sds(database_url, "water", "irrigate", str(loc), "--day", "2024-07-03",
                     "--mm", "15")
    assert irrigated.exit_code == 0, irrigated.output
    assert _sds(database_url, "aggregate", "run").exit_code == 0
    after = fetch(db, "SELECT depletion, irrigation FROM water_balance WHERE device = 'CLI1'"
                      " ORDER BY time")
    assert after[-1]["irrigation"] == 15.0
    assert after[-1]["depletion"] < before[-1]["depletion"]
    status = _sds(database_url, "water", "status", str(loc))
    assert status.exit_code == 0, status.output
    assert "2024-07-03   15.0 mm applied" in status.output
    assert "CLI1 2024-07-03: depletion" in status.output and "irrigate" in status.output
    actions = [r["action"] for r in fetch(db, "SELECT action FROM audit_log ORDER BY id")]
    assert actions == ["location.water_settings", "irrigation.create"]
