// The locations map: every location with coordinates as a marker coloured by the worst
// health badge of the devices standing there, with its latest conditions in a tooltip, over
// a basemap of the world's countries (world-atlas 1:110m, vendored from npm). No tile server:
// the machines this runs on may have no internet, so nothing is fetched from another site.

const LEVELS = ["ok", "warn", "bad"];  // badge levels (serve/web/model.py), mildest first

/** The worst badge level of a location's devices ("none" without devices). */
export function worst(devices) {
  let found = -1;
  devices.forEach((d) => d.badges.forEach((b) => { found = Math.max(found, LEVELS.indexOf(b.level)); }));
  return found < 0 ? "none" : LEVELS[found];
}

function line(parent, text, className) {
  const el = document.createElement("div");
  el.textContent = text;
  if (className) el.className = className;
  parent.append(el);
}

/** The tooltip of one location: name, latest conditions, today's totals, devices' badges. */
function tooltip(loc, text) {
  const box = document.createElement("div");
  line(box, loc.name, "map-title");
  const c = loc.conditions;
  if (c.time) {
    line(box, "Latest " + c.time.slice(0, 16).replace("T", " ") + " UTC: " +
      (c.tair === null ? "" : c.tair + " " + text.temp) +
      (c.rh === null ? "" : ", " + c.rh + " " + text.ratio));
  } else {
    line(box, "No reading in the last 7 days");
  }
  if (loc.today.precip !== null || loc.today.et !== null) {
    line(box, "Today: rain " + (loc.today.precip ?? "–") + " " + text.size +
      ", ET " + (loc.today.et ?? "–") + " " + text.size + (loc.today.low_quality ? " so far" : ""));
  }
  loc.devices.forEach((d) => line(box, d.name + ": " + d.badges.map((b) => b.label).join(", ")));
  return box;
}

/** Draw the map into `el` from the page's JSON `data` ({locations, unit_text, basemap}). */
export async function drawMap(el, data) {
  const map = L.map(el, {worldCopyJump: true, attributionControl: true});
  // The view first (layers draw once the map has one): around the located places.
  const placed = data.locations.filter((loc) => loc.gps);
  if (placed.length) {
    map.fitBounds(L.latLngBounds(placed.map((loc) => [loc.gps[1], loc.gps[0]])).pad(0.5),
                  {maxZoom: 6});
  } else {
    map.setView([20, 0], 1);
  }
  map.attributionControl.setPrefix(false);
  map.attributionControl.addAttribution("Basemap: Natural Earth via world-atlas");
  const answer = await fetch(data.basemap, {credentials: "same-origin"});
  if (!answer.ok) throw new Error("basemap: " + answer.status);
  const world = await answer.json();
  L.geoJSON(topojson.feature(world, world.objects.countries),
            {interactive: false, className: "land", style: () => ({className: "land"})}).addTo(map);
  const markers = [];
  placed.forEach((loc) => {
    const level = worst(loc.devices);
    const [lon, lat] = loc.gps;
    const m = L.circleMarker([lat, lon], {radius: 8, className: "map-marker " + level})
      .bindTooltip(tooltip(loc, data.unit_text), {direction: "top"})
      .addTo(map);
    m.locationId = loc.id;
    markers.push(m);
  });
  // Paths exist once the map has a view: name each marker's path by its location.
  markers.forEach((m) => { m.getElement().dataset.location = m.locationId; });
  el.dataset.markers = String(markers.length);
  el.dataset.state = "drawn";
  return map;
}
