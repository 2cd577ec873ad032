// The dashboard's one home for API calls: /api/v2 URLs and reading them with the session
// cookie (GET only; serve/auth.py accepts the cookie for reads). Cursor pages are followed
// here and nowhere else; a 401 sends the browser to the sign-in form.

/** ISO 8601 UTC with a Z, whole seconds: the API's time format. */
export const iso = (ts) => new Date(ts * 1000).toISOString().replace(".000Z", "Z");

/** The URL of `/api/v2/data/{table}` for one device, columns, range (epoch seconds), zone
 *  for `local_time`, unit parameters, and any extra parameters. */
export function dataUrl({table, device, cols, start, end, zone, units, extra}) {
  const p = new URLSearchParams({device, select: ["time"].concat(cols).join(","),
                                 start_time: iso(start), end_time: iso(end)});
  if (zone) p.set("local_time", zone);
  Object.entries(units || {}).forEach(([k, v]) => p.set(k, v));
  Object.entries(extra || {}).forEach(([k, v]) => p.set(k, v));
  return "/api/v2/data/" + table + "?" + p.toString();
}

function signIn() {
  location.href = "/dashboard/login?ended=1&next=" +
    encodeURIComponent(location.pathname + location.search);
}

/** GET one API answer (JSON or text) with the cookie: {body, headers}; throws the API's own
 *  message on a 4xx/5xx. */
export async function get(url, {accept = "application/json", signal} = {}) {
  const r = await fetch(url, {credentials: "same-origin", headers: {Accept: accept}, signal});
  if (r.status === 401) { signIn(); throw new Error("signed out"); }
  if (!r.ok) {
    let message = r.statusText;
    try { message = (await r.json()).message || message; } catch (e) { /* not JSON */ }
    throw new Error(message);
  }
  return {body: accept === "application/json" ? await r.json() : await r.text(),
          headers: r.headers};
}

/** Rows of a JSON `/data` URL, following `X-Cursor-Next` until `max` rows: {rows, units
 *  (the X-Units header), truncated, and for an aggregated answer interval and from (its
 *  X-Aggregation-Interval and X-Aggregated-From headers)}. */
export async function fetchRows(url, max) {
  const rows = [];
  let next = url, first = null;
  while (next && rows.length < max) {
    const {body, headers} = await get(next);
    first = first || headers;
    rows.push(...body);
    const cursor = headers.get("X-Cursor-Next");
    next = cursor ? url + "&cursor=" + encodeURIComponent(cursor) : null;
  }
  const header = (name) => (first ? first.get(name) : null);
  return {rows, units: header("X-Units"), truncated: Boolean(next),
          interval: header("X-Aggregation-Interval"), from: header("X-Aggregated-From")};
}
