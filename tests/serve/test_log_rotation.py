"""deploy/logrotate/logrotate.conf rotates the service's logs with Debian's logrotate while the
writing process keeps its file descriptor (as run.sh's `>>` redirection does): the big file is
kept as .1, the live file starts again near empty, and later writes land at its new end (no
sparse file, nothing written to the rotated copy)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.ingesting import wait_for

CONF = Path(__file__).resolve().parents[2] / "deploy" / "logrotate" / "logrotate.conf"


@pytest.mark.usefixtures("processes")
def test_a_log_past_the_size_is_rotated_under_a_live_writer(tmp_path: Path) -> None:
    state = tmp_path / "state"
    logs = state / "logs"
    logs.mkdir(parents=True)
    log = logs / "serve-1.log"
    log.write_bytes(b"old line\n" * (21 * 1024 * 1024 // 9))  # past the 20 MB size
    small = logs / "aggregate.log"
    small.write_bytes(b"a little\n")
    conf = tmp_path / "logrotate.conf"
    conf.write_text(CONF.read_text().replace("@STATE@", str(state)))
    # A writer holding the file open in append mode, like `cmd >>log 2>&1` in run.sh.
    before = log.stat().st_size
    writer = subprocess.Popen(
        ["bash", "-c", f"exec >>{log}; while true; do echo new line; sleep 0.01; done"])
    try:
        wait_for(lambda: log.stat().st_size > before, 10, every=0.01, what="the writer's lines")
        done = subprocess.run(
            ["logrotate", "-s", str(tmp_path / "status"), str(conf)], capture_output=True,
            text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        wait_for(lambda: 0 < log.stat().st_size < before, 10, every=0.01,
                 what="the writer's next line in the emptied log")
    finally:
        writer.terminate()
        writer.wait(5)
    rotated = logs / "serve-1.log.1"
    assert rotated.stat().st_size >= 21 * 1024 * 1024 - 9  # delaycompress: .1 stays plain
    live = log.stat()
    assert 0 < live.st_size < 64 * 1024
    assert live.st_blocks * 512 >= live.st_size - 4096  # no hole where the old bytes were
    assert log.read_bytes().startswith(b"new line\n")
    assert not (logs / "aggregate.log.1").exists()  # under the size: left alone


@pytest.mark.usefixtures("processes")
def test_the_rotation_loop_rotates_and_stops_on_sigterm(tmp_path: Path) -> None:
    """deploy/logrotate/rotate-loop.sh, the long-running process a supervisor keeps up."""
    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True)
    log = state / "logs" / "ingest.log"
    log.write_bytes(b"x" * (21 * 1024 * 1024))
    loop = subprocess.Popen(
        ["bash", str(CONF.parent / "rotate-loop.sh"), str(state)],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LOGROTATE_INTERVAL": "0.2"})
    try:
        rotated = state / "logs" / "ingest.log.1"
        # copytruncate: the copy appears first, the original is emptied after it is complete;
        # checking the size the moment the copy appears raced (seen on a loaded machine).
        wait_for(lambda: rotated.exists() and log.stat().st_size == 0, 20,
                 what="the loop to rotate the log")
        assert rotated.stat().st_size == 21 * 1024 * 1024
        assert "@STATE@" not in (state / "logrotate.conf").read_text()
    finally:
        loop.terminate()
        assert loop.wait(10) == 0
