// The compare page (serve/web/templates/web/compare.html): wires the form to its view
// (js/compare.js). An ES module, as the device page.
import {Compare} from "./js/compare.js";
import {embedded} from "./js/facts.js";

const probe = {main: null, loads: 0};
window.sdsDashboard = probe;  // for the browser tests

function start() {
  const $ = (id) => document.getElementById(id);
  if (typeof uPlot === "undefined") {
    $("status").textContent = "The chart library did not load (run deploy/setup.sh).";
    return;
  }
  const view = new Compare(embedded("sds-config"), probe);
  const load = () => view.load();
  $("table").addEventListener("change", () => { view.fillColumns(null); load(); });
  $("location").addEventListener("change", () => { view.tickLocation(); load(); });
  $("controls").addEventListener("change", (e) => {
    if (e.target.id !== "table" && e.target.id !== "location") load();
  });
  $("controls").addEventListener("submit", (e) => { e.preventDefault(); load(); });
  window.addEventListener("resize", () => view.resize());
  $("zoom-in").addEventListener("click", () => view.zoom(0.5));
  $("zoom-out").addEventListener("click", () => view.zoom(2));
  $("zoom-reset").addEventListener("click", () => view.reset());
  $("csv").addEventListener("click", () => {
    const file = view.csv();
    if (!file) return;
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([file.text], {type: "text/csv"}));
    link.download = file.name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    probe.csv = file;
    $("csv-what").textContent = file.rows + " rows as drawn, in " + file.name;
  });
  load();
}

start();
