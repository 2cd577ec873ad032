"""Processes of our own, forked from an interpreter that has already imported the program: a test
that starts one dozens of times (`sds cold move` killed after every step, an ingester SIGKILLed
20 times and restarted) pays Python's start-up and the program's imports (pyarrow, pandas,
Flask, paho: 0.5-1 s each on an idle machine, 2-3 s on a loaded one) once instead of every time.

Each is still a process of its own, with its own environment, connections, log and exit status:
a failpoint's or the test's SIGKILL ends that process and nothing else, and the test sees
-SIGKILL as from `subprocess`. multiprocessing's forkserver does the forking: a single-threaded
server started once per test process, so no fork happens inside the (threaded) test process.
One difference from `python -m`: the child ends with os._exit, so atexit handlers do not run
(neither `sds` nor the ingester registers any; output is line-buffered, so none is lost).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from multiprocessing.context import ForkServerContext, ForkServerProcess
from pathlib import Path

# What the server imports before it forks anything: the programs the tests start this way.
_PRELOAD = ["admin.cli", "ingest.__main__"]
_context: ForkServerContext | None = None


def _forkserver() -> ForkServerContext:
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        _context = ctx
    return _context


def _redirect(env: dict[str, str], cwd: str, out: str, err: str, mode: str) -> None:
    """In the forked process: exactly the caller's environment and directory, and its output
    (Python's and the C libraries') to the given files."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.stdout = open(out, mode, encoding="utf-8", buffering=1)  # noqa: SIM115 - ends with us
    sys.stderr = sys.stdout if err == out else open(  # noqa: SIM115
        err, mode, encoding="utf-8", buffering=1)
    os.dup2(sys.stdout.fileno(), 1)
    os.dup2(sys.stderr.fileno(), 2)


def _sds_child(args: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    _redirect(env, cwd, out, err, "w")
    from admin.cli import main

    main(args=args, prog_name="sds")  # exits (click's standalone mode)


def _main_child(module: str, argv: list[str], env: dict[str, str], cwd: str, log: str) -> None:
    _redirect(env, cwd, log, log, "a")
    sys.argv = [module, *argv]
    sys.exit(importlib.import_module(f"{module}.__main__").main(argv))


class WarmProcess:
    """A forked process with the part of subprocess.Popen's interface that testbed.process's
    stop_process and kill_process use (pid, poll, wait, send_signal, kill)."""

    def __init__(self, proc: ForkServerProcess) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self.returncode = self._proc.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start_main(module: str, env: dict[str, str], cwd: Path, log: Path,
               argv: tuple[str, ...] = ()) -> WarmProcess:
    """`python -m MODULE ARGV` (its `__main__.main(argv)`) with exactly `env`, stdout and
    stderr appended to `log`; MODULE must be in _PRELOAD to start warm."""
    return _start(_main_child, (module, list(argv), dict(env), str(cwd), str(log)))


def _start(target: object, args: tuple[object, ...]) -> WarmProcess:
    proc = _forkserver().Process(target=target, args=args)
    proc.start()
    return WarmProcess(proc)


def run_sds(env: dict[str, str], *args: str, cwd: Path, timeout: float = 600
            ) -> subprocess.CompletedProcess[str]:
    """`sds ARGS` with exactly `env` in a forked process; its exit status (negative for a
    signal), stdout and stderr, like `subprocess.run(..., text=True)`."""
    with tempfile.TemporaryDirectory(prefix="sds-") as tmp:
        out, err = str(Path(tmp) / "out"), str(Path(tmp) / "err")
        proc = _start(_sds_child, (list(args), dict(env), str(cwd), out, err))
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise
        return subprocess.CompletedProcess(
            ["sds", *args], code,
            Path(out).read_text(errors="replace") if Path(out).exists() else "",
            Path(err).read_text(errors="replace") if Path(err).exists() else "")
