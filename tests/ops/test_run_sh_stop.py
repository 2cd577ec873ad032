"""`deploy/run.sh stop` on a scratch stack: the processes stop at once, each on its own, in the
order the data needs (docs/operations.md "Stopping"): the API instances only after the edge has
drained, the rest without waiting for either."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ingesting import wait_for
from tests.support.restoring import Tree

pytestmark = [pytest.mark.usefixtures("processes"),
              pytest.mark.skipif(os.geteuid() != 0, reason="run.sh runs as root")]

# Independent of the edge: they stop while its drain is held.
INDEPENDENT = ("simulate", "ingest", "aggregate", "alerts-evaluate", "alerts-deliver", "logrotate")


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie waiting for PID 1 has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Tree]:
    """A started scratch stack (3 days of demo history: the stop is not about the cold tier);
    stopped afterwards."""
    t = Tree(tmp_path)
    t.env["SDS_DEMO_HISTORY_DAYS"] = "3"
    try:
        started = t.sh("deploy/run.sh")
        assert started.returncode == 0, started.stdout + started.stderr
        yield t
    finally:
        t.sh("deploy/run.sh stop", timeout=300)


def assert_answering_at_once(stack: Tree) -> None:
    """run.sh says "running" only once each API instance and the edge in front answer: the
    README's first curl, pasted at once, is answered (it got the edge's 502 for about a second
    when run.sh returned as soon as the processes had stayed up). One request each, no retry."""
    bind = stack.env["SDS_EDGE_BIND"]
    for url in (f"http://{stack.env['SDS_HTTP_BIND']}/api/v2/", f"http://{bind}/api/v2/"):
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200, url
            assert json.load(resp)["openapi"] == "/api/v2/openapi.json"


@pytest.mark.timeout(600)
def test_stop_holds_the_api_behind_the_edge_and_stops_the_rest_meanwhile(stack: Tree) -> None:
    """The edge's stop is held (its supervisor frozen, so the SIGQUIT waits): the simulator,
    the ingester, the scheduler, the alerts processes and logrotate stop meanwhile, while the API
    instance keeps running for the requests the edge still passes on. Resumed, the edge drains,
    then the API instance stops; every process says "NAME: stopped". Before, the stop went one
    process after the other: nothing after the edge stopped while it was held. First, the stack
    answered as soon as run.sh returned (assert_answering_at_once)."""
    assert_answering_at_once(stack)
    pids = {name: int((stack.state / "pids" / f"{name}.pid").read_text())
            for name in (*INDEPENDENT, "edge", "serve-1")}
    edge = pids["edge"]
    os.kill(edge, signal.SIGSTOP)
    stop = subprocess.Popen(["bash", "-c", "deploy/run.sh stop"], env=stack.env, cwd=stack.root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        # Well inside run.sh's 30 s per process (STOP_WAIT): the old one-by-one stop had
        # SIGKILLed the frozen edge by then and only then stopped the others.
        wait_for(lambda: not any(running(pids[n]) for n in INDEPENDENT), 120,
                 what="the processes that do not depend on the edge to stop")
        assert running(edge), "the held edge was killed instead of waited for"
        assert running(pids["serve-1"]), "the API instance stopped before the edge drained"
    finally:
        if running(edge):  # (the old stop had killed it)
            os.kill(edge, signal.SIGCONT)
        out, _ = stop.communicate(timeout=300)
    assert stop.returncode == 0, out
    lines = out.splitlines()
    for name in (*INDEPENDENT, "serve-1"):
        assert f"run.sh: {name}: stopped" in lines, out
    assert lines.index("run.sh: edge: stopped (drained)") < lines.index("run.sh: serve-1: stopped")
    assert "SIGKILL" not in out, out
    assert not any(running(pid) for pid in pids.values()), out
