"""The Patroni profile's rendered files (deploy/lib/pg_patroni.sh), without starting anything:
the node config Patroni reads, HAProxy's config, the URL each discovery mode writes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.process import REPO

# Debian's python3 has PyYAML (Patroni depends on it); the project's venv does not pin it.
SYSTEM_PYTHON = "/usr/bin/python3"

pytestmark = pytest.mark.usefixtures("processes")  # every test runs bash or python3


def _render(tmp: Path, call: str, **env: str) -> str:
    """Source pg_patroni.sh as services.sh does (after common.sh) and run `call`."""
    script = f"""
set -euo pipefail
SDS_SCRIPT=test
. {REPO}/deploy/lib/common.sh
STATE={tmp}
DB=patroni
PT_SU_PW=su-secret PT_REPL_PW=repl-secret
. {REPO}/deploy/lib/pg_patroni.sh
{call}
"""
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env})
    assert r.returncode == 0, r.stderr
    return r.stdout


def _yaml(text: str) -> dict:
    r = subprocess.run([SYSTEM_PYTHON, "-c", "import json, sys, yaml; "
                        "print(json.dumps(yaml.safe_load(sys.stdin)))"],
                       input=text, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("nodes", ["2", "3"])
def test_node_config_fails_over_safely(tmp_path: Path, nodes: str) -> None:
    """Synchronous mode, pg_rewind with checksums, timings Patroni accepts, the node's own
    ports and pgBackRest config, every etcd member listed."""
    conf = _yaml(_render(tmp_path, f"pt_backrest_files; pt_node_yml {nodes}",
                         SDS_PATRONI_NODES=nodes, SDS_PATRONI_PORT_BASE="50000"))
    dcs = conf["bootstrap"]["dcs"]
    assert dcs["synchronous_mode"] is True
    assert dcs["loop_wait"] + 2 * dcs["retry_timeout"] <= dcs["ttl"] <= 30
    assert dcs["postgresql"]["use_pg_rewind"] is True
    assert "data-checksums" in conf["bootstrap"]["initdb"]
    params = dcs["postgresql"]["parameters"]
    assert params["shared_preload_libraries"] == "timescaledb"
    assert params["archive_mode"] == "on"
    assert conf["postgresql"]["listen"] == f"127.0.0.1:{50000 + int(nodes)}"
    assert conf["restapi"]["listen"] == f"127.0.0.1:{50010 + int(nodes)}"
    assert conf["etcd3"]["hosts"] == "127.0.0.1:50021,127.0.0.1:50022,127.0.0.1:50023"
    archive = conf["postgresql"]["parameters"]["archive_command"]
    assert f"--config={tmp_path}/patroni/node{nodes}/pgbackrest.conf" in archive
    assert archive.endswith("archive-push %p")
    assert int(conf["postgresql"]["parameters"]["archive_timeout"]) > 0


def test_each_node_archives_with_its_own_data_directory(tmp_path: Path) -> None:
    """Through the backup renderer (shared/backup.py): one repository; node k's config has its
    own data directory as pg1 (archive-push resolves the WAL file there); the cluster's
    config, the one `sds backup` and the scheduler use, lists every node."""
    out = _render(tmp_path, "pt_backrest_files; echo $BK_CONF", SDS_PATRONI_NODES="3")
    cluster = Path(out.split()[-1])
    assert cluster == tmp_path / "patroni" / "pgbackrest" / "pgbackrest.conf"
    repo = f"repo1-path={tmp_path}/patroni/pgbackrest/repo"
    every = cluster.read_text()
    assert repo in every
    assert all(f"pg{k}-path={tmp_path}/patroni/node{k}/data" in every for k in (1, 2, 3))
    one = (tmp_path / "patroni" / "node2" / "pgbackrest.conf").read_text()
    assert repo in one
    assert f"pg1-path={tmp_path}/patroni/node2/data" in one and "pg2-path" not in one


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="HAProxy is not installed")
def test_haproxy_follows_the_primary_endpoint(tmp_path: Path) -> None:
    cfg = _render(tmp_path, "pt_haproxy_conf", SDS_PATRONI_PORT_BASE="50000")
    assert "option httpchk GET /primary" in cfg and "on-marked-down shutdown-sessions" in cfg
    assert "server node2 127.0.0.1:50002 check port 50012" in cfg
    (tmp_path / "h.cfg").write_text(cfg)
    r = subprocess.run(["haproxy", "-c", "-q", "-f", str(tmp_path / "h.cfg")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


def test_urls_of_both_discovery_modes(tmp_path: Path) -> None:
    proxy = _render(tmp_path, "pt_url pw", SDS_PATRONI_PORT_BASE="50000").strip()
    assert proxy == "postgresql://sds:pw@127.0.0.1:50000/sds"  # pragma: allowlist secret
    libpq = _render(tmp_path, "pt_url pw", SDS_PATRONI_PORT_BASE="50000",
                    SDS_PATRONI_DISCOVERY="libpq", SDS_PATRONI_NODES="3").strip()
    assert libpq == ("postgresql://sds:pw"  # the test's password, split from its @host
                     "@127.0.0.1:50001,127.0.0.1:50002,127.0.0.1:50003/sds"
                     "?target_session_attrs=read-write&connect_timeout=5")


@pytest.mark.parametrize("name,value", [("SDS_PATRONI_NODES", "4"),
                                        ("SDS_PATRONI_DISCOVERY", "dns"),
                                        ("SDS_PATRONI_PORT_BASE", "80")])
def test_bad_settings_are_refused(tmp_path: Path, name: str, value: str) -> None:
    r = subprocess.run(["bash", "-c", f"SDS_SCRIPT=t; . {REPO}/deploy/lib/common.sh; DB=patroni; "
                        f"STATE={tmp_path}; . {REPO}/deploy/lib/pg_patroni.sh"],
                       capture_output=True, text=True, timeout=30, env={name: value,
                                                                        "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1 and name in r.stderr, r.stderr


def test_port_base_is_remembered(tmp_path: Path) -> None:
    """A start with SDS_PATRONI_PORT_BASE remembers it: a later stop or status without the
    setting finds the running cluster (it said "NO LEADER" on the default ports)."""
    _render(tmp_path, "pt_remember_base", SDS_PATRONI_PORT_BASE="50000")
    assert _render(tmp_path, 'echo "$PT_BASE"').strip() == "50000"
    assert _render(tmp_path, 'echo "$PT_BASE"', SDS_PATRONI_PORT_BASE="51000").strip() == "51000"
