// The device page (serve/web/templates/web/device.html): wires its views together. An ES
// module (no build step): API calls live in js/api.js, the page's facts in js/facts.js (from
// the server's JSON), the choices in js/controls.js, one module per view (js/readings.js,
// js/water.js, js/annotations.js).
import {Controls} from "./js/controls.js";
import {Marker} from "./js/marker.js";
import {Exporter} from "./js/export.js";
import {Annotations} from "./js/annotations.js";
import {embedded} from "./js/facts.js";
import {Preferences} from "./js/preferences.js";
import {Readings} from "./js/readings.js";
import {Water} from "./js/water.js";

const $ = (id) => document.getElementById(id);
const probe = {main: null, water: null, loads: 0, errors: []};
window.sdsDashboard = probe;  // for the browser tests and the benchmark

function start() {
  if (typeof uPlot === "undefined") {
    $("status").textContent = "The chart library did not load (run deploy/setup.sh).";
    return;
  }
  const cfg = embedded("sds-config");
  const prefs = probe.preferences = new Preferences(cfg.preferences);
  const controls = new Controls(cfg, prefs);
  const readings = new Readings(cfg, controls, probe);
  const water = new Water(cfg, probe);
  const [first, last] = [() => controls.range()[0], () => controls.range()[1]];
  new Exporter(cfg, () => ({table: controls.tableName(), device: cfg.device,
                            cols: controls.columns(), start: first(), end: last(),
                            zone: controls.zone(), units: controls.units()}), probe);
  const notes = new Annotations(cfg, readings, probe);
  readings.plugins.push(notes.plugin());
  // An alert's moment and threshold, when the inbox linked here (js/marker.js).
  readings.plugins.push(new Marker(cfg, controls, $("chart")).plugin());
  notes.wire();

  async function load() {
    controls.save();
    const shown = await readings.load();
    if (shown !== null) {
      water.load(shown, () => readings.current(shown.generation));
      notes.load(readings.loaded);
    }
    return shown;
  }
  // A choice the user makes is remembered once the API took it (a zone it refuses is not);
  // opening a page, even from a bookmark, changes no preference.
  // The choices are read before the load: by the time it answers the user may have typed a
  // zone the API will refuse, which must not be remembered under this load's success.
  controls.onChange(async () => {
    const chosen = controls.asPreferences();
    if (await load() !== null) prefs.remember(chosen);
  });
  window.addEventListener("pagehide", () => prefs.flush(true));
  $("pan-left").addEventListener("click", () => readings.pan(-0.5));
  $("pan-right").addEventListener("click", () => readings.pan(0.5));
  $("zoom-in").addEventListener("click", () => readings.zoom(0.5));
  $("zoom-out").addEventListener("click", () => readings.zoom(2));
  $("zoom-reset").addEventListener("click", () => readings.reset());
  window.addEventListener("resize", () => { readings.resize(); water.resize(); });
  load();
}

start();
