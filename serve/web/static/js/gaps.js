// Outages drawn as gaps: uPlot joins consecutive points with a line unless a value between
// them is null, so a 41-hour outage would be a clean diagonal. Where two rows are further
// apart than a few of the table's steps, a row of nulls goes between them.

/** The gap threshold in seconds: 2.5 of the table's row step (a daily row of a DST day is
 *  23 or 25 hours apart; a missed reading or two is not an outage worth a break either). */
export const gapAfter = (step) => 2.5 * step;

/** `data` ([times, ...series]) with a null row in the middle of every gap longer than
 *  gapAfter(step), and the gaps found as [[from, to], ...] epoch seconds. */
export function withGaps(data, step) {
  const times = data[0], limit = gapAfter(step);
  const gaps = [];
  for (let i = 1; i < times.length; i++) {
    if (times[i] - times[i - 1] > limit) gaps.push(i);
  }
  if (!gaps.length) return {data, gaps: []};
  const out = data.map(() => []);
  let from = 0;
  gaps.forEach((i) => {
    data.forEach((col, k) => { for (let j = from; j < i; j++) out[k].push(col[j]); });
    out[0].push((times[i - 1] + times[i]) / 2);
    for (let k = 1; k < data.length; k++) out[k].push(null);
    from = i;
  });
  data.forEach((col, k) => { for (let j = from; j < col.length; j++) out[k].push(col[j]); });
  return {data: out, gaps: gaps.map((i) => [times[i - 1], times[i]])};
}
