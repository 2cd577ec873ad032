// The page's facts from the server: the JSON that serve/web/charts.py puts into the page
// (columns and descriptions from the registry, unit labels, colours, caps). Nothing of the
// API or the registry is typed into a script.

export const DAY = 86400;  // seconds in a day: arithmetic, not an API fact

/** The JSON embedded in the page under `id`. */
export function embedded(id) {
  return JSON.parse(document.getElementById(id).textContent);
}

/** A series colour by position (the palette is charts.COLOURS). */
export const colour = (cfg, i) => cfg.colours[i % cfg.colours.length];

/** The unit label of a column under the chosen unit codes ({temp: "f", ...}). */
export function unitText(cfg, col, chosen) {
  if (!col.param) return col.unit || "";
  const code = chosen[col.param];
  const found = cfg.units[col.param].find((u) => u.code === code);
  const text = found ? found.text : code;
  return col.delta ? text + "·d" : text;
}
