// The bucket a span is drawn in: one a person can read. The API would pick the finest width
// giving about one bucket per pixel column (`points=`), which for a year is 8 hours: the line
// alternates night lows and afternoon highs. The page asks for an `interval=` itself, from the
// readable widths the server lists (charts.READABLE: no 4 to 12 hours), the finest that gives
// each bucket a few pixels; a year is always days at least.

/** The readable interval ({label, seconds}) for `span` seconds drawn `width` pixels wide. */
export function readableInterval(cfg, span, width) {
  const most = Math.max(Math.floor(width / cfg.bucket_px), cfg.days_always);
  const ladder = cfg.intervals;
  // Buckets starting within [start, end]: both ends may hold one.
  return ladder.find((i) => Math.floor(span / i.seconds) + 1 <= most) || ladder[ladder.length - 1];
}
