"""Alerts benchmark (issue 24): `.venv/bin/python -m bench.alerts [--quick]`.

Starts its own PostgreSQL (TimescaleDB, durable defaults) and mosquitto (shipped durable
settings) on free loopback ports and runs each part on the same stack, printing ratios against
baselines measured in the same run (docs/benchmarks.md "Alerts"):

  evaluation  the evaluation cost of 1,000 devices x 10 rules as a ratio to the ingest cost of
              the same readings (bench/alerts/evaluation.py; goal <= 0.2)
  latency     p50/p99 from a reading's MQTT publish to its signed webhook's arrival, through
              the ingester, evaluator and deliverer processes, against a bare MQTT subscriber
              (bench/alerts/latency.py; goal p99 <= 10 s)

A part is a module with `run(stack, per_device) -> figures` and `report(figures) -> lines`,
registered in PARTS. `--part NAME` runs one.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.alerts import evaluation, latency
from bench.alerts.stack import Stack, log

PARTS: dict[str, ModuleType] = {"evaluation": evaluation, "latency": latency}


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, build the stack, run the parts, print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.alerts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 devices x 3 readings")
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--readings", type=int, default=12,
                        help="readings per device in each phase (5 minutes apart)")
    parser.add_argument("--part", choices=sorted(PARTS), action="append",
                        help="run only this part (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    devices, per_device = (200, 3) if args.quick else (args.devices, args.readings)
    figures: dict[str, Any] = {}
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-alerts-") as tmp:
        stack = Stack(Path(tmp), devices)
        try:
            for name in args.part or list(PARTS):
                part = PARTS[name]
                run: Callable[[Stack, int], dict[str, Any]] = part.run
                figures[name] = run(stack, per_device)
                lines += part.report(figures[name])
        finally:
            stack.close()
    log("results")
    for line in lines:
        print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
