"""Where the cold tier's files live (shared.coldfiles names them, aggregate.coldmove writes
them, serve.coldread reads them): one small interface over a filesystem, so the mover and the
reader never touch paths themselves. `SDS_COLD_PATH` names the store: a local directory
(default `.state/cold`: a second disk or a network mount), or `s3://bucket/prefix` for
S3-compatible object storage through pyarrow's S3 filesystem (endpoint, region and credentials
from the SDS_COLD_S3_* settings). docs/decisions.md "Cold tier" says why and how each is tested.

A local write is atomic and durable: the file is written beside its final name, fsynced,
renamed over it and its directory fsynced, so a crash leaves either no file or the whole one.
An S3 write is one PUT (or a multipart upload): the object appears whole when it completes or
not at all, so it needs no temporary name.

Backups (docs/operations.md "Backups and restore"): a local store copies each file it writes
into the backup repository's `cold/` directory (a plain posix repository; `backup_copy_dir`)
before the write returns, so no moment exists at which the catalogue names a file the backup
lacks; deleting a file leaves its backup copy, which a point-in-time restore may need.
`restore_from_backup` brings the copies back. An S3 store is its own durable copy.

Each process calls `configure(settings)` once at its start (the API's app factory, `sds`,
the scheduler); `open_store(cold_path)` then finds the options of that path.
"""

from __future__ import annotations

import configparser
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from shared import backup, coldfiles
from shared.config import Settings

Checkpoint = Callable[[str], None]  # the mover's failpoint, called after each step
S3_SCHEME = "s3://"


@dataclass(frozen=True, slots=True)
class S3Options:
    """How to reach an S3-compatible store (SDS_COLD_S3_*); the secret never shows in repr."""

    endpoint: str | None = None  # scheme://host[:port]; None: AWS's endpoint for the region
    region: str = "us-east-1"
    key: str | None = None  # None: the AWS SDK's default chain (environment, instance role)
    secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """What `open_store` needs beside the path: S3 access, and where a local store keeps the
    backup copy of each file (None: no copy)."""

    s3: S3Options = S3Options()
    backup_dir: str | None = None


_configured: dict[str, StoreOptions] = {}
_opened: dict[tuple[str, StoreOptions], ColdStore] = {}
_guard = threading.Lock()


def backup_copy_dir(settings: Settings) -> str | None:
    """Where a local cold tier's backup copies go: `<repository>/cold` beside a plain posix
    backup repository (like the WAL stream, it survives the machine when the repository is on
    a second disk or host). None without backups, or with an S3 or encrypted repository, which
    the files are neither uploaded to nor encrypted for (docs/operations.md)."""
    if not settings.backup_config:
        return None
    try:
        parser = backup.read_config(settings.backup_config)
    except (OSError, configparser.Error, backup.BackupError):
        return None
    glob = parser["global"] if parser.has_section("global") else {}
    if glob.get("repo1-type") != "posix" or glob.get("repo1-cipher-type") or \
            not glob.get("repo1-path"):
        return None
    return f"{glob['repo1-path']}/cold"


def options_from_settings(settings: Settings) -> StoreOptions:
    """The store options the settings give SDS_COLD_PATH."""
    s3 = S3Options(endpoint=settings.cold_s3_endpoint, region=settings.cold_s3_region,
                   key=settings.cold_s3_key, secret=settings.cold_s3_secret)
    local = not settings.cold_path.startswith(S3_SCHEME)
    return StoreOptions(s3=s3, backup_dir=backup_copy_dir(settings) if local else None)


def configure(settings: Settings) -> None:
    """Record this process's options for SDS_COLD_PATH (called once at a process's start)."""
    with _guard:
        _configured[settings.cold_path] = options_from_settings(settings)


class ColdStore:
    """The cold tier's files in a local directory, addressed by paths relative to it."""

    def __init__(self, root: Path, backup_dir: str | None = None) -> None:
        self.root = root
        self.filesystem: pafs.FileSystem = pafs.LocalFileSystem()
        self.backup_dir = Path(backup_dir) if backup_dir else None

    def __repr__(self) -> str:
        return f"ColdStore({str(self.root)!r})"

    def describe(self) -> str:
        """Where the files are, for `sds cold status` and logs."""
        if self.backup_dir is None:
            return str(self.root)
        return f"{self.root} (backup copies in {self.backup_dir})"

    def location(self, rel: str) -> str:
        """A file's full path in the store's filesystem."""
        return str(self.root / rel)

    def write(self, rel: str, table: pa.Table, checkpoint: Checkpoint = lambda _s: None) -> int:
        """Write `table` as the file `rel` (zstd Parquet), atomically and durably; its size.
        Calls checkpoint("written") once the bytes are durable under a temporary name and
        checkpoint("renamed") once they are durable under `rel` (and in the backup copy)."""
        final = self.root / rel
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(final.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd", row_group_size=coldfiles.ROW_GROUP_ROWS)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        checkpoint("written")
        if self.backup_dir is not None:
            # Before the file can be named live: a restore to any later moment finds it.
            _install(tmp, self.backup_dir / rel)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
        checkpoint("renamed")
        return final.stat().st_size

    def read(self, rel: str) -> pa.Table:
        """The whole file `rel`, in the cold tier's schema."""
        return pq.read_table(self.location(rel), schema=coldfiles.SCHEMA,
                             filesystem=self.filesystem)

    def dataset(self, rels: Iterable[str]) -> ds.Dataset:
        """The files `rels` as one Arrow dataset (filters are pushed down to row groups)."""
        return ds.dataset([self.location(r) for r in rels], schema=coldfiles.SCHEMA,
                          format="parquet", filesystem=self.filesystem)

    def delete(self, rel: str) -> None:
        """Remove `rel` and any temporary left beside it by an interrupted write (missing ok).
        Its backup copy stays: a restore to a moment before the delete needs it."""
        for leftover in (self.root / rel, self.root / f"{rel}.tmp"):
            leftover.unlink(missing_ok=True)

    def exists(self, rel: str) -> bool:
        """Whether the file `rel` is there."""
        return (self.root / rel).is_file()

    def size(self, rel: str) -> int | None:
        """The file's size in bytes, None when it is not there."""
        info = self.filesystem.get_file_info(self.location(rel))
        return info.size if info.type == pafs.FileType.File else None

    def files(self) -> list[str]:
        """Every finished file in the store, relative to its root, sorted."""
        return _listing(self.filesystem, str(self.root))

    def restore_from_backup(self) -> list[str]:
        """Copy back every backup copy the store lacks (after a restore, or onto a new machine);
        the files brought back. Files already there are left as they are."""
        if self.backup_dir is None or not self.backup_dir.is_dir():
            return []
        brought = []
        for rel in _listing(self.filesystem, str(self.backup_dir)):
            if not self.exists(rel):
                _install(self.backup_dir / rel, self.root / rel)
                brought.append(rel)
        return brought


class S3ColdStore(ColdStore):
    """The cold tier's files as objects under `bucket/prefix` of an S3-compatible store."""

    def __init__(self, url: str, options: S3Options) -> None:
        super().__init__(Path("/"))
        self.prefix = url[len(S3_SCHEME):].strip("/")
        self.options = options
        kwargs: dict[str, object] = {"region": options.region, "connect_timeout": 10.0,
                                     "request_timeout": 60.0}
        if options.endpoint:
            parts = urlsplit(options.endpoint if "://" in options.endpoint
                             else f"https://{options.endpoint}")
            kwargs.update(endpoint_override=parts.netloc, scheme=parts.scheme or "https")
        if options.key:
            kwargs.update(access_key=options.key, secret_key=options.secret or "")
        self.filesystem = pafs.S3FileSystem(**kwargs)

    def __repr__(self) -> str:
        return f"S3ColdStore({self.describe()!r})"

    def describe(self) -> str:
        """The bucket and prefix, the endpoint and region (never the credentials)."""
        where = self.options.endpoint or "AWS"
        return f"{S3_SCHEME}{self.prefix} (S3 at {where}, region {self.options.region})"

    def location(self, rel: str) -> str:
        """The object's `bucket/key` in the store's filesystem."""
        return f"{self.prefix}/{rel}"

    def write(self, rel: str, table: pa.Table, checkpoint: Checkpoint = lambda _s: None) -> int:
        """Write `table` as the object `rel` (zstd Parquet); its size. S3 makes an object
        visible only once its upload completed, so a reader never sees part of one; the
        checkpoints keep the mover's steps: "written" once the upload completed, "renamed"
        once the store lists it under its name."""
        path = self.location(rel)
        pq.write_table(table, path, filesystem=self.filesystem, compression="zstd",
                       row_group_size=coldfiles.ROW_GROUP_ROWS)
        checkpoint("written")
        size = self.size(rel)
        if size is None:
            raise OSError(f"cold file {S3_SCHEME}{path} is not in the store after its upload")
        checkpoint("renamed")
        return size

    def delete(self, rel: str) -> None:
        """Remove the object `rel` (missing ok); a versioned bucket keeps its older version."""
        try:
            self.filesystem.delete_file(self.location(rel))
        except FileNotFoundError:
            pass

    def exists(self, rel: str) -> bool:
        """Whether the object `rel` is there."""
        return self.size(rel) is not None

    def restore_from_backup(self) -> list[str]:
        """Nothing: an S3 store is its own durable copy (docs/operations.md)."""
        return []


def _listing(filesystem: pafs.FileSystem, root: str) -> list[str]:
    found = filesystem.get_file_info(pafs.FileSelector(root, recursive=True,
                                                       allow_not_found=True))
    return sorted(i.path[len(root.rstrip("/")) + 1:] for i in found
                  if i.type == pafs.FileType.File and i.path.endswith(".parquet"))


def _install(src: Path, dst: Path) -> None:
    """Copy `src` to `dst` atomically and durably (beside it, fsync, rename, fsync the dir)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, dst)
    _fsync_dir(dst.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_store(cold_path: str, options: StoreOptions | None = None) -> ColdStore:
    """The store `SDS_COLD_PATH` names: a directory, or `s3://bucket/prefix`. `options`
    default to those `configure` recorded for this path (none: plain, no backup copy). An
    S3 store is made once per process and options (its client is reused across pages)."""
    if options is None:
        with _guard:
            options = _configured.get(cold_path, StoreOptions())
    if not cold_path.startswith(S3_SCHEME):
        return ColdStore(Path(cold_path), options.backup_dir)
    with _guard:
        store = _opened.get((cold_path, options))
        if store is None:
            store = _opened[(cold_path, options)] = S3ColdStore(cold_path, options.s3)
        return store
