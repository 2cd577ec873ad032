// The location forms (templates/web/location_new.html and location.html for administrators):
// the map pick of the coordinates and the zone proposed from them (js/mappick.js).
import {MapPick} from "./js/mappick.js";

const el = document.getElementById("pick-map");
const status = document.getElementById("zone-proposal");
if (el && typeof L !== "undefined" && typeof topojson !== "undefined") {
  const pick = new MapPick(el, {lat: document.getElementById("loc-lat"),
                                lon: document.getElementById("loc-lon"),
                                tz: document.getElementById("loc-tz")}, status);
  pick.draw().then(() => { window.sdsPick = pick; })
    .catch((err) => { el.dataset.state = "error"; el.textContent = "The map could not be drawn: " + err.message; });
} else if (el) {
  el.textContent = "The map library is not installed (run deploy/setup.sh); type the coordinates.";
}
