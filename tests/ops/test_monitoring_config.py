"""The shipped monitoring configuration (deploy/prometheus/) checked by the tools that load it:
`promtool check config` on what deploy/run.sh renders, `promtool check rules`, the rules'
unit tests (tests/ops/rules_test.yml) with `promtool test rules`, `amtool check-config`; and
the renderer (deploy/lib/monitoring_conf.py) alone."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "prometheus"
RULES = SHIPPED / "sds.rules.yml"
RULE_TESTS = Path(__file__).with_name("rules_test.yml")
OPERATIONS = REPO / "docs" / "operations.md"
# The names the backup metrics are exported under (issue 25's backup part); the rules use them.
BACKUP_METRICS = {"sds_backup_last_success_timestamp_seconds", "sds_backup_age_seconds",
                  "sds_wal_archive_last_success_timestamp_seconds", "sds_wal_archive_failing",
                  "sds_wal_archive_failed_total", "sds_wal_archive_lag_seconds"}


def _conf() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sds_monitoring_conf", REPO / "deploy" / "lib" / "monitoring_conf.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _alerts() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def render(tmp_path: Path, **extra: Any) -> Path:
    """The configuration as deploy/run.sh renders it for a two-shard, two-instance layout."""
    args: dict[str, Any] = dict(
        webhook="http://127.0.0.1:9199/alerts", prometheus="127.0.0.1:9190",
        alertmanager="127.0.0.1:9193", node="127.0.0.1:9191", aggregate="127.0.0.1:9109",
        ingest=[("ingest-1", "127.0.0.1:9208"), ("ingest-1-standby", "127.0.0.1:9258"),
                ("ingest-2", "127.0.0.1:9209"), ("ingest-2-standby", "127.0.0.1:9259")],
        api=[("serve-1", "127.0.0.1:9110"), ("serve-2", "127.0.0.1:9111")])
    args.update(extra)
    _conf().render(tmp_path, **args)
    return tmp_path


@pytest.mark.usefixtures("processes")
def test_shipped_rules_load() -> None:
    """promtool check rules: every rule parses and every expression is valid PromQL."""
    out = _run("promtool", "check", "rules", str(RULES))
    assert f"SUCCESS: {len(_alerts())} rules found" in out


@pytest.mark.usefixtures("processes")
def test_rendered_config_loads(tmp_path: Path) -> None:
    """promtool check config on the rendered prometheus.yml (with its rule file and every
    target file present), amtool check-config on the rendered alertmanager.yml."""
    out_dir = render(tmp_path)
    out = _run("promtool", "check", "config", str(out_dir / "prometheus" / "prometheus.yml"))
    assert "WARNING" not in out, out  # a target file named in the config but not rendered
    assert f"SUCCESS: {len(_alerts())} rules found" in out
    _run("amtool", "check-config", str(out_dir / "alertmanager" / "alertmanager.yml"))


@pytest.mark.usefixtures("processes")
def test_rule_unit_tests_pass(tmp_path: Path) -> None:
    """promtool test rules: each alert fires on its input series with the expected labels and
    summary, after its `for`, and stays quiet on the series that must not fire it."""
    alerts = _alerts()
    doc = yaml.safe_load(RULE_TESTS.read_text())
    doc["rule_files"] = [str(RULES)]
    for case in doc["tests"]:
        for check in case["alert_rule_test"]:
            for exp in check.get("exp_alerts") or []:
                exp.setdefault("exp_annotations", {})["description"] = \
                    alerts[check["alertname"]]["annotations"]["description"]
    completed = tmp_path / "rules_test.yml"
    completed.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = _run("promtool", "test", "rules", str(completed))
    assert "SUCCESS" in out


def test_every_alert_is_tested_firing_and_quiet() -> None:
    """No rule without a unit test that makes it fire and one where it must not."""
    doc = yaml.safe_load(RULE_TESTS.read_text())
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert set(_alerts()) - firing == set()
    assert set(_alerts()) - quiet == set()


def test_every_alert_is_documented() -> None:
    """docs/operations.md "Monitoring and alerts" names every alert (meaning, what to do)."""
    text = OPERATIONS.read_text()
    section = text[text.index("## Monitoring and alerts"):]
    section = section[:section.find("\n## ", 3)] if "\n## " in section[3:] else section
    missing = [name for name in _alerts() if f"`{name}`" not in section]
    assert missing == []


def test_backup_metrics_use_the_exported_names() -> None:
    """The backup and WAL rules name only metrics the backup part exports."""
    names = set(re.findall(r"\bsds_(?:backup|wal)_\w+", RULES.read_text()))
    assert names and names <= BACKUP_METRICS, names - BACKUP_METRICS


def test_targets_and_webhook_rendered(tmp_path: Path) -> None:
    """Each process is a target labelled with its run.sh name; the webhook URL is set."""
    out_dir = render(tmp_path, webhook="https://pager.example/hook?team=ops")
    ingest = json.loads((out_dir / "prometheus" / "targets" / "ingest.json").read_text())
    assert [(g["labels"]["process"], g["targets"]) for g in ingest][:2] == [
        ("ingest-1", ["127.0.0.1:9208"]), ("ingest-1-standby", ["127.0.0.1:9258"])]
    api = json.loads((out_dir / "prometheus" / "targets" / "api.json").read_text())
    assert [g["targets"][0] for g in api] == ["127.0.0.1:9110", "127.0.0.1:9111"]
    am = yaml.safe_load((out_dir / "alertmanager" / "alertmanager.yml").read_text())
    assert am["receivers"][0]["webhook_configs"][0]["url"] == \
        "https://pager.example/hook?team=ops"
    # A second render of the same layout changes nothing (Prometheus rereads nothing).
    assert _conf().render(out_dir, webhook="https://pager.example/hook?team=ops",
                          prometheus="127.0.0.1:9190", alertmanager="127.0.0.1:9193",
                          node="127.0.0.1:9191", aggregate="127.0.0.1:9109",
                          ingest=[("ingest-1", "127.0.0.1:9208"),
                                  ("ingest-1-standby", "127.0.0.1:9258"),
                                  ("ingest-2", "127.0.0.1:9209"),
                                  ("ingest-2-standby", "127.0.0.1:9259")],
                          api=[("serve-1", "127.0.0.1:9110"),
                               ("serve-2", "127.0.0.1:9111")]) == []


@pytest.mark.parametrize("url", ["ftp://x/", "http://a b/", "http://x/#\n- url: evil", ""])
def test_webhook_must_be_an_http_url(url: str) -> None:
    """A bad SDS_ALERT_WEBHOOK_URL is refused, never written into the YAML."""
    with pytest.raises(ValueError):
        _conf().alertmanager_yml((SHIPPED / "alertmanager.yml").read_text(), url)


def test_patroni_rest_endpoints_from_node_configs(tmp_path: Path) -> None:
    """Patroni's REST addresses come from `restapi: listen:` of each node's configuration."""
    (tmp_path / "pg1.yml").write_text(
        "scope: sds\nname: pg1\nrestapi:\n  listen: 127.0.0.1:8008\n"
        "  connect_address: 127.0.0.1:8008\npostgresql:\n  listen: 127.0.0.1:55440\n")
    (tmp_path / "pg2.yml").write_text(
        "name: pg2\npostgresql:\n  listen: 0.0.0.0:55441\nrestapi:\n  listen: '0.0.0.0:8009'\n")
    (tmp_path / "etcd.yml").write_text("name: etcd1\nlisten-client-urls: http://x:2379\n")
    assert _conf().patroni_endpoints(tmp_path) == [("pg1", "127.0.0.1:8008"),
                                                   ("pg2", "127.0.0.1:8009")]
    out_dir = render(tmp_path / "out", patroni_dir=tmp_path)
    patroni = json.loads((out_dir / "prometheus" / "targets" / "patroni.json").read_text())
    assert [g["targets"][0] for g in patroni] == ["127.0.0.1:8008", "127.0.0.1:8009"]
