// Rows of an API answer shaped for uPlot: the data arrays, the series (a mean line in a
// min-max band for aggregated buckets), the outages as gaps and the incomplete buckets.
import {withGaps} from "./gaps.js";

/** The shortest distance between two rows (the bucket width of an aggregated answer: a
 *  bucket missing in an outage does not change it), or `fallback` with fewer than 2 rows. */
export function rowStep(times, fallback) {
  let step = Infinity;
  for (let i = 1; i < times.length; i++) step = Math.min(step, times[i] - times[i - 1]);
  return Number.isFinite(step) && step > 0 ? step : fallback;
}

/** uPlot data and series for `cols` from `rows`.
 *  `look(name, i)`: {label, scale, colour} of column `name`, the i-th chosen.
 *  `step`: the table's row step; `complete(row)`: false for an incomplete bucket, null
 *  when the row does not say. An aggregated answer's `<name>_min` and `<name>_max` become a
 *  band around the column's line. */
export function shape(rows, cols, {look, step, aggregated, complete}) {
  const times = rows.map((r) => Date.parse(r.time) / 1000);
  const column = (key) => rows.map((r) => (r[key] === undefined ? null : r[key]));
  const values = [times], series = [], bands = [];
  cols.forEach((name, i) => {
    const {label, scale, colour} = look(name, i);
    values.push(column(name));
    series.push({label, scale, stroke: colour, width: 2, spanGaps: false,
                 points: {show: false}});
    const banded = aggregated && rows.length && (name + "_min") in rows[0]
      && (name + "_max") in rows[0];
    if (!banded) return;
    const edge = {scale, stroke: colour + "66", width: 1, spanGaps: false,
                  points: {show: false}};
    values.push(column(name + "_min"), column(name + "_max"));
    series.push(Object.assign({label: "lowest"}, edge), Object.assign({label: "highest"}, edge));
    const hi = series.length, lo = series.length - 1;  // 1-based: series 0 is time
    bands.push({series: [hi, lo], fill: colour + "33"});
  });
  const width = aggregated ? rowStep(times, step) : step;
  // An outage is a gap, not a line across it.
  const {data, gaps} = withGaps(values, width);
  const incomplete = rows.filter((r) => complete(r) === false).map((r) => Date.parse(r.time) / 1000);
  return {times, data, series, bands, gaps, incomplete, step: width};
}
