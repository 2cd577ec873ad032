"""Chart library candidates for the dashboard, measured on the same page in headless Chromium.

Each candidate page loads its library from the npm install in serve/web/node_modules, fetches
the same data file (a week of 5-minute readings in 4 series: 2016 x 4 values, with the gaps a
real device has) and draws one line chart with x zoom. The page marks `sds-drawn` when the
library reports the chart drawn, then zooms into one day and marks `sds-zoomed` when that is
drawn too. The harness reads the marks and the bytes transferred (Resource Timing).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NODE_MODULES = REPO / "serve" / "web" / "node_modules"

POINTS = 7 * 24 * 12  # a week of 5-minute readings
SERIES = ("tair", "rh", "p", "wind_speed")
T0 = 1_719_792_000  # 2024-07-01T00:00:00Z

# Library file each candidate page loads (the minified browser build its package ships).
LIBRARIES = {
    "uplot": ("uplot/dist/uPlot.iife.min.js", "uplot/dist/uPlot.min.css"),
    "echarts": ("echarts/dist/echarts.common.min.js", None),
}


def week_json() -> bytes:
    """The data file: {"time": [...epoch s], "tair": [...], ...}; about 2 % nulls (gaps)."""
    times = [T0 + 300 * i for i in range(POINTS)]
    data: dict[str, list[float | None]] = {"time": times}  # type: ignore[dict-item]
    for k, name in enumerate(SERIES):
        values: list[float | None] = []
        for i in range(POINTS):
            if (i * 7 + k) % 50 == 0:
                values.append(None)
                continue
            day = math.sin(2 * math.pi * i / 288)
            values.append(round([20 + 8 * day, 60 - 25 * day, 1013 + 3 * math.sin(i / 500),
                                 3 + 2 * abs(math.sin(i / 37))][k], 2))
        data[name] = values
    return json.dumps(data, separators=(",", ":")).encode()


_COMMON = """
<!doctype html><html><head><meta charset="utf-8"><title>{name}</title>{css}
<script src="/lib/{name}.js"></script></head>
<body style="margin:0"><div id="chart" style="width:1200px;height:500px"></div>
<script>
const DAY = 86400;
fetch('/week.json').then(r => r.json()).then(d => {{
  performance.mark('sds-data');
  {draw}
}});
</script></body></html>
"""

_UPLOT = """
  let zoomed = false;
  const opts = {width: 1200, height: 500, series: [{}].concat(
      ['tair','rh','p','wind_speed'].map((n, i) => ({label: n,
        stroke: ['red','blue','green','purple'][i], scale: n === 'p' ? 'p' : 'y'}))),
    axes: [{}, {scale: 'y'}, {scale: 'p', side: 1}],
    cursor: {drag: {x: true, y: false}},
    hooks: {draw: [u => {
      if (!zoomed) { performance.mark('sds-drawn'); zoomed = true;
        requestAnimationFrame(() => { performance.mark('sds-zoom-start');
          u.setScale('x', {min: d.time[0] + 3 * DAY, max: d.time[0] + 4 * DAY}); }); }
      else { performance.mark('sds-zoomed'); }
    }]}};
  new uPlot(opts, [d.time, d.tair, d.rh, d.p, d.wind_speed], document.getElementById('chart'));
"""

_ECHARTS = """
  const chart = echarts.init(document.getElementById('chart'), null, {renderer: 'canvas'});
  const names = ['tair','rh','p','wind_speed'];
  let stage = 0;
  chart.on('finished', () => {
    if (stage === 0) { stage = 1; performance.mark('sds-drawn');
      requestAnimationFrame(() => { performance.mark('sds-zoom-start');
        chart.dispatchAction({type: 'dataZoom', startValue: (d.time[0] + 3 * DAY) * 1000,
                              endValue: (d.time[0] + 4 * DAY) * 1000}); }); }
    else if (stage === 1) { stage = 2; performance.mark('sds-zoomed'); }
  });
  chart.setOption({animation: false, tooltip: {trigger: 'axis'}, legend: {},
    xAxis: {type: 'time'}, yAxis: [{type: 'value', scale: true}, {type: 'value', scale: true}],
    dataZoom: [{type: 'inside', xAxisIndex: 0, filterMode: 'none'}],
    series: names.map((n, i) => ({name: n, type: 'line', showSymbol: false, sampling: 'lttb',
      yAxisIndex: n === 'p' ? 1 : 0,
      data: d.time.map((t, j) => [t * 1000, d[n][j]])}))});
"""


def page(name: str) -> bytes:
    """The HTML page of candidate `name`."""
    css = '<link rel="stylesheet" href="/lib/uplot.css">' if name == "uplot" else ""
    draw = {"uplot": _UPLOT, "echarts": _ECHARTS}[name]
    return _COMMON.format(name=name, css=css, draw=draw).encode()


def library_file(name: str, kind: str) -> Path:
    """Path of the candidate's script ('js') or stylesheet ('css') in node_modules."""
    js, css = LIBRARIES[name]
    rel = js if kind == "js" else css
    if rel is None:
        raise FileNotFoundError(f"{name} has no {kind}")
    return NODE_MODULES / rel
