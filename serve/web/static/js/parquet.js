// A Parquet file of `/data` rows, written as the API's pages arrive: each page becomes one row
// group, encoded and moved out of the writer into the file's parts at once, so the page's rows
// (JavaScript objects, many times their encoded size) are not kept. Typed columns: `time` a UTC
// timestamp, `device` a string, every chosen column a nullable DOUBLE (a missing reading stays
// null), `local_time` (when the zone is asked for) the wall-clock time in that zone as a
// timestamp that is not UTC. Loaded by js/export.js only when a Parquet export starts, so the
// writer (vendor/hyparquet-writer, deploy/lib/web_assets.sh) costs the page nothing until then.
import {ByteWriter, ParquetWriter} from "../vendor/hyparquet-writer/index.js";

export const MEDIA_TYPE = "application/vnd.apache.parquet";

// The API writes local times with a colon-less offset (2019-06-30T20:00:00-0400,
// docs/api.md "Local time"); the wall clock is the part before the offset.
const WALL_CLOCK = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,3})\d*)?/;

/** A local time string of the API as the Date whose UTC fields are its wall clock. */
export function wallClock(text) {
  const m = WALL_CLOCK.exec(text || "");
  if (!m) throw new Error("not a local time: " + text);
  const [y, mo, d, h, mi, s] = m.slice(1, 7).map(Number);
  return new Date(Date.UTC(y, mo - 1, d, h, mi, s, Number((m[7] || "0").padEnd(3, "0"))));
}

/** One UTC time of the API (`2026-03-08T00:00:00Z`) as a Date; throws on anything else. */
function utc(text) {
  const t = Date.parse(text);
  if (!Number.isFinite(t)) throw new Error("not a time: " + text);
  return new Date(t);
}

const timestamp = (name, utcAdjusted) => ({
  name, type: "INT64", repetition_type: "REQUIRED",
  logical_type: {type: "TIMESTAMP", isAdjustedToUTC: utcAdjusted, unit: "MILLIS"},
});

/** The file's schema: time, device, the columns, and local_time when `local` is true. */
export function schema(cols, local) {
  const fields = [timestamp("time", true),
                  {name: "device", type: "BYTE_ARRAY", converted_type: "UTF8",
                   logical_type: {type: "STRING"}, repetition_type: "REQUIRED"}]
    .concat(cols.map((name) => ({name, type: "DOUBLE", repetition_type: "OPTIONAL"})));
  if (local) fields.push(timestamp("local_time", false));
  return [{name: "root", num_children: fields.length}].concat(fields);
}

export class ParquetFile {
  /** A file of `cols` (and local_time if `local`); `metadata` ({key: value}) goes into the
   *  file's key-value metadata (the units and zone the values are in). */
  constructor(cols, local, metadata) {
    this.cols = cols;
    this.local = local;
    this.parts = [];
    this.rows = 0;
    const writer = this.writer = new ByteWriter();
    // Called by the library after each row group: the encoded bytes leave the growing buffer
    // for the parts of the Blob the file becomes.
    writer.flush = () => this.drain();
    this.out = new ParquetWriter({
      writer, schema: schema(cols, local), createdBy: "sds dashboard (hyparquet-writer)",
      kvMetadata: Object.entries(metadata).filter(([, v]) => v).map(([key, value]) => ({key, value})),
    });
  }

  drain() {
    if (this.writer.index) this.parts.push(this.writer.getBytes().slice());
    this.writer.index = 0;
  }

  /** Writes one page of rows (the API's JSON objects) as one row group. */
  add(rows) {
    if (!rows.length) return;
    const column = (name, read) => ({name, data: rows.map(read)});
    const columnData = [column("time", (r) => utc(r.time)), column("device", (r) => r.device)]
      .concat(this.cols.map((c) => column(c, (r) => (r[c] === undefined ? null : r[c]))));
    if (this.local) columnData.push(column("local_time", (r) => wallClock(r.local_time)));
    this.out.write({columnData, rowGroupSize: rows.length});
    this.drain();  // also when the library did not call flush (it does after each group)
    this.rows += rows.length;
  }

  /** The footer written: the whole file as a Blob. */
  finish() {
    this.out.finish();
    this.drain();
    return new Blob(this.parts, {type: MEDIA_TYPE});
  }
}
