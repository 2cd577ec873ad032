"""Keep one long-running process of the service alive: start it, restart it with backoff when it
dies, and make every restart visible (docs/operations.md "Supervision", docs/decisions.md "Our
own supervisor").

    supervise.py --name NAME --state DIR [--user USER] [--stop-signal SIG] [--stop-timeout S]
                 [--unless FILE] -- COMMAND [ARGS...]

deploy/run.sh and deploy/services.sh start one of these per process (setsid, pid file, output
appended to the process's log) instead of the process itself. Standard library only: it runs
with Debian's python3 before the venv exists.

- The child runs in its own process group (as USER when given). When it dies unasked, what is
  left of its group (nginx or gunicorn workers) is killed, then it is started again after
  `restart_delay(failures)`: 0.5 s, doubling while it keeps dying within STABLE_AFTER seconds of
  its start, at most 30 s; a run that lasted STABLE_AFTER seconds resets the count. It never
  gives up: a process that cannot start keeps being retried every 30 s and says so.
- SIGTERM, SIGINT and SIGQUIT stop it: the signal goes on to the child (SIGTERM as
  --stop-signal, e.g. SIGINT for PostgreSQL's fast shutdown; SIGQUIT as itself, nginx's graceful
  stop), the child's group is SIGKILLed after --stop-timeout seconds, and this process exits.
  SIGHUP, SIGUSR1 and SIGUSR2 are passed on (reloads).
- If this supervisor itself is killed, the child gets --stop-signal (the parent-death signal): no
  unsupervised process is left for a rerun of run.sh to collide with. A child that changes its
  own user (mosquitto dropping root) loses that signal: `status` then shows it as running,
  not supervised, and `stop` stops it through its own pid file.
- --unless FILE: do not (re)start while FILE exists (a PostgreSQL retired by a promotion).
- Visible: DIR/NAME.status (one line for deploy/*.sh status), DIR/NAME.prom (Prometheus text
  format: restarts, up, last exit, start time) and a line per start and exit on stderr (the
  process's log) and in DIR/supervise.log.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import pwd
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

BASE_DELAY = 0.5  # first restart: soon, but not a busy loop if the exit repeats
MAX_DELAY = 30.0
STABLE_AFTER = 30.0  # a run this long counts as healthy: the next failure restarts at BASE_DELAY
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
PASSED_ON = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def restart_delay(failures: int, base: float = BASE_DELAY, cap: float = MAX_DELAY) -> float:
    """Seconds to wait before restart number `failures` (1 = the first after a healthy run)."""
    if failures < 1:
        raise ValueError("failures counts from 1")
    return min(cap, base * 2 ** min(failures - 1, 32))


def next_failures(failures: int, ran_for: float, stable_after: float = STABLE_AFTER) -> int:
    """The failure count after a child that ran `ran_for` seconds died: back to 1 after a
    healthy run, else one more."""
    return 1 if ran_for >= stable_after else failures + 1


def describe_exit(status: int) -> str:
    """A waitpid status in words: 'exit 1', 'killed by SIGKILL'."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def exit_code(status: int) -> int:
    """The exit code, or minus the signal number for a killed process (as subprocess does)."""
    return os.waitstatus_to_exitcode(status)


def prom_text(name: str, *, up: bool, restarts: int, last_exit: int | None,
              started_at: float) -> str:
    """NAME's metrics in the Prometheus text format (node_exporter's textfile collector reads
    DIR/*.prom)."""
    label = f'{{process="{name}"}}'
    lines = [
        "# HELP sds_supervised_up 1 while the supervised process runs, 0 while it is restarting.",
        "# TYPE sds_supervised_up gauge",
        f"sds_supervised_up{label} {int(up)}",
        "# HELP sds_supervised_restarts_total Restarts after the process died unasked.",
        "# TYPE sds_supervised_restarts_total counter",
        f"sds_supervised_restarts_total{label} {restarts}",
        "# HELP sds_supervised_start_time_seconds When the process was last started (Unix time).",
        "# TYPE sds_supervised_start_time_seconds gauge",
        f"sds_supervised_start_time_seconds{label} {started_at:.3f}",
    ]
    if last_exit is not None:
        lines += [
            "# HELP sds_supervised_last_exit_code Exit code of its last death; -N: signal N.",
            "# TYPE sds_supervised_last_exit_code gauge",
            f"sds_supervised_last_exit_code{label} {last_exit}",
        ]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class Supervisor:
    """One supervised child: run() starts it and keeps it running until a stop signal."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.name: str = args.name
        self.state = Path(args.state)
        self.argv: list[str] = args.command
        self.user: str | None = args.user
        self.stop_signal = signal.Signals[f"SIG{args.stop_signal.upper().removeprefix('SIG')}"]
        self.stop_timeout: float = args.stop_timeout
        self.unless: Path | None = Path(args.unless) if args.unless else None
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False  # set by a stop signal (a handler must not take locks)
        self.stop_deadline = 0.0
        self.restarts = 0
        self.failures = 0
        self.last_exit: int | None = None
        self.last_exit_text = ""
        self.started_at = 0.0

    # ---- visibility -------------------------------------------------------------------------
    def log(self, message: str) -> None:
        """A timestamped line on stderr (the process's log) and in DIR/supervise.log."""
        line = f"{_utc(time.time())} supervise[{self.name}]: {message}\n"
        sys.stderr.write(line)
        sys.stderr.flush()
        with open(self.state / "supervise.log", "a") as f:
            f.write(line)

    def publish(self, state: str, detail: str = "") -> None:
        """DIR/NAME.status: `state child_pid restarts supervisor_pid<TAB>words`, and NAME.prom."""
        child = self.child.pid if self.child and self.child.returncode is None else 0
        words = f"{self.restarts} restart{'s' * (self.restarts != 1)}"
        if self.last_exit_text:
            words += f", last exit: {self.last_exit_text}"
        if detail:
            words += f"; {detail}"
        _write(self.state / f"{self.name}.status",
               f"{state} {child} {self.restarts} {os.getpid()}\t{words}\n")
        _write(self.state / f"{self.name}.prom",
               prom_text(self.name, up=state == "running", restarts=self.restarts,
                         last_exit=self.last_exit, started_at=self.started_at))

    # ---- signals ----------------------------------------------------------------------------
    def on_signal(self, signum: int, _frame: object) -> None:
        """Stop signals end supervision and stop the child; the others are passed on."""
        child = self.child if self.child and self.child.returncode is None else None
        if signum in STOP_SIGNALS:
            if not self.stopping:
                self.stop_deadline = time.monotonic() + self.stop_timeout
                self.stopping = True
            if child:
                sig = self.stop_signal if signum == signal.SIGTERM else signum
                _kill(child.pid, sig)
        elif child:
            _kill(child.pid, signum)

    # ---- the loop ---------------------------------------------------------------------------
    def start_child(self) -> None:
        kwargs: dict[str, object] = {}
        if self.user:
            pw = pwd.getpwnam(self.user)
            kwargs = {"user": pw.pw_uid, "group": pw.pw_gid,
                      "extra_groups": os.getgrouplist(self.user, pw.pw_gid)}
        # Its own process group: what it leaves behind when it dies can be killed as a group.
        self.child = subprocess.Popen(self.argv, process_group=0,  # type: ignore[call-overload]
                                      preexec_fn=functools.partial(_die_with_parent,
                                                                   self.stop_signal), **kwargs)
        self.started_at = time.time()
        self.log(f"started pid {self.child.pid}: {' '.join(self.argv)}")
        self.publish("running")

    def wait_child(self) -> int:
        """Wait for the child to exit; past a stop's deadline, SIGKILL its group."""
        assert self.child is not None
        pidfd = os.pidfd_open(self.child.pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            while not poller.poll(500):
                if self.stopping and time.monotonic() > self.stop_deadline:
                    self.log(f"still running {self.stop_timeout:g} s after the stop signal: "
                             "SIGKILL")
                    _killpg(self.child.pid, signal.SIGKILL)
                    self.stop_deadline = float("inf")
        finally:
            os.close(pidfd)
        _pid, status = os.waitpid(self.child.pid, 0)
        self.child.returncode = exit_code(status)
        # Workers of a master that was killed (nginx, gunicorn) would hold its port.
        _killpg(self.child.pid, signal.SIGKILL)
        return status

    def pause(self, seconds: float) -> None:
        """Sleep up to `seconds`, less when a stop signal comes."""
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def run(self) -> int:
        """Supervise until stopped; the exit code is 0."""
        self.state.mkdir(parents=True, exist_ok=True)
        for sig in (*STOP_SIGNALS, *PASSED_ON):
            signal.signal(sig, self.on_signal)
        while not self.stopping:
            if self.unless and self.unless.exists():
                self.log(f"not starting: {self.unless} exists")
                self.publish("refused", f"{self.unless} exists")
                self.pause(MAX_DELAY)
                continue
            try:
                self.start_child()
            except OSError as e:
                self.log(f"could not start: {e}")
                status = 127 << 8
                ran_for = 0.0
            else:
                if self.stopping:  # the stop signal came while it was being started
                    _kill(self.child.pid, self.stop_signal)
                status = self.wait_child()
                ran_for = time.time() - self.started_at
            if self.stopping:
                self.log(f"stopped ({describe_exit(status)})")
                break
            self.last_exit = exit_code(status)
            self.last_exit_text = f"{describe_exit(status)} at {_utc(time.time())}"
            self.failures = next_failures(self.failures, ran_for)
            delay = restart_delay(self.failures)
            self.restarts += 1
            self.log(f"died after {ran_for:.1f} s ({describe_exit(status)}); restart "
                     f"{self.restarts} in {delay:g} s")
            self.publish("backoff", f"restart in {delay:g} s")
            self.pause(delay)
        self.publish("stopped")
        return 0


PR_SET_PDEATHSIG = 1


def _die_with_parent(sig: int) -> None:
    """In the child before exec: signal `sig` when the supervisor dies (Linux prctl)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and supervise."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--state", required=True, help="directory of the status and metrics files")
    p.add_argument("--user", help="run the command as this user (PostgreSQL refuses root)")
    p.add_argument("--stop-signal", default="TERM", help="what SIGTERM becomes for the child")
    p.add_argument("--stop-timeout", type=float, default=25.0)
    p.add_argument("--unless", help="do not (re)start while this file exists")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        p.error("no command to supervise")
    return Supervisor(args).run()


if __name__ == "__main__":
    sys.exit(main())
