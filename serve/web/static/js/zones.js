// Time zones for the charts: uPlot draws times in the browser's zone unless given a tzDate;
// these make it draw wall-clock time of a named zone or a flat offset, as the API's
// `local_time` reads them.

/** Seconds east of UTC for a flat offset ("+05:30", "-04:00", "-25200"); null for a name. */
export function flatOffset(z) {
  let m = /^([+-])(\d{1,2}):?(\d{2})$/.exec(z);
  if (m) return (m[1] === "-" ? -1 : 1) * (Number(m[2]) * 3600 + Number(m[3]) * 60);
  m = /^[+-]?\d+$/.exec(z);
  return m ? Number(z) : null;
}

/** uPlot's tzDate option for zone or offset `z`. */
export function dateMaker(z) {
  const off = flatOffset(z);
  if (off !== null) return (ts) => uPlot.tzDate(new Date((ts + off) * 1000), "UTC");
  return (ts) => uPlot.tzDate(new Date(ts * 1000), z);
}

/** The IANA zone of this browser. */
export const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone;
