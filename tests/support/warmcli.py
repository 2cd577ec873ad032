"""`sds ARGS` as a real process of its own, forked from an interpreter that has already imported
the CLI: a test that runs the command dozens of times (tests/aggregate/test_coldops.py, each
rewrite killed after every step) pays Python's start-up and the CLI's imports (pyarrow, pandas,
Flask: about 1 s each on an idle machine, 2-3 s on a loaded one) once instead of every time.

The command still runs in its own process, with its own environment, connections and exit
status: a failpoint's SIGKILL kills that process and nothing else, and the test sees
-SIGKILL as it would from `subprocess.run`. multiprocessing's forkserver does the forking: a
single-threaded server started once, so no fork happens inside the (threaded) test process.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_PRELOAD = ["admin.cli"]
_context: multiprocessing.context.ForkServerContext | None = None


def _forkserver() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        _context = ctx
    return _context


def _child(args: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """In the forked process: the caller's environment and directory, output to files, then
    `sds`."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.stdout = open(out, "w", encoding="utf-8")  # noqa: SIM115 - closed by the exit
    sys.stderr = open(err, "w", encoding="utf-8")  # noqa: SIM115
    os.dup2(sys.stdout.fileno(), 1)
    os.dup2(sys.stderr.fileno(), 2)
    from admin.cli import main

    main(args=args, prog_name="sds")  # exits (click's standalone mode)


def run_sds(env: dict[str, str], *args: str, cwd: Path, timeout: float = 600
            ) -> subprocess.CompletedProcess[str]:
    """`sds ARGS` with exactly `env` in a process forked from the warm server; its exit status
    (negative for a signal), stdout and stderr, like `subprocess.run(..., text=True)`."""
    with tempfile.TemporaryDirectory(prefix="sds-") as tmp:
        out, err = str(Path(tmp) / "out"), str(Path(tmp) / "err")
        proc = _forkserver().Process(target=_child,
                                     args=(list(args), dict(env), str(cwd), out, err))
        proc.start()
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
            raise subprocess.TimeoutExpired(["sds", *args], timeout)
        code = proc.exitcode
        assert code is not None
        return subprocess.CompletedProcess(
            ["sds", *args], code,
            Path(out).read_text(errors="replace") if Path(out).exists() else "",
            Path(err).read_text(errors="replace") if Path(err).exists() else "")
