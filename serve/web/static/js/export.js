// Export the whole chosen range as one file from the browser, CSV or Parquet: the API's pages
// (the largest page each) followed through X-Cursor-Next, with progress and a cancel button.
// CSV pages are joined into one file (header once) saved under the API's own file name;
// Parquet is written from the JSON pages as they arrive (js/parquet.js, one row group a
// page). No row cap: a year of 5-minute readings is about 11 pages.
import {dataUrl, iso, pages} from "./api.js";

const $ = (id) => document.getElementById(id);

/** The file name of a Content-Disposition header, or `fallback`. */
export function fileName(disposition, fallback) {
  const m = /filename="?([^";]+)"?/.exec(disposition || "");
  return m ? m[1] : fallback;
}

/** CSV pages joined: the first page's header line only. */
class CsvFile {
  constructor() { this.parts = []; this.rows = 0; this.name = null; }

  /** Adds one page; gives the time of its last row (epoch seconds, NaN if none). */
  add(body, headers) {
    this.name = this.name || fileName(headers.get("Content-Disposition"), "export.csv");
    const text = this.parts.length ? body.slice(body.indexOf("\n") + 1) : body;
    if (text) this.parts.push(text);
    const lines = text.split("\n").filter(Boolean);
    this.rows += this.parts.length === 1 ? Math.max(lines.length - 1, 0) : lines.length;
    return lines.length ? Date.parse(lines[lines.length - 1].split(",")[0]) / 1000 : NaN;
  }

  finish() { return new Blob(this.parts, {type: "text/csv"}); }
}

/** JSON pages into a Parquet file, each page a row group written as it arrives. The API
 *  names only CSV downloads, so the name follows its pattern (table_device_start_end). */
class ParquetPages {
  constructor(writer, ask, url) {
    this.writer = writer;
    this.ask = ask;
    this.url = url;
    this.file = null;
    this.name = [ask.table, ask.device.replace(/[^A-Za-z0-9_.-]+/g, "_").slice(0, 80),
                 iso(ask.start).slice(0, 10), iso(ask.end).slice(0, 10)].join("_") + ".parquet";
  }

  get rows() { return this.file ? this.file.rows : 0; }

  add(body, headers) {
    // The first page's headers say what the values are in; the file keeps that beside them.
    this.file = this.file || new this.writer.ParquetFile(this.ask.cols, Boolean(this.ask.zone), {
      "sds.units": headers.get("X-Units"), "sds.local_time_zone": this.ask.zone,
      "sds.source": this.url});
    this.file.add(body);
    return body.length ? Date.parse(body[body.length - 1].time) / 1000 : NaN;
  }

  finish() { return this.file.finish(); }
}

/** The export buttons' view: `ask()` gives the request ({table, device, cols, start, end,
 *  zone, units}) of what the chart shows. */
export class Exporter {
  constructor(cfg, ask, probe) {
    this.cfg = cfg;
    this.ask = ask;
    this.probe = probe;
    this.running = null;
    $("export").addEventListener("click", () => this.start("csv"));
    $("export-parquet").addEventListener("click", () => this.start("parquet"));
    $("export-cancel").addEventListener("click", () => { if (this.running) this.running.abort(); });
  }

  say(text) { $("export-status").textContent = text; }

  /** The request's URL and the file its pages go into. The Parquet writer is loaded here,
   *  on the first Parquet export, not with the page. */
  async target(format, ask) {
    const extra = {limit: String(this.cfg.max_limit)};
    if (format === "csv") return {url: dataUrl(Object.assign({}, ask, {extra: Object.assign(
      extra, {format: "csv"})})), accept: "text/csv", file: new CsvFile()};
    const url = dataUrl(Object.assign({}, ask, {cols: ["device"].concat(ask.cols), extra}));
    return {url, accept: "application/json",
            file: new ParquetPages(await import("./parquet.js"), ask, url)};
  }

  async start(format) {
    if (this.running) return;
    const ask = this.ask();
    if (!ask.cols.length) { this.say("Tick at least one column."); return; }
    const control = this.running = new AbortController();
    $("export-cancel").hidden = false;
    const span = ask.end - ask.start;
    let file = null;
    try {
      const target = await this.target(format, ask);
      file = target.file;
      for await (const {body, headers} of pages(target.url, {accept: target.accept,
                                                             signal: control.signal})) {
        const last = file.add(body, headers);
        const done = Number.isFinite(last) ? Math.min(1, Math.max(0, (last - ask.start) / span)) : 0;
        this.say("Exporting… " + file.rows.toLocaleString("en") + " rows (" +
                 Math.round(done * 100) + " %)");
        this.probe.exportRows = file.rows;
      }
      file.blob = file.finish();
    } catch (err) {
      this.say(control.signal.aborted ? "Export cancelled." : "Export failed: " + (err.message || err));
      this.running = null;
      $("export-cancel").hidden = true;
      return;
    }
    const link = document.createElement("a");
    link.href = URL.createObjectURL(file.blob);
    link.download = file.name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    this.say("Exported " + file.rows.toLocaleString("en") + " rows to " + file.name + ".");
    this.probe.exported = {rows: file.rows, name: file.name, bytes: file.blob.size, format};
    this.running = null;
    $("export-cancel").hidden = true;
  }
}
