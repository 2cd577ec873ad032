"""Where the cold tier's files live (shared.coldfiles names them, aggregate.coldmove writes
them, serve.coldread reads them): one small interface over a filesystem, so the mover and the
reader never touch paths themselves. Today a local directory (`SDS_COLD_PATH`, default
`.state/cold`: a second disk or a network mount); other backends plug in behind `open_store`.

A local write is atomic and durable: the file is written beside its final name, fsynced,
renamed over it and its directory fsynced, so a crash leaves either no file or the whole one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from shared import coldfiles

Checkpoint = Callable[[str], None]  # the mover's failpoint, called after each step


class ColdStore:
    """The cold tier's files under one root, addressed by paths relative to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filesystem: pafs.FileSystem = pafs.LocalFileSystem()

    def __repr__(self) -> str:
        return f"ColdStore({str(self.root)!r})"

    def describe(self) -> str:
        """Where the files are, for `sds cold status` and logs."""
        return str(self.root)

    def location(self, rel: str) -> str:
        """A file's full path in the store's filesystem."""
        return str(self.root / rel)

    def write(self, rel: str, table: pa.Table, checkpoint: Checkpoint = lambda _s: None) -> int:
        """Write `table` as the file `rel` (zstd Parquet), atomically and durably; its size.
        Calls checkpoint("written") once the bytes are durable under a temporary name and
        checkpoint("renamed") once they are durable under `rel`."""
        final = self.root / rel
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(final.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd", row_group_size=coldfiles.ROW_GROUP_ROWS)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        checkpoint("written")
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
        """Remove `rel` and any temporary left beside it by an interrupted write (missing ok)."""
        for leftover in (self.root / rel, self.root / f"{rel}.tmp"):
            leftover.unlink(missing_ok=True)

    def exists(self, rel: str) -> bool:
        """Whether the file `rel` is there."""
        return (self.root / rel).is_file()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_store(cold_path: str) -> ColdStore:
    """The store `SDS_COLD_PATH` names (a directory)."""
    return ColdStore(Path(cold_path))
