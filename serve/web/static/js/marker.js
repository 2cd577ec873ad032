// An alert event's moment on the device chart: the inbox links here with `at` (the event's
// time), `cols` (its column), its unit and `threshold` (the rule's, in that unit). The moment is
// a vertical line, the threshold a dashed horizontal one on the column's axis; the threshold is
// drawn only while that column is shown in the link's unit (another unit would misplace it).
export class Marker {
  constructor(cfg, controls, el) {
    this.colours = cfg.alert_colours;
    const p = new URLSearchParams(location.search);
    this.controls = controls;
    this.el = el;
    this.at = p.get("at") ? Date.parse(p.get("at")) / 1000 : null;
    this.threshold = p.get("threshold") !== null && p.get("threshold") !== ""
      ? Number(p.get("threshold")) : null;
    this.column = (p.get("cols") || "").split(",")[0];
    this.units = Object.fromEntries(["temp", "pres", "size", "ratio", "speed"]
      .filter((k) => p.get(k)).map((k) => [k, p.get(k)]));
  }

  plugin() { return {hooks: {draw: [(u) => this.draw(u)]}}; }

  /** The y scale of the marked column's line while it is shown in the link's unit. */
  scale(u) {
    const col = this.controls.table().columns.find((c) => c.name === this.column);
    if (!col || !this.controls.columns().includes(col.name)) return null;
    if (col.param && this.units[col.param] && this.controls.units()[col.param] !== this.units[col.param]) {
      return null;
    }
    const s = u.series.find((x, i) => i > 0 && x.label && x.label.startsWith(col.label));
    return s ? s.scale : null;
  }

  draw(u) {
    const {ctx, bbox} = u;
    ctx.save();
    ctx.strokeStyle = this.colours.moment;
    ctx.lineWidth = 2 * devicePixelRatio;
    this.el.dataset.markAt = "no";
    this.el.dataset.markThreshold = "no";
    if (this.at !== null && this.at >= u.scales.x.min && this.at <= u.scales.x.max) {
      const x = u.valToPos(this.at, "x", true);
      ctx.beginPath(); ctx.moveTo(x, bbox.top); ctx.lineTo(x, bbox.top + bbox.height); ctx.stroke();
      this.el.dataset.markAt = "drawn";
    }
    const scale = this.threshold === null ? null : this.scale(u);
    if (scale !== null) {
      const y = u.valToPos(this.threshold, scale, true);
      if (y >= bbox.top && y <= bbox.top + bbox.height) {
        ctx.strokeStyle = this.colours.fire;
        ctx.setLineDash([8 * devicePixelRatio, 5 * devicePixelRatio]);
        ctx.beginPath(); ctx.moveTo(bbox.left, y); ctx.lineTo(bbox.left + bbox.width, y); ctx.stroke();
        this.el.dataset.markThreshold = "drawn";
      }
    }
    ctx.restore();
  }
}
