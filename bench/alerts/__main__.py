"""Alert benchmark (issue 24): `.venv/bin/python -m bench.alerts [--probes N] [--db URL]`.

Starts its own PostgreSQL (unless --db names a server) and mosquitto on free loopback ports and
measures, in one run:
  a. latency: p50/p99 from a reading's MQTT publish to its signed webhook's arrival at a
     receiver process, through the real ingester, evaluator and deliverer processes
     (bench/alerts/latency.py), against a bare MQTT subscriber's arrival of the same publishes.
     Goal: p99 <= 10 s.
Results print as JSON; docs/benchmarks.md records them.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

from bench.alerts import latency
from bench.common import scratch_database


def main() -> None:
    """Run the measurements and print them."""
    parser = argparse.ArgumentParser(prog="python -m bench.alerts")
    parser.add_argument("--probes", type=int, default=100, help="readings measured (a)")
    parser.add_argument("--db", default=None, help="maintenance URL of an existing server")
    args = parser.parse_args()
    results: dict[str, object] = {"machine": f"{platform.machine()}, "
                                  f"Python {platform.python_version()}"}
    with tempfile.TemporaryDirectory(prefix="bench-alerts-") as tmp, \
            scratch_database(args.db, prefix="bench_alerts") as url:
        results["latency_s"] = latency.measure(url, Path(tmp), probes=args.probes)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
