"""The repository cipher (issue 32; docs/operations.md "Where the repository lives"): with
SDS_BACKUP_CIPHER_PASS every file pgBackRest writes to the repository (backup files, manifests,
archived WAL) is encrypted; the repository reads back with the passphrase and not without."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from shared import backup
from shared.config import Settings
from testbed.pgbackrest import PgBackRestRepo
from testbed.postgres import PostgresServer
from tests.support.databases import migrate_database

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL and pgBackRest run as postgres"),
]

OPENSSL_SALTED = b"Salted__"  # pgBackRest's aes-256-cbc files begin like OpenSSL's


def test_repository_files_are_encrypted(tmp_path: Path) -> None:
    pg = PostgresServer().start(tmp_path / "pg", durable=True)
    try:
        url = migrate_database(pg.create_database("ingest"))
        repo = PgBackRestRepo(tmp_path / "pgbackrest").attach(pg, cipher_pass="correct horse")
        with psycopg.connect(url) as c:
            c.execute("CREATE TABLE secret_marker (v text)")
            c.execute("INSERT INTO secret_marker VALUES ('plain-marker-1234')")
        repo.backup("full")
        files = [p for p in (tmp_path / "pgbackrest" / "repo").rglob("*") if p.is_file()]
        manifests = [p for p in files if p.name == "backup.manifest"]
        wal = [p for p in files if "/archive/" in p.as_posix() and p.name.startswith("0000")]
        assert manifests and wal
        for path in manifests + wal:
            assert path.read_bytes().startswith(OPENSSL_SALTED), path
        assert not any(b"plain-marker-1234" in p.read_bytes() for p in files)
        assert backup.info(str(repo.config)).newest() is not None
        # Without the passphrase the repository does not open.
        text = repo.config.read_text()
        bare = tmp_path / "bare.conf"
        bare.write_text("\n".join(line for line in text.splitlines()
                                  if not line.startswith("repo1-cipher")) + "\n")
        bare.chmod(0o644)
        try:
            opened = backup.info(str(bare)).backups
        except backup.BackupError:
            opened = ()
        assert not opened
    finally:
        pg.cleanup()


def test_cipher_rendered_only_when_set() -> None:
    node = backup.PgNode("/srv/pg/data", 55432, "/srv/pg/run")
    plain = backup.render_config(Settings(), [node], base_dir="/srv/b")
    assert "cipher" not in plain
    sealed = backup.render_config(Settings(backup_cipher_pass="pw"), [node], base_dir="/srv/b")
    assert "repo1-cipher-type=aes-256-cbc" in sealed and "repo1-cipher-pass=pw" in sealed
