"""The pure parts of shared/backup.py: the pgBackRest configuration from the settings, the
parsing of `pgbackrest info` and `verify`, and the archiver's failing flag and lag."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared import backup
from shared.config import Settings

NODE = backup.PgNode("/srv/pg/data", 55432, "/srv/pg/run")


def _conf(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line
                and not line.startswith("#"))


def test_default_is_a_posix_repository_under_the_base_dir() -> None:
    text = backup.render_config(Settings(), [NODE], base_dir="/srv/.state/pgbackrest")
    conf = _conf(text)
    assert conf["repo1-type"] == "posix"
    assert conf["repo1-path"] == "/srv/.state/pgbackrest/repo"
    assert conf["lock-path"] == "/srv/.state/pgbackrest/lock"
    assert conf["repo1-retention-full"] == "2" and conf["repo1-retention-diff"] == "6"
    assert (conf["pg1-path"], conf["pg1-port"], conf["pg1-socket-path"]) == (
        "/srv/pg/data", "55432", "/srv/pg/run")
    assert "[sds]" in text.splitlines()


def test_every_node_is_listed_for_patroni() -> None:
    nodes = [backup.PgNode(f"/srv/pg{k}/data", 5500 + k, f"/srv/pg{k}/run") for k in (1, 2, 3)]
    conf = _conf(backup.render_config(Settings(), nodes, base_dir="/b"))
    assert [conf[f"pg{k}-port"] for k in (1, 2, 3)] == ["5501", "5502", "5503"]
    assert conf["pg3-path"] == "/srv/pg3/data"


def test_second_disk_path() -> None:
    s = Settings(backup_repo_path="/mnt/backup/sds", backup_retention_full=4)
    conf = _conf(backup.render_config(s, [NODE], base_dir="/b"))
    assert conf["repo1-path"] == "/mnt/backup/sds" and conf["repo1-retention-full"] == "4"


def test_s3_options() -> None:
    s = Settings(backup_repo_type="s3", backup_s3_endpoint="127.0.0.1:9000",
                 backup_s3_bucket="sds-backups", backup_s3_region="eu-central-1",
                 backup_s3_key="AK", backup_s3_secret="SK", backup_s3_uri_style="path",
                 backup_s3_verify_tls=False)
    conf = _conf(backup.render_config(s, [NODE], base_dir="/b"))
    assert conf["repo1-type"] == "s3" and conf["repo1-path"] == "/sds"
    assert (conf["repo1-s3-endpoint"], conf["repo1-storage-port"]) == ("127.0.0.1", "9000")
    assert conf["repo1-s3-bucket"] == "sds-backups" and conf["repo1-s3-uri-style"] == "path"
    assert conf["repo1-s3-key"] == "AK" and conf["repo1-s3-key-secret"] == "SK"
    assert conf["repo1-storage-verify-tls"] == "n"


def test_s3_names_what_is_missing() -> None:
    with pytest.raises(backup.BackupError, match="SDS_BACKUP_S3_BUCKET.*SDS_BACKUP_S3_KEY"):
        backup.render_config(Settings(backup_repo_type="s3", backup_s3_endpoint="e"), [NODE],
                             base_dir="/b")


def test_sftp_options_and_bad_type() -> None:
    s = Settings(backup_repo_type="sftp", backup_sftp_host="backup.example:2222",
                 backup_sftp_key_file="/var/lib/postgresql/.ssh/id_ed25519")
    conf = _conf(backup.render_config(s, [NODE], base_dir="/b"))
    assert (conf["repo1-sftp-host"], conf["repo1-sftp-host-port"]) == ("backup.example", "2222")
    with pytest.raises(backup.BackupError, match="SDS_BACKUP_REPO_TYPE"):
        backup.render_config(Settings(backup_repo_type="nfs"), [NODE], base_dir="/b")


def test_a_line_break_cannot_inject_an_option() -> None:
    with pytest.raises(backup.BackupError, match="line break"):
        backup.render_config(Settings(backup_repo_path="/x\nrepo1-type=s3"), [NODE],
                             base_dir="/b")


def test_archive_command_names_the_config() -> None:
    got = backup.archive_settings("/s/pgbackrest.conf", Settings(backup_archive_timeout=30))
    assert got["archive_command"] == (
        "pgbackrest --config=/s/pgbackrest.conf --stanza=sds archive-push %p")
    assert got["archive_mode"] == "on" and got["archive_timeout"] == "30"


INFO = [{"name": "sds", "status": {"code": 0, "message": "ok"},
         "archive": [{"id": "15-1", "min": "000000010000000000000001",
                      "max": "000000010000000000000009"}],
         "backup": [
             {"label": "20260101-010000F", "type": "full", "error": False,
              "timestamp": {"start": 1767229200, "stop": 1767229260}},
             {"label": "20260101-010000F_20260102-010000D", "type": "diff", "error": True,
              "timestamp": {"start": 1767315600, "stop": 1767315630}},
             {"label": "20260101-010000F_20260103-010000D", "type": "diff", "error": False,
              "timestamp": {"start": 1767402000, "stop": 1767402030}}]}]


def test_parse_info() -> None:
    repo = backup.parse_info(json.dumps(INFO))
    assert repo.status == "ok" and len(repo.backups) == 3
    assert repo.wal_max == "000000010000000000000009"
    assert repo.newest().label == "20260101-010000F_20260103-010000D"
    assert repo.newest("full").label == "20260101-010000F"
    last = backup.last_success(repo)
    assert last["diff"] == datetime.fromtimestamp(1767402030, UTC)
    assert "incr" not in last
    assert backup.parse_info("[]").backups == ()


VERIFY = """stanza: sds
status: error
  backup: 20260101-010000F, status: valid, total files checked: 964, total valid files: 964
  backup: 20260101-010000F_20260103-010000D, status: invalid, total files checked: 966
    checksum invalid: 1
"""


def test_parse_verify_names_invalid_backups() -> None:
    labels = [b["label"] for b in INFO[0]["backup"]]
    assert backup.parse_verify(VERIFY, labels) == ("20260101-010000F_20260103-010000D",)


def _arch(**kw: object) -> backup.Archiver:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    base = dict(archived_count=5, last_archived_wal="000000010000000000000005",
                last_archived_time=now - timedelta(seconds=40), failed_count=0,
                last_failed_wal=None, last_failed_time=None, now=now,
                current_wal="000000010000000000000006")
    base.update(kw)
    return backup.Archiver(**base)  # type: ignore[arg-type]


def test_archiver_failing_and_lag() -> None:
    a = _arch()
    assert not a.failing and a.lag_seconds == 40.0
    # Nothing written since the last segment was archived: nothing waits.
    assert _arch(current_wal="000000010000000000000005").lag_seconds == 0.0
    # A later timeline names the same segment: still compared by segment.
    assert _arch(current_wal="000000020000000000000005").lag_seconds == 0.0
    # A .backup label names a segment still being written.
    assert _arch(last_archived_wal="000000010000000000000006.00000028.backup").lag_seconds == 40
    failed = _arch(failed_count=3, last_failed_time=a.now - timedelta(seconds=5))
    assert failed.failing
    assert not _arch(failed_count=3, last_failed_time=a.now - timedelta(seconds=90)).failing
    never = _arch(last_archived_wal=None, last_archived_time=None,
                  last_failed_time=a.now - timedelta(seconds=7), failed_count=1)
    assert never.failing and never.lag_seconds == 7.0


def test_choose_backup_skips_invalid_and_respects_the_target() -> None:
    repo = backup.parse_info(json.dumps(INFO))
    full, _bad, good = repo.backups
    chosen, skipped = backup.choose_backup(repo, [], None)
    assert chosen == good and skipped == []
    chosen, skipped = backup.choose_backup(repo, [good.label], None)
    # The diff before it was taken with errors: both are passed over, loudly.
    assert chosen == full and [b.label for b in skipped] == [good.label, _bad.label]
    chosen, _ = backup.choose_backup(repo, [], good.start)
    assert chosen == full
    with pytest.raises(backup.BackupError, match="no backup finished before"):
        backup.choose_backup(repo, [], full.start)
    with pytest.raises(backup.BackupError, match="failed verification"):
        backup.choose_backup(repo, [full.label, good.label], None)


def test_restore_times_are_utc() -> None:
    from admin.backup import parse_time, recovery_target

    # The recovery target is written with +00: the clock time must be UTC's.
    assert recovery_target(parse_time("2026-03-01T04:15:00+02:00")) == (
        "2026-03-01 02:15:00.000000+00")
    assert parse_time("2026-03-01T04:15:00+02:00").utcoffset() == timedelta(0)
    assert parse_time("2026-03-01T02:15:00Z") == datetime(2026, 3, 1, 2, 15, tzinfo=UTC)
    assert parse_time("2026-03-01 02:15") == datetime(2026, 3, 1, 2, 15, tzinfo=UTC)
    with pytest.raises(Exception, match="ISO 8601"):
        parse_time("yesterday")


def test_the_stream_sits_beside_a_plain_posix_repository_only() -> None:
    moved = Settings().replace(backup_repo_path="/mnt/disk2/sds")
    text = backup.render_config(moved, [NODE], base_dir="/srv/.state/pgbackrest")
    assert backup.walstream_dir(text, "/srv/.state/pgbackrest") == "/mnt/disk2/sds/walstream"
    embedded = backup.render_config(Settings(), [NODE], base_dir="/b")
    assert backup.walstream_dir(embedded, "/b") == "/b/repo/walstream"
    # Encrypted or S3: the stream (not encrypted, not uploaded) stays on this machine.
    secret = moved.replace(backup_cipher_pass="pass")
    text = backup.render_config(secret, [NODE], base_dir="/b")
    assert backup.walstream_dir(text, "/b") == "/b/walstream"
    s3 = Settings().replace(backup_repo_type="s3", backup_s3_endpoint="h:9000",
                            backup_s3_bucket="b", backup_s3_key="k", backup_s3_secret="s")
    assert backup.walstream_dir(backup.render_config(s3, [NODE], base_dir="/b"), "/b") == \
        "/b/walstream"


def _restore(command: str, segment: str, into: str) -> int:
    """PostgreSQL's restore_command as the server runs it (sh -c, %f and %p replaced)."""
    line = command.replace("%f", segment).replace("%p", into)
    return subprocess.run(["sh", "-c", line], capture_output=True, check=False).returncode


@pytest.mark.usefixtures("processes")
def test_restore_command_falls_back_to_the_stream(tmp_path: Path) -> None:
    stream = tmp_path / "walstream"
    stream.mkdir()
    (stream / "000000010000000000000002").write_bytes(b"whole")
    (stream / "000000010000000000000003.partial").write_bytes(b"partial")
    # No repository at this configuration: archive-get fails, the stream answers.
    cmd = backup.restore_command(str(tmp_path / "missing.conf"), str(stream))
    out = tmp_path / "RECOVERYXLOG"
    assert _restore(cmd, "000000010000000000000002", str(out)) == 0
    assert out.read_bytes() == b"whole"
    assert _restore(cmd, "000000010000000000000003", str(out)) == 0
    assert out.read_bytes() == b"partial"
    # A segment nobody has: recovery ends there.
    assert _restore(cmd, "000000010000000000000004", str(tmp_path / "x")) != 0
    assert not (tmp_path / "x").exists()
    assert backup.restore_command("/c", None) == \
        'pgbackrest --config=/c --stanza=sds archive-get %f "%p"'
