"""The evaluation-cost part of bench.alerts: what evaluating 10 rules over every device costs,
as a ratio to what ingesting the same number of readings costs, measured in one run.

1. The ingester's persistent MQTT session is created, subscribed, and left offline.
2. Baseline (evaluator off): `per_device` readings of every device are queued on the broker,
   the ingester (`python -m ingest`) drains them; timed from its metrics endpoint coming up to
   the last row committed. Its CPU seconds are read from /proc.
3. Evaluation live: the evaluator (`python -m alerts.evaluator`, rules watching every device,
   sweep off) starts and catches up with the baseline's readings in its first sweep (one
   pass: a figure of its own). Then as many new readings are queued and drained by the
   ingester with the evaluator following its NOTIFYs, pass by pass, until it has evaluated
   every one. Its cost: the seconds its passes took (read, step, commit:
   sds_alerts_pass_seconds) and its CPU seconds.

Goal (issue 24): evaluation seconds / ingest seconds <= 0.2.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.alerts.stack import Stack, log, wait_until

GOAL = 0.2
# Ten rules over every device of the organisation, on different columns, written as a grower
# would (pending durations, hysteresis, a clear duration), so each reading steps ten state
# machines.
RULES: list[dict[str, Any]] = [
    {"name": "Frost", "column": "tair", "condition": {"op": "<", "threshold": 2},
     "clear": {"op": ">=", "threshold": 3}, "for": 900},
    {"name": "Heat", "column": "tair", "condition": {"op": ">", "threshold": 22},
     "clear": {"op": "<=", "threshold": 21}, "for": 600},
    {"name": "Dry air", "column": "rh", "condition": {"op": "<", "threshold": 40},
     "clear": {"op": ">=", "threshold": 45}, "for": 600},
    {"name": "Humid", "column": "rh", "condition": {"op": ">", "threshold": 85},
     "clear": {"op": "<=", "threshold": 80}, "for": 1800},
    {"name": "Wind", "column": "wind_speed", "condition": {"op": ">", "threshold": 4},
     "clear": {"op": "<=", "threshold": 3}, "for": 900, "clear_for": 900},
    {"name": "Storm", "column": "p", "condition": {"op": "<", "threshold": 980}},
    {"name": "Rain", "column": "precip", "condition": {"op": ">", "threshold": 0},
     "clear_for": 1800},
    {"name": "Dew", "column": "tdew", "condition": {"op": "<", "threshold": 5},
     "clear": {"op": ">=", "threshold": 6}, "for": 1800},
    {"name": "Thirsty", "column": "vpd", "condition": {"op": ">", "threshold": 15},
     "clear": {"op": "<=", "threshold": 12}},
    {"name": "Sun", "column": "swdw", "condition": {"op": ">", "threshold": 300},
     "clear": {"op": "<=", "threshold": 250}, "for": 900},
]


def rules() -> list[dict[str, Any]]:
    """The ten rule bodies, complete."""
    return [{"table": "calibrated", "scope": {"organisation": True}} | r for r in RULES]


def _drain(stack: Stack, name: str, expected: int) -> tuple[float, float, float]:
    """Run the ingester until `expected` rows are stored; (seconds, its CPU seconds, its and
    its database sessions' CPU seconds)."""
    ingester = stack.ingester(name)
    try:
        start = time.monotonic()
        wait_until(lambda: stack.count() >= expected, 1800, 0.1, f"{expected} rows stored")
        elapsed = time.monotonic() - start
        cpu, total = ingester.cpu(), ingester.total_cpu()
    finally:
        ingester.stop()
    return elapsed, cpu, total


def _passes(metrics: dict[str, float]) -> tuple[float, float]:
    """(seconds in passes, passes) over every trigger."""
    seconds = sum(v for k, v in metrics.items() if k.startswith("sds_alerts_pass_seconds_sum"))
    count = sum(v for k, v in metrics.items()
                if k.startswith("sds_alerts_pass_seconds_count"))
    return seconds, count


def run(stack: Stack, per_device: int) -> dict[str, Any]:
    """Measure; the figures (seconds, ratios)."""
    n = len(stack.devices) * per_device
    stack.add_rules(rules())
    log("creating the ingester's persistent session")
    stack.ingester_session()
    end_b = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    end_b = end_b.replace(minute=end_b.minute - end_b.minute % 5)
    end_a = end_b - timedelta(minutes=5 * per_device)

    log(f"baseline: queueing {n} readings ({len(stack.devices)} devices x {per_device})")
    stack.publish(stack.readings(end_a, per_device))
    ingest_s, ingest_cpu, ingest_all = _drain(stack, "ingest-a", n)
    log(f"baseline: ingester drained {n} readings in {ingest_s:.2f} s ({ingest_cpu:.2f} s CPU)")

    evaluator = stack.evaluator("evaluate", alert_sweep_interval=3600.0)
    try:
        first = wait_until(lambda: (m := evaluator.metrics()).get(
            'sds_alerts_pass_seconds_count{trigger="sweep"}', 0) >= 1 and m, 600, 0.1,
            "the evaluator's first sweep")
        sweep_s, _ = _passes(first)
        sweep_cpu = evaluator.cpu()
        log(f"evaluator: first sweep over {n} readings in {sweep_s:.2f} s")
        before_s, before_n = _passes(first)
        before_samples = first.get("sds_alerts_samples_total", 0)
        before_cpu, before_all = evaluator.cpu(), evaluator.total_cpu()
        log(f"live: queueing {n} more readings")
        stack.publish(stack.readings(end_b, per_device))
        live_ingest_s, live_ingest_cpu, _live_all = _drain(stack, "ingest-b", 2 * n)
        # Polled in the database, not on the metrics endpoint: every scrape costs the
        # evaluator CPU that would be counted as evaluation.
        wait_until(lambda: stack.evaluated(end_b) >= len(stack.devices), 600, 0.1,
                   "the evaluator to evaluate every new reading")
        after = evaluator.metrics()
        assert after.get("sds_alerts_samples_total", 0) - before_samples >= n
        eval_s, eval_n = _passes(after)
        eval_s -= before_s
        eval_n -= before_n
        eval_cpu = evaluator.cpu() - before_cpu
        eval_all = evaluator.total_cpu() - before_all
        events = sum(v for k, v in after.items() if k.startswith("sds_alerts_events_total")) \
            - sum(v for k, v in first.items() if k.startswith("sds_alerts_events_total"))
        phases = {p: after.get(f'sds_alerts_pass_phase_seconds_total{{phase="{p}"}}', 0)
                  - first.get(f'sds_alerts_pass_phase_seconds_total{{phase="{p}"}}', 0)
                  for p in ("read_step", "write", "commit")}
    finally:
        evaluator.stop()
    log(f"live: ingester {live_ingest_s:.2f} s; evaluator {eval_n:.0f} passes, "
        f"{eval_s:.2f} s, {eval_cpu:.2f} s CPU, {events:.0f} events")
    return {
        "devices": len(stack.devices), "rules": len(RULES), "readings": n,
        "ingest_s": ingest_s, "ingest_cpu_s": ingest_cpu, "ingest_total_cpu_s": ingest_all,
        "sweep_s": sweep_s, "sweep_cpu_s": sweep_cpu,
        "live_ingest_s": live_ingest_s, "live_ingest_cpu_s": live_ingest_cpu,
        "eval_s": eval_s, "eval_cpu_s": eval_cpu, "eval_passes": eval_n, "events": events,
        "eval_phases_s": phases, "eval_total_cpu_s": eval_all,
        "ratio_total_cpu": eval_all / ingest_all,
        "ratio": eval_s / ingest_s, "ratio_cpu": eval_cpu / ingest_cpu,
        "ratio_sweep": sweep_s / ingest_s, "ingest_slowdown": live_ingest_s / ingest_s,
    }


def report(f: dict[str, Any]) -> list[str]:
    """The result lines."""
    met = "met" if f["ratio"] <= GOAL else "MISSED"
    return [
        f"evaluation cost, {f['devices']} devices x {f['rules']} rules, {f['readings']} "
        "readings per phase",
        f"  ingest (baseline, evaluator off): {f['ingest_s']:.2f} s, "
        f"{f['ingest_cpu_s']:.2f} s CPU, {f['ingest_total_cpu_s']:.2f} s CPU with its "
        "database sessions",
        f"  evaluator live: {f['eval_passes']:.0f} passes, {f['eval_s']:.2f} s in passes, "
        f"{f['eval_cpu_s']:.2f} s CPU, {f['eval_total_cpu_s']:.2f} s CPU with its database "
        f"sessions, {f['events']:.0f} events",
        "  evaluator pass phases (s): " + ", ".join(
            f"{k} {v:.2f}" for k, v in f["eval_phases_s"].items()),
        f"  ratio evaluation / ingest (seconds): {f['ratio']:.3f}  (goal <= {GOAL}: {met})",
        f"  ratio evaluation / ingest (CPU):     {f['ratio_cpu']:.3f}",
        f"  ratio evaluation / ingest (CPU, with database sessions): "
        f"{f['ratio_total_cpu']:.3f}",
        f"  one catch-up pass over the baseline's readings: {f['sweep_s']:.2f} s, ratio "
        f"{f['ratio_sweep']:.3f}",
        f"  ingest with the evaluator running / without: {f['ingest_slowdown']:.2f}",
    ]
