"""Render the monitoring configuration for a running layout: deploy/prometheus/ into a state
directory, with the scrape targets of every process deploy/run.sh started.

    monitoring_conf.py --out DIR --webhook URL --prometheus H:P --alertmanager H:P --node H:P
        [--aggregate H:P] [--alerts H:P] [--delivery H:P] [--ingest NAME=H:P ...]
        [--api NAME=H:P ...]
        [--patroni-dir DIR]

Writes DIR/prometheus/{prometheus.yml, sds.rules.yml, targets/*.json} and
DIR/alertmanager/alertmanager.yml (its webhook URL replaced). The target files are written
only when they change, each by a rename, so a running Prometheus rereads a new layout by itself
(file_sd) and never reads half a file. Prints the names of the files that changed. Standard
library only (deploy/run.sh runs it with Debian's python3); testbed/prometheus.py renders the
same way for the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

SHIPPED = Path(__file__).resolve().parent.parent / "prometheus"
URL_LINE = re.compile(r"^(\s*- url: )\S+(.*# SDS_ALERT_WEBHOOK_URL)$", re.MULTILINE)


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` to `path` by a rename when it differs; whether it changed."""
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def targets(named: list[tuple[str, str]]) -> str:
    """A file_sd file: one group per process, labelled process=<name>."""
    groups = [{"targets": [address], "labels": {"process": name}} for name, address in named]
    return json.dumps(groups, indent=2) + "\n"


def alertmanager_yml(shipped: str, webhook: str) -> str:
    """The shipped alertmanager.yml with the receiver's URL set to `webhook`."""
    if not re.fullmatch(r"https?://[^\s'\"#]+", webhook):
        raise ValueError(f"SDS_ALERT_WEBHOOK_URL must be an http(s) URL, not {webhook!r}")
    text, n = URL_LINE.subn(lambda m: f"{m.group(1)}{webhook}{m.group(2)}", shipped)
    if n != 1:
        raise ValueError("deploy/prometheus/alertmanager.yml lost its SDS_ALERT_WEBHOOK_URL line")
    return text


def patroni_endpoints(directory: Path) -> list[tuple[str, str]]:
    """(node, host:port) of each Patroni node's REST API, from `restapi: listen:` in the
    node configurations (*.yml) under `directory`; a wildcard host is scraped on 127.0.0.1."""
    found = []
    for path in sorted(directory.rglob("*.yml")) if directory.is_dir() else []:
        block = False
        for line in path.read_text(errors="replace").splitlines():
            if re.match(r"^restapi:\s*$", line):
                block = True
            elif block and re.match(r"^\S", line):
                block = False
            elif block:
                m = re.match(r"^\s+listen:\s*['\"]?([^'\"\s]+)", line)
                if m:
                    host, _, port = m.group(1).rpartition(":")
                    host = "127.0.0.1" if host in ("", "0.0.0.0", "*", "::") else host
                    found.append((path.stem, f"{host}:{port}"))
                    break
    return found


def render(out: Path, *, webhook: str, prometheus: str, alertmanager: str, node: str,
           aggregate: str | None = None, alerts: str | None = None,
           delivery: str | None = None, ingest: list[tuple[str, str]] | None = None,
           api: list[tuple[str, str]] | None = None, patroni_dir: Path | None = None,
           shipped: Path = SHIPPED) -> list[str]:
    """Write the configuration under `out`; the paths that changed."""
    prom, am = out / "prometheus", out / "alertmanager"
    files = {
        prom / "prometheus.yml": (shipped / "prometheus.yml").read_text(),
        prom / "sds.rules.yml": (shipped / "sds.rules.yml").read_text(),
        prom / "targets" / "ingest.json": targets(ingest or []),
        prom / "targets" / "aggregate.json": targets([("aggregate", aggregate)] if aggregate
                                                     else []),
        # The evaluator and the deliverer: job sds-alerts, told apart by `process`.
        prom / "targets" / "alerts.json": targets(
            ([("alerts-evaluate", alerts)] if alerts else [])
            + ([("alerts-deliver", delivery)] if delivery else [])),
        prom / "targets" / "api.json": targets(api or []),
        prom / "targets" / "node.json": targets([("node-exporter", node)]),
        prom / "targets" / "patroni.json": targets(
            patroni_endpoints(patroni_dir) if patroni_dir else []),
        prom / "targets" / "prometheus.json": targets([("prometheus", prometheus)]),
        prom / "targets" / "alertmanager.json": targets([("alertmanager", alertmanager)]),
        am / "alertmanager.yml": alertmanager_yml((shipped / "alertmanager.yml").read_text(),
                                                  webhook),
    }
    return [str(path) for path, text in files.items() if write_if_changed(path, text)]


def _named(value: str) -> tuple[str, str]:
    name, sep, address = value.partition("=")
    if not sep or not re.fullmatch(r"[\w.-]+", name) or not re.fullmatch(r"[\w.-]+:\d+",
                                                                          address):
        raise argparse.ArgumentTypeError(f"expected NAME=HOST:PORT, not {value!r}")
    return name, address


def main(argv: list[str]) -> int:
    """Command line: render, print what changed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--webhook", required=True)
    p.add_argument("--prometheus", required=True)
    p.add_argument("--alertmanager", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--aggregate")
    p.add_argument("--alerts")
    p.add_argument("--delivery")
    p.add_argument("--ingest", type=_named, action="append", default=[])
    p.add_argument("--api", type=_named, action="append", default=[])
    p.add_argument("--patroni-dir", type=Path)
    a = p.parse_args(argv)
    try:
        changed = render(a.out, webhook=a.webhook, prometheus=a.prometheus,
                         alertmanager=a.alertmanager, node=a.node, aggregate=a.aggregate,
                         alerts=a.alerts, delivery=a.delivery, ingest=a.ingest, api=a.api,
                         patroni_dir=a.patroni_dir)
    except ValueError as exc:
        print(f"monitoring_conf.py: {exc}", file=sys.stderr)
        return 2
    for path in changed:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
