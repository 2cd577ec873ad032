"""deploy/run.sh's monitoring layout, with its functions sourced: every process it starts that
serves metrics is a scrape target on the port the process itself computes, and the rendered
configuration passes promtool."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from ingest.shards import shard_settings
from shared.config import Settings

REPO = Path(__file__).resolve().parents[2]
RUN_SH = REPO / "deploy" / "run.sh"

pytestmark = pytest.mark.usefixtures("processes")  # every test runs bash


def _run_sh(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` in bash with deploy/run.sh sourced (which only defines its functions then)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
    done = subprocess.run(["bash", "-c", f'. "{RUN_SH}"; {script}'], capture_output=True,
                          text=True, env={**base, **env}, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def _ingest_port(shards: int, shard: int, base: int) -> int:
    """The metrics port the ingester computes for itself (ingest/shards.py)."""
    s = Settings(metrics_port=base, ingest_shards=shards, ingest_shard=shard,
                 ingest_share_group="a-long-enough-secret-group")
    return shard_settings(s).metrics_port


def test_metrics_ports_match_what_each_process_serves() -> None:
    """run.sh's port of each process is the one the process binds: shards and standbys from
    ingest/shards.py, instance k of the API at SDS_API_METRICS_PORT + k - 1."""
    out = _run_sh('api_layout; for n in "${PROCS[@]}"; do echo "$n $(metrics_port_of "$n")";'
                  " done", SDS_INGEST_SHARDS="2", SDS_API_INSTANCES="3").stdout
    ports = {f[0]: int(f[1]) for f in (line.split() for line in out.splitlines()) if len(f) == 2}
    assert ports["ingest-1"] == _ingest_port(2, 1, 9108) == 9208
    assert ports["ingest-2"] == _ingest_port(2, 2, 9108)
    # A standby runs with SDS_METRICS_PORT + 50 (run.sh's proc_argv) and adds its shard's offset.
    assert ports["ingest-1-standby"] == _ingest_port(2, 1, 9158) == 9258
    assert ports["ingest-2-standby"] == _ingest_port(2, 2, 9158)
    assert [ports[f"serve-{k}"] for k in (1, 2, 3)] == [9110, 9111, 9112]
    assert ports["aggregate"] == 9109
    assert ports["alerts-evaluate"] == Settings().alerts_metrics_port
    assert ports["alerts-deliver"] == Settings().delivery_metrics_port
    single = _run_sh('api_layout; for n in "${PROCS[@]}"; do echo "$n $(metrics_port_of "$n")";'
                     " done", SDS_INGEST_SHARDS="1", SDS_INGEST_STANDBY="1",
                     SDS_API_METRICS_PORT="0").stdout
    sports = {f[0]: f[1] for f in (line.split() for line in single.splitlines()) if len(f) == 2}
    assert sports["ingest"] == "9108" and sports["ingest-standby"] == "9158"
    assert sports["serve-1"] == "0"


def test_api_instances_get_their_metrics_port_and_directory() -> None:
    """proc_argv gives API instance k its metrics port and its own multiprocess directory."""
    out = _run_sh('api_layout; VENV=/v; proc_argv serve-2; printf "%s\\n" "${ARGV[@]}"',
                  SDS_API_INSTANCES="2").stdout.splitlines()
    assert "SDS_API_METRICS_PORT=9111" in out
    assert f"PROMETHEUS_MULTIPROC_DIR={REPO}/.state/api-metrics/serve-2" in out


def test_rendered_layout_scrapes_every_process(tmp_path: Path) -> None:
    """monitoring_config for two shards and two API instances: one target per process that
    serves metrics (disabled ports left out), Patroni's nodes when their configs exist, and
    promtool accepts the result."""
    (tmp_path / "patroni").mkdir()
    (tmp_path / "patroni" / "pg1.yml").write_text("restapi:\n  listen: 127.0.0.1:8008\n")
    state = shlex.quote(str(tmp_path))
    _run_sh(f"STATE={state}; SUPERVISE={state}/supervise; PIDS={state}/pids; "
            "mkdir -p $SUPERVISE $PIDS; api_layout; monitoring_config",
            SDS_INGEST_SHARDS="2", SDS_API_INSTANCES="2", SDS_AGGREGATE_METRICS_PORT="0")
    targets = tmp_path / "prometheus" / "targets"

    def listed(name: str) -> dict[str, str]:
        return {g["labels"]["process"]: g["targets"][0]
                for g in json.loads((targets / name).read_text())}

    assert listed("ingest.json") == {"ingest-1": "127.0.0.1:9208",
                                     "ingest-1-standby": "127.0.0.1:9258",
                                     "ingest-2": "127.0.0.1:9209",
                                     "ingest-2-standby": "127.0.0.1:9259"}
    assert listed("api.json") == {"serve-1": "127.0.0.1:9110", "serve-2": "127.0.0.1:9111"}
    assert listed("aggregate.json") == {}  # its port is 0: nothing to scrape
    assert listed("alerts.json") == {"alerts-evaluate": "127.0.0.1:9112",
                                     "alerts-deliver": "127.0.0.1:9107"}
    assert listed("node.json") == {"node-exporter": "127.0.0.1:9191"}
    assert listed("patroni.json") == {"pg1": "127.0.0.1:8008"}
    assert listed("alertmanager.json") == {"alertmanager": "127.0.0.1:9193"}
    done = subprocess.run(["promtool", "check", "config",
                           str(tmp_path / "prometheus" / "prometheus.yml")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "WARNING" not in done.stdout + done.stderr, done.stdout
    # The data directories belong to the user the servers run as.
    assert (tmp_path / "prometheus" / "data").owner() == "prometheus"
