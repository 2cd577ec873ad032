"""The cold tier's store (shared/coldstore.py) without a server: which store SDS_COLD_PATH
names, where a directory tier's backup copies go for each kind of backup repository, a write
that leaves its backup copy, `restore_from_backup` bringing back only what the store lacks,
and an S3 store's description naming the endpoint and never the secret."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from shared import backup, coldfiles, coldstore
from shared.config import Settings


def _config(tmp_path: Path, **changes: str) -> Settings:
    node = backup.PgNode(data_dir=str(tmp_path / "data"), port=5432, socket_dir="/tmp")
    settings = Settings(**changes)
    tmp_path.mkdir(parents=True, exist_ok=True)
    conf = tmp_path / "pgbackrest.conf"
    conf.write_text(backup.render_config(settings, [node], base_dir=str(tmp_path / "bk")))
    return settings.replace(backup_config=str(conf))


def test_backup_copies_go_beside_a_plain_posix_repository_only(tmp_path: Path) -> None:
    assert coldstore.backup_copy_dir(Settings()) is None  # no backups configured
    plain = _config(tmp_path / "p")
    assert coldstore.backup_copy_dir(plain) == f"{tmp_path / 'p' / 'bk'}/repo/cold"
    second_disk = _config(tmp_path / "d", backup_repo_path="/mnt/backup/sds")
    assert coldstore.backup_copy_dir(second_disk) == "/mnt/backup/sds/cold"
    ciphered = _config(tmp_path / "c", backup_cipher_pass="x" * 32)
    assert coldstore.backup_copy_dir(ciphered) is None  # would leave unencrypted
    s3 = _config(tmp_path / "s", backup_repo_type="s3", backup_s3_bucket="b",
                 backup_s3_endpoint="s3.example", backup_s3_key="k", backup_s3_secret="s")
    assert coldstore.backup_copy_dir(s3) is None
    # An S3 cold tier is its own durable copy: no backup copy whatever the repository.
    assert coldstore.options_from_settings(plain.replace(cold_path="s3://b/p")).backup_dir is None
    assert coldstore.options_from_settings(plain).backup_dir is not None


def _table() -> pa.Table:
    """Three readings of D1 (time, device, location, then every value 1.5)."""
    rest = [1.5] * (len(coldfiles.NAMES) - 3)
    return coldfiles.table_from_rows(
        [(datetime(2024, 7, 1, h, tzinfo=UTC), "D1", None, *rest) for h in range(3)])


def test_a_write_leaves_a_backup_copy_and_restore_brings_back_what_is_missing(
        tmp_path: Path) -> None:
    store = coldstore.open_store(str(tmp_path / "cold"), coldstore.StoreOptions(
        backup_dir=str(tmp_path / "copies")))
    steps: list[str] = []
    size = store.write("org=x/2024-07-1.parquet", _table(), steps.append)
    store.write("org=x/2024-07-2.parquet", _table())
    assert steps == ["written", "renamed"]
    copy = tmp_path / "copies" / "org=x" / "2024-07-1.parquet"
    assert copy.read_bytes() == (tmp_path / "cold" / "org=x" / "2024-07-1.parquet").read_bytes()
    assert store.size("org=x/2024-07-1.parquet") == size
    store.delete("org=x/2024-07-1.parquet")
    assert copy.exists() and not store.exists("org=x/2024-07-1.parquet")
    assert store.restore_from_backup() == ["org=x/2024-07-1.parquet"]
    assert store.files() == ["org=x/2024-07-1.parquet", "org=x/2024-07-2.parquet"]
    assert store.read("org=x/2024-07-1.parquet").num_rows == 3
    assert store.restore_from_backup() == []
    assert "backup copies in" in store.describe()


def test_the_path_names_the_store_and_s3_describes_itself_without_secrets() -> None:
    assert type(coldstore.open_store(".state/cold")) is coldstore.ColdStore
    assert coldstore.open_store(".state/cold").describe() == ".state/cold"
    options = coldstore.StoreOptions(s3=coldstore.S3Options(
        endpoint="http://127.0.0.1:9", region="eu-west-3", key="AKIAEXAMPLE",
        secret="very-secret-value"))
    store = coldstore.open_store("s3://bucket/tier/", options)
    assert isinstance(store, coldstore.S3ColdStore)
    assert store.location("org=x/2024-07-1.parquet") == "bucket/tier/org=x/2024-07-1.parquet"
    assert store.describe() == "s3://bucket/tier (S3 at http://127.0.0.1:9, region eu-west-3)"
    assert "very-secret-value" not in repr(store) + repr(options)
    assert coldstore.open_store("s3://bucket/tier/", options) is store  # one client per process


@pytest.mark.parametrize("path", ["s3://bucket/tier", ".state/cold"])
def test_configure_records_the_options_of_the_processes_path(path: str) -> None:
    settings = Settings(cold_path=path, cold_s3_endpoint="http://127.0.0.1:9",
                        cold_s3_key="k", cold_s3_secret="s")
    coldstore.configure(settings)
    store = coldstore.open_store(path)
    assert store.describe().startswith(path)
