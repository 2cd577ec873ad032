"""Device accounts in mosquitto's password file, the one home of the broker's logins: add or
replace (hashed by mosquitto_passwd, never on a command line), remove, and reload the broker
that reads the file (SIGHUP). Used by `sds device` (admin/devices.py) and by the API's device
writes (serve/api/devicewrites.py, the dashboard's fleet forms), so both give a device the
same kind of password in the same way."""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import signal
import subprocess  # nosec B404  runs mosquitto_passwd only
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.errors import Conflict, ServiceError


class BrokerAccountError(ServiceError):
    """The password file could not be written (mosquitto_passwd missing or failing)."""


class NoBrokerAccounts(Conflict):
    """This API server was not told where the broker's password file is."""


def new_password() -> str:
    """A device's broker password: 24 URL-safe characters (144 random bits)."""
    return secrets.token_urlsafe(18)


@contextmanager
def _locked(passwd_file: Path) -> Iterator[None]:
    """The password file's lock: each change reads, edits and rewrites the whole file, so two
    at once (two API workers, the CLI beside them) would lose one's line without it. A file
    this process may not write is a BrokerAccountError naming it (not a bare OSError)."""
    try:
        fd = os.open(passwd_file, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise BrokerAccountError(
            f"cannot write the broker's password file {passwd_file}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def set_mqtt_passwords(passwd_file: Path, passwords: dict[str, str]) -> None:
    """Add or replace broker users in a mosquitto password file.

    The passwords never appear on a command line (where `ps` shows them): they go into a
    private plain `user:password` file that `mosquitto_passwd -U` hashes in place, whose lines
    then replace the users' old lines in `passwd_file`.
    """
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        raise BrokerAccountError("mosquitto_passwd not found (install mosquitto)")
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "passwd"
        plain.touch(mode=0o600)
        plain.write_text("".join(f"{user}:{pw}\n" for user, pw in passwords.items()))
        try:
            subprocess.run([tool, "-U", str(plain)], check=True, capture_output=True)  # nosec B603  fixed argv, no secret in it
        except subprocess.CalledProcessError as exc:
            raise BrokerAccountError(f"mosquitto_passwd failed (exit {exc.returncode})") from None
        hashed = plain.read_text().splitlines()
    with _locked(passwd_file):  # creates a missing file with mode 600
        kept = [line for line in passwd_file.read_text().splitlines()
                if line.split(":", 1)[0] not in passwords]
        # Rewritten in place: owner and mode (the broker's, set by deploy/services.sh) stay.
        passwd_file.write_text("\n".join(kept + hashed) + "\n")


def has_mqtt_user(passwd_file: Path, user: str) -> bool:
    """Whether a mosquitto password file has a line for `user`."""
    return passwd_file.exists() and any(
        line.split(":", 1)[0] == user for line in passwd_file.read_text().splitlines())


def remove_mqtt_user(passwd_file: Path, user: str) -> bool:
    """Drop `user`'s line from a mosquitto password file; whether it was there."""
    if not passwd_file.exists():
        return False
    with _locked(passwd_file):
        lines = passwd_file.read_text().splitlines()
        kept = [line for line in lines if line.split(":", 1)[0] != user]
        if len(kept) == len(lines):
            return False
        passwd_file.write_text("".join(f"{line}\n" for line in kept))
    return True


def reload_broker(passwd_file: Path, pid_file: Path | None) -> str:
    """SIGHUP the mosquitto that uses `passwd_file`, so it rereads it; what was done, in words.

    The pid comes from `pid_file`, by default `mosquitto.pid` beside the password file (the
    layout of deploy/services.sh). The process must be a mosquitto: a stale pid file must not
    make us signal whatever reuses the number.
    """
    pid_path = pid_file or passwd_file.parent / "mosquitto.pid"
    try:
        pid = int(pid_path.read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return (f"broker not reloaded: no running broker found through {pid_path}; it reads "
                "the password file when it starts (or run deploy/services.sh reload-broker)")
    if comm != "mosquitto":
        return f"broker not reloaded: pid {pid} in {pid_path} is {comm!r}, not mosquitto"
    os.kill(pid, signal.SIGHUP)
    return f"broker reloaded (SIGHUP to mosquitto pid {pid})"


def reloaded(outcome: str) -> bool:
    """Whether reload_broker's words say the broker was signalled."""
    return outcome.startswith("broker reloaded")
