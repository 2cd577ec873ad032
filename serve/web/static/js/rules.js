// The alert rules form (serve/web/templates/web/alerts.html): shows only the fields the chosen
// kind and scope use, offers the chosen table's columns with their names and the units of the
// chosen column, keeps the clear comparison pointing the other way from the firing one, and
// draws the preview (serve/web/alertpreview.py): the rule over a device's last 7 days, with
// the threshold and where it would have fired and cleared.
import {embedded} from "./facts.js";

const $ = (id) => document.getElementById(id);
const BELOW = ["<", "<="];
const probe = window.sdsRules = {previews: 0, errors: 0, last: null};

function show(selector, visible) {
  document.querySelectorAll(selector).forEach((el) => { el.hidden = !visible; });
}

class RuleForm {
  constructor(form, cfg) {
    this.form = form;
    this.cfg = cfg;
    this.chart = null;
    ["rule-kind", "rule-scope"].forEach((id) => $(id).addEventListener("change", () => this.kind()));
    $("rule-table").addEventListener("change", () => { this.columns(); this.units(); });
    $("rule-column").addEventListener("change", () => this.units());
    $("rule-op").addEventListener("change", () => this.clearOps());
    $("rule-preview").addEventListener("click", () => this.preview());
    this.kind();
    this.units();
    this.clearOps();
  }

  builtin() { return this.cfg.builtins.includes($("rule-kind").value); }

  /** Fields of the kind and scope: a built-in kind has no column, unit or comparison. */
  kind() {
    const builtin = this.builtin();
    show("#rule-form .measured", !builtin);
    show("#rule-form .compare", !builtin);
    const scope = $("rule-scope").value;
    show("#rule-form .scope-device", scope === "device");
    show("#rule-form .scope-location", scope === "location");
    show("#rule-form .preview-on", scope !== "device");
    $("rule-preview").hidden = !this.cfg.previewable.includes($("rule-kind").value);
    const words = {silent: "Reporting intervals (5 min each) without a reading",
                   battery: "Battery below (%)", quarantine: "Bad messages in an hour",
                   depletion: "Days until the root zone reaches RAW"};
    $("threshold-label").textContent = words[$("rule-kind").value] || "Threshold";
    this.units();
    this.clearOps();
  }

  /** The chosen table's columns, by name with the code after it. */
  columns() {
    const sel = $("rule-column"), was = sel.value;
    sel.replaceChildren(...this.cfg.columns[$("rule-table").value].map((c) => {
      const o = new Option(c.label + " (" + c.name + ")", c.name);
      o.dataset.param = c.param || "";
      return o;
    }));
    if (Array.from(sel.options).some((o) => o.value === was)) sel.value = was;
  }

  /** The units of the chosen column (none for a fixed unit such as W/m2). */
  units() {
    const sel = $("rule-unit"), opt = $("rule-column").selectedOptions[0];
    const param = opt ? opt.dataset.param : "";
    const keep = sel.value;
    Array.from(sel.options).forEach((o) => { o.hidden = o.disabled = o.dataset.param !== param; });
    const first = Array.from(sel.options).find((o) => !o.disabled);
    const kept = Array.from(sel.options).find((o) => !o.disabled && o.value === keep);
    if (first) sel.value = (kept || first).value;
    sel.closest("label").hidden = this.builtin() || !param;
  }

  /** The clear comparison offers only the direction opposite to the firing one. */
  clearOps() {
    const fixed = {silent: ">", battery: "<", quarantine: ">=", depletion: "<="};
    const op = fixed[$("rule-kind").value] || $("rule-op").value;
    const below = BELOW.includes(op);
    const sel = $("rule-clear-op");
    Array.from(sel.options).forEach((o) => {
      const wrong = o.value !== "" && BELOW.includes(o.value) === below;
      o.hidden = o.disabled = wrong;
    });
    if (sel.selectedOptions[0] && sel.selectedOptions[0].disabled) sel.value = "";
  }

  async preview() {
    const status = $("preview-status");
    status.textContent = "Running the rule over the last 7 days…";
    const r = await fetch(this.form.dataset.preview, {
      method: "POST", credentials: "same-origin",
      body: new URLSearchParams(new FormData(this.form))});
    let body = {};
    try { body = await r.json(); } catch (e) { /* not JSON */ }
    if (!r.ok) {
      probe.errors++;
      status.textContent = "No preview: " + (body.message || r.statusText);
      return;
    }
    probe.last = body;
    status.textContent = body.device + ": " + body.summary +
      (body.values.length ? "" : " (no data in the last " + body.days + " days)");
    status.dataset.fired = String(body.fired);
    this.draw(body);
    probe.previews++;
  }

  draw(p) {
    const el = $("preview-chart");
    el.replaceChildren();
    if (typeof uPlot === "undefined" || !p.times.length) return;
    const line = (v) => p.times.map(() => v);
    const marks = (kind) => {
      const at = new Set(p.events.filter((e) => e.kind === kind).map((e) => e.at));
      return p.times.map((t, i) => (at.has(t) ? p.values[i] : null));
    };
    const unit = p.unit ? " (" + p.unit + ")" : "";
    const c = this.cfg.colours;
    const opts = {
      width: Math.max(el.clientWidth, 280), height: 260, scales: {x: {time: true}},
      series: [{}, {label: p.column + unit, stroke: c.value, width: 1.5},
               {label: "threshold", stroke: c.fire, dash: [6, 4], width: 1.5, points: {show: false}},
               {label: "clears at", stroke: c.clear, dash: [2, 4], width: 1.5, points: {show: false}},
               {label: "would fire", stroke: c.fire, width: 0, points: {show: true, size: 10, fill: c.fire}},
               {label: "would clear", stroke: c.clear, width: 0, points: {show: true, size: 10, fill: c.clear}}],
      axes: [{}, {label: p.unit || ""}],
    };
    this.chart = new uPlot(opts, [p.times, p.values, line(p.threshold), line(p.clear_threshold),
                                  marks("firing"), marks("resolved")], el);
    el.dataset.state = "drawn";
  }
}

const form = $("rule-form");
if (form) new RuleForm(form, embedded("rule-config"));
