// The map pick of the location forms (new and edit): Leaflet over the basemap that ships with
// the dashboard (as the Locations map, js/map.js; no tiles, nothing from another site). A click
// sets the latitude and longitude fields; typed coordinates move the mark; either way the
// server proposes the zone of the point (/dashboard/zone, tzfpy's offline boundaries). The
// proposal fills the zone field when it is empty or still holds the previous proposal; a zone
// typed by hand is kept, and the proposal is offered beside it instead.

const DECIMALS = 5;  // about a metre: finer than a click can mean

/** The point of two typed fields, or null when either is not a number in range. */
export function typedPoint(latText, lonText) {
  const lat = Number(latText.trim()), lon = Number(lonText.trim());
  if (latText.trim() === "" || lonText.trim() === "" || !Number.isFinite(lat) ||
      !Number.isFinite(lon) || Math.abs(lat) > 90 || Math.abs(lon) > 180) return null;
  return {lat, lon};
}

export class MapPick {
  constructor(el, fields, status) {
    this.el = el;
    this.fields = fields;  // {lat, lon, tz} inputs
    this.status = status;  // where the proposal is said
    this.proposed = null;  // the last zone proposed (filled in while the field still holds it)
    this.asked = 0;  // generation: only the newest proposal's answer is used
    this.mark = null;
  }

  async draw() {
    const map = L.map(this.el, {worldCopyJump: true});
    map.attributionControl.setPrefix(false);
    map.attributionControl.addAttribution("Basemap: Natural Earth via world-atlas");
    const start = typedPoint(this.fields.lat.value, this.fields.lon.value);
    if (start) map.setView([start.lat, start.lon], 6); else map.setView([20, 0], 1);
    this.map = map;
    const answer = await fetch(this.el.dataset.basemap, {credentials: "same-origin"});
    if (!answer.ok) throw new Error("basemap: " + answer.status);
    const world = await answer.json();
    L.geoJSON(topojson.feature(world, world.objects.countries),
              {interactive: false, style: () => ({className: "land"})}).addTo(map);
    if (start) this.place(start);
    map.on("click", (event) => {
      const lat = event.latlng.lat, lon = L.Util.wrapNum(event.latlng.lng, [-180, 180], true);
      this.fields.lat.value = lat.toFixed(DECIMALS);
      this.fields.lon.value = lon.toFixed(DECIMALS);
      this.place({lat, lon});
      this.propose({lat, lon});
    });
    for (const field of [this.fields.lat, this.fields.lon]) {
      field.addEventListener("change", () => {
        const point = typedPoint(this.fields.lat.value, this.fields.lon.value);
        if (!point) return;
        this.place(point);
        map.panTo([point.lat, point.lon]);
        this.propose(point);
      });
    }
    this.el.dataset.state = "drawn";
  }

  place(point) {
    if (this.mark) this.mark.remove();
    this.mark = L.circleMarker([point.lat, point.lon], {radius: 8, className: "picked"})
      .addTo(this.map);
  }

  async propose(point) {
    const generation = ++this.asked;
    const url = this.el.dataset.zoneUrl + "?lat=" + point.lat + "&lon=" + point.lon;
    let zone = null;
    try {
      const answer = await fetch(url, {credentials: "same-origin"});
      const body = await answer.json();
      if (!answer.ok) throw new Error(body.message || String(answer.status));
      zone = body.tz_name;
    } catch (err) {
      if (generation === this.asked) this.say("No zone proposed: " + err.message);
      return;
    }
    if (generation !== this.asked) return;  // a newer point was picked meanwhile
    this.status.replaceChildren();
    if (!zone) { this.say("No zone is known at this point (at sea?): type one."); return; }
    const tz = this.fields.tz;
    if (tz.value.trim() === "" || tz.value === this.proposed || tz.value === zone) {
      tz.value = zone;
      this.say("Time zone " + zone + ", proposed from the coordinates.");
    } else {
      this.say("The coordinates are in " + zone + ". ");
      const use = document.createElement("button");
      use.type = "button";
      use.id = "use-zone";
      use.textContent = "Use " + zone;
      use.addEventListener("click", () => { tz.value = zone; this.say("Time zone " + zone + "."); });
      this.status.append(use);
    }
    this.proposed = zone;
    this.status.dataset.zone = zone;
  }

  say(text) {
    this.status.replaceChildren(document.createTextNode(text));
  }
}
