"""What every test server shares: free ports, its directory, the one way to wait for it and
the one way to stop a process.

Each server lives in its own directory (a fresh one under /tmp unless one is given) and is
driven through its own pid only, so fault tests can stop, crash or signal it. Run as root (as CI
is), the servers run under their own users (postgres, mosquitto, www-data), exactly as
deploy/services.sh runs them. Every wait is bounded; a failed start raises with the server's
log tail.
"""

from __future__ import annotations

import grp
import http.client
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0  # seconds; initdb + start is ~1-2 s here, crash recovery a little more
STOP_TIMEOUT = 30.0

T = TypeVar("T")


class ServiceError(RuntimeError):
    """A test server failed to start, stop or answer; the message ends with its log tail."""


# Ports a test server gets: below the kernel's ephemeral range, which outgoing connections take
# their local ports from. A port the OS picked (bind to 0) is an ephemeral one, and a server
# that binds it tens of seconds later (a scratch `deploy/run.sh` stack starts its scheduler a
# minute after its ports are chosen) found it held by some client's connection: "Address
# already in use", a scheduler in a restart loop and a drill timing out (seen with four such
# stacks starting at once). Below PORT_CEILING, too: deploy/lib/ports.sh's defaults (RabbitMQ
# 21800+, PostgreSQL 25432+) stay clear, so a test never takes a running stack's port.
PORT_FLOOR, PORT_CEILING = 10000, 21800
PORT_BANDS = 8  # one band per test worker (PYTEST_XDIST_WORKER gwN), so workers never collide
# Ports handed out PORT_STRIDE apart: a server told port P may take P+1.. too (the second API
# instance of a stack with SDS_API_INSTANCES=2 listens on SDS_HTTP_BIND's port + 1), and the
# next free_port() must not be that one (it was: the edge got the port serve-2 listens on).
PORT_STRIDE = 4
_next_port: dict[str, int] = {}


def _band() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    top = min(PORT_CEILING, ephemeral_low)
    size = (top - PORT_FLOOR) // PORT_BANDS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker[:2] == "gw" and worker[2:].isdigit() else os.getpid()
    low = PORT_FLOOR + (index % PORT_BANDS) * size
    return low, low + size


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and that no outgoing connection will take
    before a server binds it: the next one of this process's band below the ephemeral range
    that binds (the OS's pick, an ephemeral port, when the range leaves no room for bands)."""
    try:
        low, high = _band()
    except (OSError, ValueError, IndexError):
        low = high = 0
    if high - low >= 100:
        key = f"{os.getpid()}:{low}"  # a forked child starts where its parent was
        slots = (high - low) // PORT_STRIDE
        start = _next_port.get(key, os.getpid() % slots)
        for i in range(slots):
            slot = (start + i) % slots
            port = low + slot * PORT_STRIDE
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _next_port[key] = slot + 1
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def http_ok(port: int, path: str) -> bool:
    """Whether GET path on 127.0.0.1:port answers 200 within a second."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def poll(cond: Callable[[], T], timeout: float, every: float = 0.05) -> T | None:
    """Call `cond` until it returns something truthy (returned) or `timeout` seconds pass
    (None). The one polling loop of the testbed and the tests: what is awaited (a port, a log
    line, a row) has no notification to block on, so it is asked again every `every` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(every)


def wait_started(proc: subprocess.Popen[bytes], ready: Callable[[], object], *,
                 what: str, log: Callable[[], str] = str, timeout: float = START_TIMEOUT,
                 every: float = 0.05) -> None:
    """Wait until `ready()` is truthy; if `proc` exits first or `timeout` passes, kill it and
    raise ServiceError with `log()` (its log tail)."""
    if poll(lambda: proc.poll() is not None or ready(), timeout, every) and proc.poll() is None:
        return
    code = proc.poll()
    kill_process(proc, workers=True)
    state = f"exited with {code}" if code is not None else f"not ready after {timeout}s"
    raise ServiceError(f"{what} {state} at start\n{log()}")


def children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc), e.g. gunicorn's or nginx's workers."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat_fields[1]) == pid:
            found.append(int(entry.name))
    return found


def kill_process(proc: subprocess.Popen[bytes], *, workers: bool = False) -> None:
    """SIGKILL `proc` (with `workers`, its direct children too: a prefork server's workers,
    whose in-flight connections are then reset) and reap it."""
    if proc.poll() is None:
        pids = children(proc.pid) if workers else []
        proc.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc.wait(timeout=STOP_TIMEOUT)


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, *,
                 timeout: float = STOP_TIMEOUT, workers: bool = False) -> int:
    """The one way a test stops a process: `sig` (SIGTERM: the process's own clean stop), wait
    up to `timeout` s, then kill_process. Returns the exit status (-SIGKILL when it had to be
    killed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)  # a SIGSTOPped process cannot act on sig
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_process(proc, workers=workers)
    return int(proc.wait(timeout=STOP_TIMEOUT))


def is_root() -> bool:
    """Whether the tests run as root (as CI does): the servers then run as their own users."""
    return os.geteuid() == 0


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no {path})"
    return f"--- last {lines} lines of {path} ---\n" + "\n".join(text.splitlines()[-lines:])


def chown_tree(path: Path, user: str) -> None:
    """Give a server's directory to the user it runs as (only possible, and needed, as root)."""
    if not is_root():
        return
    pw = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, pw.pw_uid, pw.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), pw.pw_uid, pw.pw_gid, follow_symlinks=False)


def ensure_traversable(path: Path, user: str) -> None:
    """Grant o+x on any parent of path that user could not enter (e.g. pytest's 0700 tmp root).

    Only traverse rights are added, never read or write: the servers need to reach their own
    directory, nothing else.
    """
    if not is_root():
        return
    pw = pwd.getpwnam(user)
    groups = {g.gr_gid for g in grp.getgrall() if user in g.gr_mem} | {pw.pw_gid}
    for parent in reversed(path.resolve().parents):
        st = parent.stat()
        if st.st_uid == pw.pw_uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid in groups:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            os.chmod(parent, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)


class Server(ABC):
    """Directory bookkeeping shared by every server."""

    base_dir: Path
    _owns_dir: bool = False

    def _prepare_dir(self, base_dir: Path | None, prefix: str) -> Path:
        if base_dir is None:
            # Under /tmp, so the server's user can reach it without touching anything else.
            self.base_dir = Path(tempfile.mkdtemp(prefix=prefix))
            self._owns_dir = True
        else:
            self.base_dir = Path(base_dir).resolve()
            self.base_dir.mkdir(parents=True, exist_ok=True)
        return self.base_dir

    def cleanup(self) -> None:
        """Stop the server and remove its directory if this helper created it."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    @abstractmethod
    def stop(self) -> None:
        """Stop the server (each server knows how)."""

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


class ProcessServer(Server):
    """A server run in the foreground as one Popen handle on one port (mosquitto, gunicorn,
    nginx, Prometheus): the handle and port bookkeeping they share, and their stop:
    `stop_signal`, then SIGKILL after STOP_TIMEOUT."""

    stop_signal: int = signal.SIGTERM
    prefork = False  # a master with workers (gunicorn, nginx): a kill reaches them too
    _port: int | None = None
    _proc: subprocess.Popen[bytes] | None = None

    def is_running(self) -> bool:
        """Whether the (master) process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def port(self) -> int:
        """The port it listens on."""
        if self._port is None:
            raise ServiceError(f"{type(self).__name__} not started")
        return self._port

    @property
    def pid(self) -> int:
        """The (master) process's pid."""
        return self._require_proc().pid

    def stop(self) -> None:
        """`stop_signal` and wait; SIGKILL (the workers too) after STOP_TIMEOUT."""
        if self.is_running():
            stop_process(self._require_proc(), self.stop_signal, workers=self.prefork)

    def kill(self) -> None:
        """SIGKILL and wait: a crash (a prefork server's workers too: in-flight connections
        are reset)."""
        if self.is_running():
            kill_process(self._require_proc(), workers=self.prefork)

    def _require_proc(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise ServiceError(f"{type(self).__name__} not started")
        return self._proc
