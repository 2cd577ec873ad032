// Rows of a table the API does not aggregate (hourly, local hourly) joined in the browser into
// the readable buckets of js/spans.js: a year of hourly rows (8,760) was drawn as they were, a
// solid block. Each column joins by the rule that made it from the readings (charts.py
// rebucket_rule); a mean column gets a band from the bucket's lowest to highest row, as the
// API's buckets do. Buckets of a day or more start at midnight in the chart's zone; shorter
// ones on the UTC clock, as the API's.
import {flatOffset} from "./zones.js";

const DAY = 86400;

/** f(t) -> [local date as days since 1970-01-01, seconds since local midnight] in zone `z`. */
function wallClock(z) {
  const off = flatOffset(z);
  if (off !== null) return (t) => [Math.floor((t + off) / DAY), ((t + off) % DAY + DAY) % DAY];
  const fmt = new Intl.DateTimeFormat("en-US", {timeZone: z, hourCycle: "h23", year: "numeric",
    month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit"});
  return (t) => {
    const p = Object.fromEntries(fmt.formatToParts(new Date(t * 1000)).map((x) => [x.type, x.value]));
    const day = Date.UTC(Number(p.year), Number(p.month) - 1, Number(p.day)) / 1000 / DAY;
    return [day, Number(p.hour) * 3600 + Number(p.minute) * 60 + Number(p.second)];
  };
}

const JOIN = {
  mean: (v) => v.reduce((a, b) => a + b, 0) / v.length,
  sum: (v) => v.reduce((a, b) => a + b, 0),
  min: (v) => Math.min(...v),
  max: (v) => Math.max(...v),
  circular_mean: (v) => {
    const r = Math.PI / 180;
    const s = v.reduce((a, d) => a + Math.sin(d * r), 0), c = v.reduce((a, d) => a + Math.cos(d * r), 0);
    return ((Math.atan2(s, c) / r) + 360) % 360;
  },
};

/** `rows` (API rows, oldest first, of `step` seconds) joined into buckets of `seconds` in zone
 *  `z`: rows like the API's aggregated ones ({time, <col>, <col>_min, <col>_max, complete}).
 *  `rules`: column name -> mean, sum, min, max or circular_mean. */
export function rebucket(rows, cols, rules, {seconds, step, zone}) {
  const wall = wallClock(zone);
  const groups = new Map();
  rows.forEach((r) => {
    const t = Date.parse(r.time) / 1000;
    let key, start;
    if (seconds >= DAY) {
      const [day, since] = wall(t);
      const days = seconds / DAY;  // weeks start on Mondays (1970-01-05 was one)
      key = Math.floor((day - 4) / days);
      start = t - since - (((day - 4) % days) + days) % days * DAY;
    } else {
      key = Math.floor(t / seconds);
      start = key * seconds;
    }
    let g = groups.get(key);
    if (!g) groups.set(key, g = {start, rows: []});
    g.start = Math.min(g.start, start);  // the first row of a bucket dates it
    g.rows.push(r);
  });
  const slots = Math.round(seconds / step);
  return Array.from(groups.values()).map((g) => {
    const out = {time: new Date(g.start * 1000).toISOString().replace(".000Z", "Z"),
                 // a day of 23 or 25 hours (DST) is whole with one row fewer or more
                 complete: g.rows.length >= slots - (seconds >= DAY ? 1 : 0)};
    cols.forEach((c) => {
      const v = g.rows.map((r) => r[c]).filter((x) => x !== null && x !== undefined);
      const rule = rules[c] || "mean";
      out[c] = v.length ? JOIN[rule](v) : null;
      if (rule === "mean") {
        out[c + "_min"] = v.length ? Math.min(...v) : null;
        out[c + "_max"] = v.length ? Math.max(...v) : null;
      }
    });
    return out;
  });
}
