// The device page's choices (table, columns, span, end day, zone, units): read from the form,
// written to and restored from the page URL, so a reload or a bookmark shows the same chart.
import {DAY} from "./facts.js";
import {browserZone} from "./zones.js";

const $ = (id) => document.getElementById(id);

function pick(select, value) {
  if (value && Array.from(select.options).some((o) => o.value === value)) select.value = value;
}

/** The form controls of the device page, with the state they hold: from the page URL when
 *  it has them (a bookmark), else from the user's preferences (`prefs`, Preferences). */
export class Controls {
  constructor(cfg, prefs) {
    this.cfg = cfg;
    this.prefs = prefs;
    this.tableSel = $("table");
    this.spanSel = $("span");
    this.endInput = $("end-date");
    this.tzSel = $("tz");
    this.tzCustom = $("tz-custom");
    this.unitSels = Array.from(document.querySelectorAll("select.unit"));
    const params = new URLSearchParams(location.search);
    pick(this.tableSel, params.get("table"));
    pick(this.spanSel, params.get("span") || String(this.table().default_days));
    this.endInput.value = params.get("end") || cfg.end.slice(0, 10);
    const tz = this.deviceWord(params.get("tz")) || this.preferredZone();
    if (tz) {
      pick(this.tzSel, tz);
      if (this.tzSel.value !== tz && tz !== "browser") {
        this.tzSel.value = "custom";
        this.tzCustom.value = tz;
      }
    }
    this.tzCustom.hidden = this.tzSel.value !== "custom";
    this.buildColumns((params.get("cols") || "").split(",").filter(Boolean));
  }

  /** The zone choice of the user's preferences as a `tz` value ("device": the device's). */
  preferredZone() {
    return this.deviceWord(this.prefs.get("zone")) || null;
  }

  /** `z` with the word "device" read as the device's own zone (UTC for a device without a
   *  location). The preference's value, so a URL may say `tz=device` too: it was taken for a
   *  zone name and the API refused it ("'device' is not a time zone name"). */
  deviceWord(z) {
    return z === "device" ? (this.cfg.zone || "UTC") : z;
  }

  /** The choices as preferences: units, zone ("device" for the device's own) and the
   *  columns of the shown table beside those remembered for the other tables. */
  asPreferences() {
    const tz = this.tzSel.value;
    const zone = tz === "custom" ? this.zone() : (this.cfg.zone && tz === this.cfg.zone ? "device" : tz);
    const columns = Object.assign({}, this.prefs.get("columns") || {});
    columns[this.tableName()] = this.columns();
    return {units: this.units(), zone, columns};
  }

  /** The chosen table's configuration (charts.config()["tables"][name]). */
  table() { return this.cfg.tables[this.tableSel.value]; }

  /** The chosen table's name. */
  tableName() { return this.tableSel.value; }

  /** One checkbox per plottable column, ticked from `wanted` (or the table's defaults). */
  buildColumns(wanted) {
    const box = $("columns");
    box.querySelectorAll("label").forEach((l) => l.remove());
    const t = this.table();
    const remembered = (this.prefs.get("columns") || {})[this.tableName()];
    const chosen = new Set(wanted && wanted.length ? wanted
      : (remembered && remembered.length ? remembered : t.defaults));
    t.columns.forEach((c) => {
      const label = document.createElement("label");
      label.title = c.name + ": " + c.description;
      const input = document.createElement("input");
      input.type = "checkbox";
      input.value = c.name;
      input.checked = chosen.has(c.name);
      input.addEventListener("change", () => this.changed());
      label.append(input, " " + c.label);
      box.append(label);
    });
    this.summarise();
  }

  /** The folded column choice's one line: how many columns are ticked, and which. */
  summarise() {
    const names = new Set(this.columns());
    const labels = this.table().columns.filter((c) => names.has(c.name)).map((c) => c.label);
    $("columns-summary").textContent = labels.length
      ? labels.length + " (" + labels.join(", ") + ")" : "none ticked";
  }

  /** The ticked columns, in registry order. */
  columns() {
    return Array.from($("columns").querySelectorAll("input:checked")).map((i) => i.value);
  }

  /** The chosen unit code per unit parameter. */
  units() { return Object.fromEntries(this.unitSels.map((s) => [s.dataset.param, s.value])); }

  /** The zone or offset for `local_time` and the axis. */
  zone() {
    if (this.tzSel.value === "browser") return browserZone();
    if (this.tzSel.value === "custom") return this.tzCustom.value.trim() || "UTC";
    return this.tzSel.value;
  }

  /** [start, end] epoch seconds: the span ending with the chosen day (with the device's
   *  newest reading when that is the day shown). */
  range() {
    const end = Date.parse(this.endInput.value + "T00:00:00Z") / 1000 + DAY;
    const latest = Date.parse(this.cfg.end) / 1000;
    const stop = this.endInput.value === this.cfg.end.slice(0, 10)
      ? Math.max(latest, end - DAY) : end;
    return [stop - Number(this.spanSel.value) * DAY, stop];
  }

  /** Write the choices into the page URL. */
  save() {
    const p = new URLSearchParams();
    p.set("table", this.tableSel.value);
    p.set("cols", this.columns().join(","));
    p.set("span", this.spanSel.value);
    p.set("end", this.endInput.value);
    p.set("tz", this.tzSel.value === "custom" ? this.zone() : this.tzSel.value);
    Object.entries(this.units()).forEach(([k, v]) => p.set(k, v));
    history.replaceState(null, "", location.pathname + "?" + p.toString());
    this.tzCustom.hidden = this.tzSel.value !== "custom";
  }

  /** Call `listener` whenever a choice changes (a new table resets span and columns). */
  onChange(listener) {
    this.listener = listener;
    this.tableSel.addEventListener("change", () => {
      this.spanSel.value = String(this.table().default_days);
      this.buildColumns([]);
      this.changed();
    });
    [this.spanSel, this.endInput, this.tzSel, this.tzCustom].concat(this.unitSels)
      .forEach((el) => el.addEventListener("change", () => this.changed()));
    // Enter in the zone box submits the form: that would reload the page without the
    // choices (its inputs have no names). Apply the zone instead.
    $("controls").addEventListener("submit", (e) => { e.preventDefault(); this.changed(); });
  }

  changed() {
    this.summarise();
    if (this.listener) this.listener();
  }
}
