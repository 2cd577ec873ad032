// The device page's charts (serve/web/templates/web/device.html), drawn with uPlot.
// Data comes from the API itself (/api/v2/data/...), authenticated by the session cookie; unit
// conversion and local time are the API's (its unit and local_time parameters), so the chart,
// its CSV link and any API client agree. The choices live in the page URL (reload keeps them).
"use strict";
(function () {
  const cfg = JSON.parse(document.getElementById("sds-config").textContent);
  const $ = (id) => document.getElementById(id);
  const COLORS = cfg.colours;  // serve/web/charts.py COLOURS
  const MAX_ROWS = 50000;   // points per series the page will fetch (cursor pages followed)
  const CSV_LIMIT = cfg.max_limit;  // the API's largest page: what one CSV download holds
  const DAY = 86400;
  const api = {main: null, water: null, loads: 0, errors: []};
  window.sdsDashboard = api;  // for the browser tests and the benchmark

  let chart = null;
  let water = null;
  let loaded = null;        // [start, end] epoch seconds of the fetched range
  let shownRows = 0;
  let firstDraw = true;
  let generation = 0;       // a newer load makes older answers stale

  // ---- state: form controls <-> URL ----------------------------------------------------
  const params = new URLSearchParams(location.search);
  const tableSel = $("table"), spanSel = $("span"), endInput = $("end-date"), tzSel = $("tz");
  const tzCustom = $("tz-custom");
  const unitSels = Array.from(document.querySelectorAll("select.unit"));

  function pick(select, value) {
    if (value && Array.from(select.options).some((o) => o.value === value)) select.value = value;
  }
  pick(tableSel, params.get("table"));
  const table = () => cfg.tables[tableSel.value];
  pick(spanSel, params.get("span") || String(table().default_days));
  endInput.value = params.get("end") || cfg.end.slice(0, 10);
  if (params.get("tz")) {
    pick(tzSel, params.get("tz"));
    if (tzSel.value !== params.get("tz") && params.get("tz") !== "browser") {
      tzSel.value = "custom";
      tzCustom.value = params.get("tz");
    }
  }
  tzCustom.hidden = tzSel.value !== "custom";

  function buildColumns(wanted) {
    const box = $("columns");
    box.querySelectorAll("label").forEach((l) => l.remove());
    const t = table();
    const chosen = new Set(wanted && wanted.length ? wanted : t.defaults);
    t.columns.forEach((c) => {
      const label = document.createElement("label");
      label.title = c.description;
      const input = document.createElement("input");
      input.type = "checkbox";
      input.value = c.name;
      input.checked = chosen.has(c.name);
      input.addEventListener("change", load);
      label.append(input, " " + c.name);
      box.append(label);
    });
  }
  buildColumns((params.get("cols") || "").split(",").filter(Boolean));

  const columns = () => Array.from($("columns").querySelectorAll("input:checked"))
    .map((i) => i.value);
  const units = () => Object.fromEntries(unitSels.map((s) => [s.dataset.param, s.value]));

  function zone() {
    if (tzSel.value === "browser") return Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (tzSel.value === "custom") return tzCustom.value.trim() || "UTC";
    return tzSel.value;
  }

  // Seconds east of UTC for a flat offset ("+05:30", "-04:00", "-25200"); null for a zone name.
  function flatOffset(z) {
    let m = /^([+-])(\d{1,2}):?(\d{2})$/.exec(z);
    if (m) return (m[1] === "-" ? -1 : 1) * (Number(m[2]) * 3600 + Number(m[3]) * 60);
    m = /^[+-]?\d+$/.exec(z);
    return m ? Number(z) : null;
  }

  // uPlot draws times in the browser's zone; tzDate makes it draw wall time of `z` instead.
  function dateMaker(z) {
    const off = flatOffset(z);
    if (off !== null) return (ts) => uPlot.tzDate(new Date((ts + off) * 1000), "UTC");
    return (ts) => uPlot.tzDate(new Date(ts * 1000), z);
  }

  function unitText(col) {
    if (!col.param) return col.unit || "";
    const code = units()[col.param];
    const text = cfg.units[col.param].find((u) => u.code === code).text;
    return col.delta ? text + "·d" : text;
  }

  function saveState() {
    const p = new URLSearchParams();
    p.set("table", tableSel.value);
    p.set("cols", columns().join(","));
    p.set("span", spanSel.value);
    p.set("end", endInput.value);
    p.set("tz", tzSel.value === "custom" ? zone() : tzSel.value);
    Object.entries(units()).forEach(([k, v]) => p.set(k, v));
    history.replaceState(null, "", location.pathname + "?" + p.toString());
  }

  // ---- the API ---------------------------------------------------------------------------
  const iso = (ts) => new Date(ts * 1000).toISOString().replace(".000Z", "Z");

  function range() {
    const end = Date.parse(endInput.value + "T00:00:00Z") / 1000 + DAY;  // end of that UTC day
    const latest = Date.parse(cfg.end) / 1000;
    const stop = endInput.value === cfg.end.slice(0, 10) ? Math.max(latest, end - DAY) : end;
    return [stop - Number(spanSel.value) * DAY, stop];
  }

  function dataUrl(tbl, cols, start, end, extra) {
    const p = new URLSearchParams({device: cfg.device, select: ["time"].concat(cols).join(","),
                                   start_time: iso(start), end_time: iso(end),
                                   local_time: zone()});
    Object.entries(units()).forEach(([k, v]) => p.set(k, v));
    Object.entries(extra || {}).forEach(([k, v]) => p.set(k, v));
    return "/api/v2/data/" + tbl + "?" + p.toString();
  }

  async function fetchRows(url, max) {
    const rows = [];
    let next = url, unitsHeader = null;
    while (next && rows.length < max) {
      const r = await fetch(next, {credentials: "same-origin", headers: {Accept: "application/json"}});
      if (r.status === 401) { location.href = "/dashboard/login?ended=1&next=" + encodeURIComponent(location.pathname + location.search); throw new Error("signed out"); }
      const body = await r.json();
      if (!r.ok) throw new Error(body.message || r.statusText);
      unitsHeader = r.headers.get("X-Units");
      rows.push(...body);
      const cursor = r.headers.get("X-Cursor-Next");
      next = cursor ? url + "&cursor=" + encodeURIComponent(cursor) : null;
    }
    return {rows, units: unitsHeader, truncated: Boolean(next)};
  }

  // ---- main chart ------------------------------------------------------------------------
  function seriesFor(cols) {
    const info = Object.fromEntries(table().columns.map((c) => [c.name, c]));
    const scales = [];
    const series = cols.map((name, i) => {
      const text = unitText(info[name]);
      if (!scales.includes(text)) scales.push(text);
      return {label: name + (text ? " (" + text + ")" : ""), scale: text || "_", stroke: COLORS[i % COLORS.length],
              width: 2, spanGaps: false, points: {show: false}};
    });
    const axes = [{}].concat(scales.map((s, i) => ({scale: s || "_", label: s, side: i % 2 ? 1 : 3,
                                                     grid: {show: i === 0}, size: 60})));
    return {series, axes};
  }

  function makeChart(el, cols, data, z, onScale) {
    const {series, axes} = seriesFor(cols);
    const width = Math.max(el.clientWidth, 400);
    const opts = {
      width, height: 380, tzDate: dateMaker(z),
      series: [{label: "time (" + z + ")"}].concat(series), axes,
      scales: {x: {time: true}},
      cursor: {drag: {x: true, y: false, setScale: true}},
      legend: {live: true},
      hooks: {
        draw: [(u) => {
          if (firstDraw) { firstDraw = false; performance.mark("sds-chart-drawn"); }
          api.lastDraw = performance.now();
          el.dataset.state = "drawn";
        }],
        setScale: [(u, key) => { if (key === "x" && onScale) onScale(u); }],
      },
    };
    el.replaceChildren();
    const u = new uPlot(opts, data, el);
    u.over.addEventListener("wheel", (e) => {  // zoom around the pointer
      e.preventDefault();
      const x = u.posToVal(e.offsetX, "x");
      const f = e.deltaY < 0 ? 0.75 : 1 / 0.75;
      zoomTo(u, x - (x - u.scales.x.min) * f, x + (u.scales.x.max - x) * f);
    }, {passive: false});
    return u;
  }

  function zoomTo(u, min, max) {
    if (!loaded) return;
    const width = Math.min(max - min, loaded[1] - loaded[0]);
    min = Math.max(loaded[0], Math.min(min, loaded[1] - width));
    u.setScale("x", {min, max: min + Math.max(width, 300)});
  }

  function shown(u) {
    return [Math.floor(u.scales.x.min), Math.ceil(u.scales.x.max)];
  }

  function updateCsv(u) {
    const cols = columns();
    if (!u || !cols.length) { $("csv").removeAttribute("href"); return; }
    const [a, b] = shown(u);
    $("csv").href = dataUrl(tableSel.value, cols, a, b, {limit: String(CSV_LIMIT), format: "csv"});
    const inView = u.data[0].filter((t) => t >= a && t <= b).length;
    $("csv").title = inView > CSV_LIMIT
      ? "The download holds the first " + CSV_LIMIT + " of " + inView + " rows: zoom in for the rest"
      : inView + " rows, as shown";
    const el = $("chart");
    el.dataset.viewMin = String(a);
    el.dataset.viewMax = String(b);
  }

  async function load() {
    saveState();
    tzCustom.hidden = tzSel.value !== "custom";
    const mine = ++generation;
    const cols = columns();
    const el = $("chart");
    el.dataset.state = "loading";
    if (!cols.length) {
      $("status").textContent = "Tick at least one column.";
      el.replaceChildren();
      chart = api.main = null;
      updateCsv(null);
      return;
    }
    const [start, end] = range();
    const url = dataUrl(tableSel.value, cols, start, end);
    $("status").textContent = "Loading…";
    const t0 = performance.now();
    let got;
    try {
      got = await fetchRows(url, MAX_ROWS);
    } catch (err) {
      if (mine !== generation) return;
      api.errors.push(String(err.message || err));
      el.dataset.state = "error";
      $("status").textContent = "Could not load the data: " + (err.message || err);
      return;
    }
    if (mine !== generation) return;
    const fetched = performance.now() - t0;
    const times = got.rows.map((r) => Date.parse(r.time) / 1000);
    const data = [times].concat(cols.map((c) => got.rows.map((r) => (r[c] === undefined ? null : r[c]))));
    loaded = [start, end];
    shownRows = got.rows.length;
    const t1 = performance.now();
    const z = zone();
    if (chart) chart.destroy();
    chart = api.main = makeChart(el, cols, data, z, (u) => { updateCsv(u); describe(u); });
    chart.setScale("x", {min: start, max: end});
    el.dataset.series = cols.join(",");
    el.dataset.points = String(shownRows);
    el.dataset.units = got.units || "";
    el.dataset.zone = z;
    api.loads += 1;
    $("status").dataset.fetchMs = fetched.toFixed(0);
    $("status").dataset.drawMs = (performance.now() - t1).toFixed(0);
    describe(chart);
    updateCsv(chart);
    loadWater(end, mine);
  }

  function describe(u) {
    const [a, b] = shown(u);
    const fmt = (ts) => iso(ts).slice(0, 16).replace("T", " ");
    $("status").textContent = shownRows + " rows" + (shownRows >= MAX_ROWS ? " (first " + MAX_ROWS + ")" : "") +
      " · units " + ($("chart").dataset.units || "n/a") + " · times in " + zone() +
      " · showing " + fmt(a) + " to " + fmt(b) + " UTC" +
      (shownRows ? "" : " · no readings in this range");
  }

  // ---- water and growth panel ---------------------------------------------------------------
  async function loadWater(end, mine) {
    const cols = cfg.water.columns.map((c) => c.name);
    const start = end - cfg.water.days * DAY;
    const url = dataUrl("daily", cols, start, end);
    $("water-csv").href = dataUrl("daily", cols, start, end, {format: "csv"});
    const el = $("water");
    el.dataset.state = "loading";
    let got;
    try {
      got = await fetchRows(url, 1000);
    } catch (err) {
      if (mine !== generation) return;
      el.dataset.state = "error";
      $("water-status").textContent = "Could not load daily values: " + (err.message || err);
      return;
    }
    if (mine !== generation) return;
    const rows = got.rows;
    let gdd = 0;
    const cum = rows.map((r) => (gdd += r.gdd || 0));
    const info = Object.fromEntries(cfg.water.columns.map((c) => [c.name, c]));
    const size = unitText(info.et), dd = unitText(info.gdd);
    // Table: one row per local day.
    const head = $("water-table").tHead, body = $("water-table").tBodies[0];
    head.innerHTML = "";
    body.innerHTML = "";
    const hr = head.insertRow();
    ["Day", "ET (" + size + ")", "Crop ET (" + size + ")", "Rain (" + size + ")",
     "Water demand (" + size + ")", "GDD (" + dd + ")", "GDD total"].forEach((t) => {
      const th = document.createElement("th"); th.textContent = t; hr.append(th);
    });
    rows.forEach((r, i) => {
      const tr = body.insertRow();
      [r.local_time ? r.local_time.slice(0, 10) : r.time.slice(0, 10), r.et, r.etc, r.precip,
       r.crop_water_demand, r.gdd, Math.round(cum[i] * 10) / 10].forEach((v, j) => {
        const td = tr.insertCell();
        td.textContent = v === null || v === undefined ? "" : String(v);
        if (j) td.className = "num";
      });
    });
    $("water-status").textContent = rows.length
      ? rows.length + " days · ET, crop ET, rain and demand in " + size + ", GDD in " + dd
      : "No daily rollups in these " + cfg.water.days + " days.";
    if (water) { water.destroy(); water = api.water = null; }
    if (!rows.length) { el.replaceChildren(); el.dataset.state = "empty"; return; }
    const times = rows.map((r) => Date.parse(r.time) / 1000);
    const bars = uPlot.paths.bars({size: [0.6, 40]});
    const s = (label, key, color, scale, extra) => Object.assign(
      {label, stroke: color, width: 2, scale, fill: undefined}, extra || {});
    const opts = {
      width: Math.max(el.clientWidth, 400), height: 260, tzDate: dateMaker(cfg.zone || "UTC"),
      series: [{label: "day"},
        s("ET", "et", COLORS[0], size),
        s("crop ET", "etc", COLORS[1], size),
        s("rain", "precip", COLORS[2], size, {paths: bars, fill: "rgba(44,160,44,0.35)"}),
        s("water demand", "crop_water_demand", COLORS[4], size),
        s("GDD total", "cum", COLORS[3], "gdd")],
      axes: [{}, {scale: size, label: size, size: 60}, {scale: "gdd", label: "GDD (" + dd + ")", side: 1, grid: {show: false}, size: 60}],
      scales: {x: {time: true}},
      hooks: {draw: [() => { el.dataset.state = "drawn"; }]},
    };
    const data = [times, rows.map((r) => r.et), rows.map((r) => r.etc), rows.map((r) => r.precip),
                  rows.map((r) => r.crop_water_demand), cum];
    el.replaceChildren();
    water = api.water = new uPlot(opts, data, el);
    el.dataset.series = "et,etc,precip,crop_water_demand,gdd";
    el.dataset.points = String(rows.length);
  }

  // ---- controls ----------------------------------------------------------------------------
  tableSel.addEventListener("change", () => {
    spanSel.value = String(table().default_days);
    buildColumns([]);
    load();
  });
  [spanSel, endInput, tzSel].concat(unitSels).forEach((el) => el.addEventListener("change", load));
  tzCustom.addEventListener("change", load);
  const step = (f) => () => {
    if (!chart) return;
    const [a, b] = [chart.scales.x.min, chart.scales.x.max];
    zoomTo(chart, a + (b - a) * f, b + (b - a) * f);
  };
  $("pan-left").addEventListener("click", step(-0.5));
  $("pan-right").addEventListener("click", step(0.5));
  $("zoom-in").addEventListener("click", () => {
    if (!chart) return;
    const [a, b] = [chart.scales.x.min, chart.scales.x.max];
    zoomTo(chart, a + (b - a) / 4, b - (b - a) / 4);
  });
  $("zoom-out").addEventListener("click", () => {
    if (!chart) return;
    const [a, b] = [chart.scales.x.min, chart.scales.x.max];
    zoomTo(chart, a - (b - a) / 2, b + (b - a) / 2);
  });
  $("zoom-reset").addEventListener("click", () => { if (chart && loaded) chart.setScale("x", {min: loaded[0], max: loaded[1]}); });
  window.addEventListener("resize", () => {
    if (chart) chart.setSize({width: Math.max($("chart").clientWidth, 400), height: 380});
    if (water) water.setSize({width: Math.max($("water").clientWidth, 400), height: 260});
  });
  if (typeof uPlot === "undefined") {
    $("status").textContent = "The chart library did not load (run deploy/setup.sh).";
    return;
  }
  load();
})();
