// The locations page (serve/web/templates/web/locations.html): the map above the table
// (js/map.js), from the JSON the server put in the page. An ES module, as the other pages.
import {embedded} from "./js/facts.js";
import {drawMap} from "./js/map.js";

const el = document.getElementById("map");
if (el && typeof L !== "undefined" && typeof topojson !== "undefined") {
  drawMap(el, embedded("sds-map")).then((map) => { window.sdsDashboard = {map}; })
    .catch((err) => { el.dataset.state = "error"; el.textContent = "The map could not be drawn: " + err.message; });
} else if (el) {
  el.textContent = "The map library is not installed (run deploy/setup.sh).";
}
