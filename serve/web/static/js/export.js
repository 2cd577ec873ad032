// Export the whole chosen range as one CSV file from the browser: the API's CSV pages
// (format=csv, the largest page each) followed through X-Cursor-Next, with progress and a
// cancel button, joined into one file (header once) saved under the API's own file name. No
// row cap: a year of 5-minute readings is about 11 pages. (Parquet is not offered: see
// docs/dashboard.md "Export".)
import {dataUrl, pages} from "./api.js";

const $ = (id) => document.getElementById(id);

/** The file name of a Content-Disposition header, or `fallback`. */
export function fileName(disposition, fallback) {
  const m = /filename="?([^";]+)"?/.exec(disposition || "");
  return m ? m[1] : fallback;
}

/** The export button's view: `ask()` gives the request ({table, device, cols, start, end,
 *  zone, units}) of what the chart shows. */
export class Exporter {
  constructor(cfg, ask, probe) {
    this.cfg = cfg;
    this.ask = ask;
    this.probe = probe;
    this.running = null;
    $("export").addEventListener("click", () => this.start());
    $("export-cancel").addEventListener("click", () => { if (this.running) this.running.abort(); });
  }

  say(text) { $("export-status").textContent = text; }

  async start() {
    if (this.running) return;
    const ask = this.ask();
    if (!ask.cols.length) { this.say("Tick at least one column."); return; }
    const url = dataUrl(Object.assign({}, ask, {extra: {format: "csv",
                                                        limit: String(this.cfg.max_limit)}}));
    const control = this.running = new AbortController();
    $("export-cancel").hidden = false;
    const parts = [];
    let rows = 0, name = null;
    const span = ask.end - ask.start;
    try {
      for await (const {body, headers} of pages(url, {accept: "text/csv", signal: control.signal})) {
        name = name || fileName(headers.get("Content-Disposition"), "export.csv");
        // Every page starts with the header line: keep the first page's only.
        const text = parts.length ? body.slice(body.indexOf("\n") + 1) : body;
        if (text) parts.push(text);
        const lines = text.split("\n").filter(Boolean);
        rows += parts.length === 1 ? Math.max(lines.length - 1, 0) : lines.length;
        const last = lines.length ? Date.parse(lines[lines.length - 1].split(",")[0]) / 1000 : NaN;
        const done = Number.isFinite(last) ? Math.min(1, Math.max(0, (last - ask.start) / span)) : 0;
        this.say("Exporting… " + rows.toLocaleString("en") + " rows (" + Math.round(done * 100) + " %)");
        this.probe.exportRows = rows;
      }
    } catch (err) {
      this.say(control.signal.aborted ? "Export cancelled." : "Export failed: " + (err.message || err));
      this.running = null;
      $("export-cancel").hidden = true;
      return;
    }
    const file = new Blob(parts, {type: "text/csv"});
    const link = document.createElement("a");
    link.href = URL.createObjectURL(file);
    link.download = name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    this.say("Exported " + rows.toLocaleString("en") + " rows to " + name + ".");
    this.probe.exported = {rows, name, bytes: file.size};
    this.running = null;
    $("export-cancel").hidden = true;
  }
}
