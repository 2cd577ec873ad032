"""What the device page's charts may show, from the column registry and the unit tables.

The page's script gets this as JSON: per table its plottable columns (name, description,
which unit parameter converts it, or its fixed unit), the unit choices of each parameter with
their labels, and the defaults. Nothing here is typed twice: columns, units and descriptions
come from `shared.columns` and `shared.units`.
"""

from __future__ import annotations

from typing import Any

from serve.aggregation import LADDER
from serve.args import MAX_LIMIT
from serve.preferences import CHART_TABLES, plottable
from shared import units
from shared.columns import TABLES, Column, Measure, Rollup
from shared.rulewords import UNIT_TEXT, label

# Columns ticked when a table is first shown.
DEFAULT_COLUMNS = {
    "calibrated": ("tair", "rh"),
    "hourly": ("tair", "maxt", "mint"),
    "local_hourly": ("tair", "maxt", "mint"),
    "daily": ("maxt", "mint", "meant"),
}
# The daily water and growth panel: ET, crop ET, rain, crop water demand and degree days.
WATER_COLUMNS = ("et", "etc", "precip", "crop_water_demand", "gdd")
WATER_DAYS = 30
# Rows per series the device page fetches (cursor pages followed) before it stops.
FETCH_ROWS = 50_000
# A range of more rows than this in a table the API aggregates is drawn from buckets
# (`points=`, about one per pixel column: a mean line in a min-max band) instead of rows.
RAW_ROWS = 5000
# The one table whose answers the API aggregates on request (serve/aggregation.py).
AGGREGATED = "calibrated"
# The bucket widths the page asks for (`interval=`): the API's ladder without 4, 6, 8 and 12
# hours. A day of 2 to 6 buckets alternates day and night: a year of 8-hour buckets drew a
# sawtooth of night lows and afternoon highs. A span too long for 3-hour buckets is drawn in
# days (a mean line in a band from the day's lowest to its highest reading), or weeks.
SAWTOOTH = frozenset({"4h", "6h", "8h", "12h"})
READABLE = tuple({"label": i.label, "seconds": int(i.width.total_seconds())}
                 for i in LADDER if i.label not in SAWTOOTH)
# At least this many pixels per bucket, and at most this many buckets whatever the width: a
# year of days (366) on any screen, a phone's included.
BUCKET_PX = 2
DAYS_ALWAYS = 370

# Series colours, in order (d3's category10): the charts' scripts take them from here.
# Annotations: a colour no series has (lines for instants, a translucent band for ranges), and
# how many of the shown range's annotations the chart draws (one API page, not a heavy one).
NOTE_COLOUR = "#8250df"
# Alert thresholds and transitions: the rule preview (static/js/rules.js) and an inbox event's
# moment on the device chart (static/js/marker.js).
ALERT_COLOURS = {"value": "#1f77b4", "fire": "#d62728", "clear": "#2ca02c", "moment": "#57606a"}
NOTES_PAGE = 1000
COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
           "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")

# Marks on the charts: buckets (hours, days) with fewer readings than they should have.
INCOMPLETE_COLOUR = "#bf8700"
COMPLETENESS = TABLES["daily"].column("sample_pct")


# How the page joins a long span of hourly rows into its readable buckets (static/js/buckets.js;
# the API aggregates calibrated only): by the rule that made each hourly value from the readings.
_REBUCKET = {Rollup.MEAN: "mean", Rollup.MIN: "min", Rollup.MAX: "max", Rollup.SUM: "sum",
             Rollup.MAX_RATE: "max", Rollup.CIRCULAR_MEAN: "circular_mean"}
_REBUCKET_NAMES = {"et": "sum", "etc": "sum", "sample_pct": "mean"}


def rebucket_rule(col: Column) -> str:
    """The rule that joins rows of `col` into a longer bucket: mean, min, max, sum or
    circular_mean (a value with no such rule, such as a count, is averaged)."""
    return _REBUCKET.get(col.rollup) or _REBUCKET_NAMES.get(col.name, "mean")


def column_info(col: Column) -> dict[str, Any]:
    """One plottable column: name, label and description (the registry's), unit parameter (or
    None) and fixed unit."""
    param = units.param_for(col.measure) if col.measure is not None else None
    return {
        "name": col.name,
        "label": label(col),
        "description": col.description,
        "param": param,
        "delta": col.measure is Measure.TEMP_DELTA,  # degree days: 'C day' / 'F day'
        "unit": None if param is not None else col.unit,
        "rule": rebucket_rule(col),
    }


def config(*, device: str, zone: str | None, end: str, chosen: dict[str, str]) -> dict[str, Any]:
    """The device page's chart configuration (serialised into the page)."""
    return {
        "device": device,
        "zone": zone,
        "end": end,
        "tables": {
            name: {
                "title": title,
                "default_days": span.days,
                "step": int(step.total_seconds()),
                "aggregates": name == AGGREGATED,
                "limit": TABLES[name].row_cap,
                "columns": [column_info(c) for c in plottable(name)],
                "defaults": list(DEFAULT_COLUMNS[name]),
                # Buckets carry their completeness: incomplete ones are marked.
                "completeness": (COMPLETENESS.name if COMPLETENESS.name
                                 in TABLES[name].column_names else None),
            }
            for name, (title, span, step) in CHART_TABLES.items()
        },
        "units": {param: [{"code": code, "text": UNIT_TEXT[param][code]}
                          for code in units.UNITS[param]] for param in units.UNIT_PARAMS},
        "chosen": chosen,
        "colours": list(COLOURS),
        "incomplete_colour": INCOMPLETE_COLOUR,
        # A complete bucket's sample_pct in each ratio unit (100 in %, 1 as a fraction).
        "complete": {code: units.convert(1.0, COMPLETENESS, units.parse_unit(
            units.param_for(Measure.RATIO), code)) for code in units.UNITS["ratio"]},
        "max_limit": MAX_LIMIT,  # the API's largest page: what one CSV download holds
        "fetch_rows": FETCH_ROWS,
        "raw_rows": RAW_ROWS,
        "intervals": list(READABLE),  # static/js/spans.js picks one for the span shown
        "bucket_px": BUCKET_PX,
        "days_always": DAYS_ALWAYS,
        "note_colour": NOTE_COLOUR,
        "alert_colours": ALERT_COLOURS,  # annotations on the chart (static/js/annotations.js)
        "notes_page": NOTES_PAGE,
        "water": {"columns": [column_info(TABLES["daily"].column(c)) for c in WATER_COLUMNS],
                  "days": WATER_DAYS},
    }


def unit_choices() -> dict[str, list[tuple[str, str]]]:
    """(code, text) of every unit parameter, for the pages' selectors."""
    return {param: [(code, UNIT_TEXT[param][code]) for code in units.UNITS[param]]
            for param in units.UNIT_PARAMS}


def chosen_units(args: dict[str, str]) -> dict[str, str]:
    """The unit code per parameter from query arguments; defaults for absent or unknown ones
    (a page is never refused for a stale unit in its URL)."""
    out = {}
    for param in units.UNIT_PARAMS:
        raw = (args.get(param) or "").strip().lower()
        out[param] = raw if raw in units.UNITS[param] else units.DEFAULTS[param]
    return out
