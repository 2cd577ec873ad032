// The locations page (serve/web/templates/web/locations.html): the map above the table
// (js/map.js), from the JSON the server put in the page, and its units remembered as the
// user's preference. An ES module, as the other pages.
import {embedded} from "./js/facts.js";
import {drawMap} from "./js/map.js";
import {Preferences} from "./js/preferences.js";

// The units chosen here are the user's units on every page (device pages too).
const form = document.querySelector("form.controls");
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const prefs = new Preferences({});
  prefs.pending = {units: Object.fromEntries(Array.from(form.querySelectorAll("select"))
    .map((s) => [s.name, s.value]))};
  try { await prefs.flush(); } catch (err) { /* the page still shows the units asked for */ }
  form.submit();
});

const el = document.getElementById("map");
if (el && typeof L !== "undefined" && typeof topojson !== "undefined") {
  drawMap(el, embedded("sds-map")).then((map) => { window.sdsDashboard = {map}; })
    .catch((err) => { el.dataset.state = "error"; el.textContent = "The map could not be drawn: " + err.message; });
} else if (el) {
  el.textContent = "The map library is not installed (run deploy/setup.sh).";
}
