"""The rollups' FAO-56 SQL: which stored values feed the functions of migrations 0061/0090.

`et_expr(table)` is the reference ET of a merged bucket row `a` at location `l`. A daily row
has two definitions, told apart by its own completeness flag `low_quality` (docs/aggregate.md,
"A day's ET"): a day whose readings cover it (low_quality false) gets the daily method (eq. 6)
over the whole day; a partial day (today so far, or a day with gaps) gets the sum of its local
hours' hourly ET (eq. 53), the same numbers `local_hourly.et` holds, computed by `SO_FAR` from
the partials of the recompute (not read back from `local_hourly`, which another job writes).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from psycopg import sql

from shared.columns import TABLES, Rollup

# The recompute's session work tables (aggregate/statements.py creates them): partials per
# cell, and the cells with their local hour and day.
CELLS = "_sds_cells"
PARTIALS = "_sds_partials"
# The calibrated columns the hourly method reads, as period means (stats s_X / n_X).
PERIOD_INPUTS = ("tair", "rh", "wind_speed", "swdw")


def _i(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def column_of(table: str, rule: Rollup, source: str) -> str:
    """Name of `table`'s column that applies `rule` to calibrated `source`."""
    for c in TABLES[table].columns:
        if c.rollup is rule and c.source == source:
            return c.name
    raise KeyError(f"{table} has no {rule} of {source}")


_ELEV = sql.SQL("coalesce(l.elev::float8, 0)")


def _period_et(t0: sql.Composable, t1: sql.Composable, means: Mapping[str, sql.Composable]
               ) -> sql.Composable:
    return sql.SQL(
        "sds_fao56_period_et({t0}, {t1}, {tair}, {rh}, {wind}, l.sensor_height::float8,"
        " {swdw}, l.lat::float8, l.lon::float8, {elev})").format(
        t0=t0, t1=t1, tair=means["tair"], rh=means["rh"], wind=means["wind_speed"],
        swdw=means["swdw"], elev=_ELEV)


@cache
def so_far() -> sql.Composed:
    """CTE body: (device, location, day_start, et) for the partial days among the partials,
    et the sum of the day's local hours' hourly ET (hours without ET inputs add nothing; NULL
    when no hour has them). A day is partial when its readings fall short of
    %(low_quality_pct)s of its 5-minute slots: the daily row's own `low_quality` rule."""
    means = {s: sql.SQL("(sum(q.{}) / nullif(sum(q.{}), 0))").format(_i(f"s_{s}"), _i(f"n_{s}"))
             for s in PERIOD_INPUTS}
    cols = sql.SQL(", ").join(sql.SQL("{} AS {}").format(e, _i(s)) for s, e in means.items())
    hour = {s: sql.SQL("h.{}").format(_i(s)) for s in PERIOD_INPUTS}
    return sql.SQL(
        "SELECT h.device, h.location, h.day_start, sum({et}) AS et FROM ("
        " SELECT q.device, q.location, z.day_start, z.day_end, z.lh_start, z.lh_end, {cols},"
        "  sum(sum(q.n)) OVER (PARTITION BY q.device, q.location, z.day_start) AS day_n"
        " FROM {p} q JOIN locations l ON l.id = q.location"
        " JOIN {c} z ON z.tz = l.tz_name AND z.start = q.cell"
        " GROUP BY q.device, q.location, z.day_start, z.day_end, z.lh_start, z.lh_end) h"
        " JOIN locations l ON l.id = h.location"
        " WHERE h.day_n::float8 * 100 / (date_part('epoch', h.day_end - h.day_start) / 300)::int"
        "  < %(low_quality_pct)s::float8"
        " GROUP BY h.device, h.location, h.day_start").format(
        et=_period_et(sql.SQL("h.lh_start"), sql.SQL("h.lh_end"), hour), cols=cols,
        p=_i(PARTIALS), c=_i(CELLS))


@cache
def rs_fill() -> sql.Composed:
    """CTE body: (device, location, day_start, fill) for the whole days (not partial, see
    `so_far`) with gaps in their radiation readings; `fill` = the day's Ra / the Ra of the
    slots measured, each local hour's Ra (sds_fao56_period_ra, migration 0175) counted by the
    share of its 5-minute slots with a `swdw` reading. The daily method takes the measured
    energy times `fill`: the missing slots at the day's measured Rs/Rso (issue 35; without it
    a 3.6 h midday gap took a clear day from 3.88 to 3.09 mm). NULL (no fill) when no slot
    measured had the sun up."""
    slots = sql.SQL("(date_part('epoch', {e} - {s}) / 300)")
    # One pass over the partials for every hour's radiation readings (a join, not a subquery
    # per hour: that scanned the partials once per hour of every gap day).
    return sql.SQL(
        "SELECT d.device, d.location, d.day_start,"
        " sum(h.ra) / nullif(sum(h.ra * coalesce(c.n, 0) / h.slots), 0) AS fill FROM ("
        "  SELECT q.device, q.location, z.day_start, z.day_end, l.tz_name, l.lat, l.lon"
        "  FROM {p} q JOIN locations l ON l.id = q.location"
        "  JOIN {c} z ON z.tz = l.tz_name AND z.start = q.cell"
        "  GROUP BY q.device, q.location, z.day_start, z.day_end, l.tz_name, l.lat, l.lon"
        "  HAVING sum(q.n)::float8 * 100 / ({ds})::int >= %(low_quality_pct)s::float8"
        "   AND sum(q.n_swdw) > 0 AND sum(q.n_swdw) < ({ds})::int) d"
        " JOIN (SELECT DISTINCT z.tz, z.day_start, z.lh_start, z.lh_end FROM {c} z) hz"
        "  ON hz.tz = d.tz_name AND hz.day_start = d.day_start"
        " CROSS JOIN LATERAL (SELECT sds_fao56_period_ra(hz.lh_start, hz.lh_end,"
        "  d.lat::float8, d.lon::float8) AS ra, {hs}::float8 AS slots) h"
        " LEFT JOIN (SELECT q.device, q.location, z.lh_start, sum(q.n_swdw)::float8 AS n"
        "  FROM {p} q JOIN locations l ON l.id = q.location"
        "  JOIN {c} z ON z.tz = l.tz_name AND z.start = q.cell"
        "  GROUP BY q.device, q.location, z.lh_start) c"
        "  ON c.device = d.device AND c.location = d.location AND c.lh_start = hz.lh_start"
        " GROUP BY d.device, d.location, d.day_start").format(
        p=_i(PARTIALS), c=_i(CELLS), ds=slots.format(e=sql.SQL("z.day_end"),
                                                     s=sql.SQL("z.day_start")),
        hs=slots.format(e=sql.SQL("hz.lh_end"), s=sql.SQL("hz.lh_start")))


def et_expr(table: str) -> sql.Composable:
    """FAO-56 reference ET of bucket row `a` at location `l` (NULL when an input is missing);
    for `daily`, partial days read `s.et` of the `so_far` rows joined as `s`, whole days with
    radiation gaps fill them by `f.fill` of the `rs_fill` rows joined as `f`."""
    def a(rule: Rollup, source: str) -> sql.Composable:
        return sql.SQL("a.{}").format(_i(column_of(table, rule, source)))

    if table == "daily":
        return sql.SQL(
            "CASE WHEN a.low_quality THEN s.et ELSE"
            " sds_fao56_daily_et({tmax}, {tmin}, {rh_max}, {rh_min}, {wind},"
            " l.sensor_height::float8, {rs} * coalesce(f.fill, 1), l.lat::float8, {elev},"
            " extract(doy FROM a.day)::int) END").format(
            tmax=a(Rollup.MAX, "tair"), tmin=a(Rollup.MIN, "tair"),
            rh_max=a(Rollup.MAX, "rh"), rh_min=a(Rollup.MIN, "rh"),
            wind=a(Rollup.MEAN, "wind_speed"), rs=a(Rollup.ENERGY, "swdw"), elev=_ELEV)
    return _period_et(sql.SQL("a.time"), sql.SQL("a.b_end"),
                      {s: a(Rollup.MEAN, s) for s in PERIOD_INPUTS})
