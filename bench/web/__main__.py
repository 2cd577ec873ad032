"""Chart library candidates in headless Chromium (docs/benchmarks.md "Dashboard").

    .venv/bin/python -m bench.web [--repeat N] [--candidates-only | --device-page-only] [--edge]

1. Candidates: for each chart library in bench/web/candidates.py, the same page (a week of
   5-minute data, 4 series, x zoom) served from a loopback http.server and loaded in headless
   Debian Chromium with the cache off, N times interleaved: bytes transferred (page, library,
   data), time from navigation start to the library's own "drawn" signal, and the redraw after
   zooming into one day. Ratios are against uPlot, the library the dashboard uses.
2. The device page as served (bench/web/dashboard.py): see there.

Prints medians and ratios; exits 0 whatever they are (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import gzip
import http.server
import statistics
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.web import candidates
from testbed.browser import chromium, wait_for

NAMES = tuple(candidates.LIBRARIES)


def _handler(files: dict[str, tuple[bytes, str]]) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            found = files.get(self.path)
            if found is None:
                self.send_error(404)
                return
            body, ctype = found
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve_candidates() -> Iterator[tuple[str, dict[str, tuple[bytes, str]]]]:
    """A loopback HTTP server with every candidate page, library and the data file."""
    files: dict[str, tuple[bytes, str]] = {"/week.json": (candidates.week_json(),
                                                          "application/json")}
    for name in NAMES:
        files[f"/{name}.html"] = (candidates.page(name), "text/html; charset=utf-8")
        files[f"/lib/{name}.js"] = (candidates.library_file(name, "js").read_bytes(),
                                    "text/javascript")
        try:
            files[f"/lib/{name}.css"] = (candidates.library_file(name, "css").read_bytes(),
                                         "text/css")
        except FileNotFoundError:
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(files))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", files
    finally:
        server.shutdown()
        server.server_close()


MEASURE = """
const nav = performance.getEntriesByType('navigation')[0];
const res = performance.getEntriesByType('resource');
const mark = n => {
  const m = performance.getEntriesByName(n); return m.length ? m[0].startTime : null; };
return {bytes: nav.encodedBodySize + res.reduce((s, r) => s + r.encodedBodySize, 0),
        requests: 1 + res.length, drawn: mark('sds-drawn'), data: mark('sds-data'),
        zoom: mark('sds-zoomed') - mark('sds-zoom-start'),
        heap: performance.memory ? performance.memory.usedJSHeapSize : null};
"""


def measure_candidates(repeat: int) -> dict[str, dict[str, float]]:
    """Medians per candidate: bytes, first render (ms), zoom redraw (ms), JS heap (bytes)."""
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in NAMES}
    with serve_candidates() as (base, files), chromium(width=1300, height=700) as driver:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
        for i in range(repeat + 1):  # the first round warms the browser process up
            for name in NAMES if i % 2 else reversed(NAMES):
                driver.get(f"{base}/{name}.html")
                wait_for(driver, "performance.getEntriesByName('sds-zoomed').length > 0",
                         timeout=60)
                if i:
                    runs[name].append(driver.execute_script(MEASURE))
        gz = {n: sum(len(gzip.compress(files[p][0])) for p in files
                     if p in (f"/{n}.html", f"/lib/{n}.js", f"/lib/{n}.css", "/week.json"))
              for n in NAMES}
    out = {}
    for name, rs in runs.items():
        out[name] = {
            "bytes": statistics.median(r["bytes"] for r in rs),
            "gzip": gz[name],
            "library": len(files[f"/lib/{name}.js"][0]),
            "drawn": statistics.median(r["drawn"] for r in rs),
            "after_data": statistics.median(r["drawn"] - r["data"] for r in rs),
            "zoom": statistics.median(r["zoom"] for r in rs),
            "heap": statistics.median(r["heap"] or 0 for r in rs),
        }
    return out


def print_candidates(found: dict[str, dict[str, float]], repeat: int) -> None:
    """The candidates table, ratios against uPlot."""
    base = found["uplot"]
    print(f"\nchart libraries: a week of 5-minute data, 4 series ({candidates.POINTS} x 4 "
          f"values), headless Chromium, cache off, medians of {repeat}")
    print(f"  {'library':<9} {'library KiB':>11} {'page KiB':>9} {'gzip KiB':>9} "
          f"{'first render ms':>16} {'draw after data ms':>19} {'zoom redraw ms':>15} "
          f"{'JS heap MiB':>12}")
    for name, f in found.items():
        print(f"  {name:<9} {f['library'] / 1024:11.0f} {f['bytes'] / 1024:9.0f} "
              f"{f['gzip'] / 1024:9.0f} {f['drawn']:16.0f} {f['after_data']:19.1f} "
              f"{f['zoom']:15.1f} {f['heap'] / 2**20:12.1f}")
    for name, f in found.items():
        if name == "uplot":
            continue
        print(f"  {name} / uplot: page weight {f['bytes'] / base['bytes']:.1f}x, first render "
              f"{f['drawn'] / base['drawn']:.2f}x, draw after data "
              f"{f['after_data'] / base['after_data']:.1f}x, zoom redraw "
              f"{f['zoom'] / max(base['zoom'], 0.1):.1f}x")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 unless it could not run."""
    parser = argparse.ArgumentParser(prog="python -m bench.web", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15, help="page loads per subject")
    parser.add_argument("--candidates-only", action="store_true",
                        help="only the chart library comparison (no database)")
    parser.add_argument("--device-page-only", action="store_true",
                        help="only the device page as served (no chart library comparison)")
    parser.add_argument("--edge", action="store_true",
                        help="load the device page through the shipped nginx edge")
    args = parser.parse_args(argv)
    if args.device_page_only:
        from bench.web import dashboard

        dashboard.run(args.repeat, edge=args.edge)
        return 0
    missing = [str(candidates.library_file(n, "js")) for n in NAMES
               if not candidates.library_file(n, "js").exists()]
    if missing:
        print(f"missing {', '.join(missing)}: run deploy/lib/web_assets.sh --with-candidates",
              file=sys.stderr)
        return 2
    print_candidates(measure_candidates(args.repeat), args.repeat)
    if not args.candidates_only:
        from bench.web import dashboard

        dashboard.run(args.repeat, edge=args.edge)
    return 0


if __name__ == "__main__":
    sys.exit(main())
