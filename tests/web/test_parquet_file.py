"""The dashboard's Parquet writer alone (serve/web/static/js/parquet.js, no server, no
browser): Node runs the module with the vendored hyparquet-writer exactly as the page loads
it, and pyarrow reads the file back: types, row groups per page, nulls, the wall clock of
local times on both sides of a DST change, an empty export, and a bad time refused."""

from __future__ import annotations

import json
import shutil
import subprocess  # nosec B404: runs node on a script written here
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

STATIC = Path(__file__).resolve().parents[2] / "serve" / "web" / "static"

# Two pages as the API sends them (JSON rows), around the 2024-11-03 change in New York.
PAGES = [
    [{"time": "2024-11-03T05:00:00Z", "device": "Süd-1", "tair": 1.5, "rh": None,
      "local_time": "2024-11-03T01:00:00-0400"},
     {"time": "2024-11-03T06:00:00Z", "device": "Süd-1", "tair": None, "rh": 0.25,
      "local_time": "2024-11-03T01:00:00-0500"}],
    [],  # an empty page writes no row group
    [{"time": "2024-11-03T07:00:00.250Z", "device": "Süd-1", "tair": -0.0, "rh": 1e-300,
      "local_time": "2024-11-03T02:00:00.250-0500"}],
]

SCRIPT = """
import {ParquetFile, wallClock} from "./js/parquet.js";
import {writeFileSync} from "fs";
const [pages, out] = JSON.parse(process.argv[2]);
const file = new ParquetFile(["tair", "rh"], true, {"sds.units": "C,pct", "sds.empty": null});
for (const rows of pages) file.add(rows);
const blob = file.finish();
writeFileSync(out, Buffer.from(await blob.arrayBuffer()));
let refused = "";
try { wallClock("yesterday"); } catch (e) { refused = e.message; }
const empty = new ParquetFile(["tair"], false, {});
writeFileSync(out + ".empty", Buffer.from(await empty.finish().arrayBuffer()));
console.log(JSON.stringify({rows: file.rows, bytes: blob.size, type: blob.type, refused}));
"""


def run(tmp_path: Path) -> dict[str, object]:
    """Runs SCRIPT beside a copy of static/ (js/ and vendor/, as served) as an ES module."""
    assert (STATIC / "vendor" / "hyparquet-writer" / "index.js").is_file(), \
        "run deploy/setup.sh (deploy/lib/web_assets.sh vendors hyparquet-writer)"
    node = shutil.which("node")
    assert node, "node is installed by deploy/setup.sh"
    for part in ("js", "vendor"):
        shutil.copytree(STATIC / part, tmp_path / part)
    # Node takes .js files as ES modules only under a package.json that says so.
    (tmp_path / "package.json").write_text('{"type": "module"}')
    (tmp_path / "run.js").write_text(SCRIPT)
    done = subprocess.run(  # nosec B603: fixed arguments
        [node, "run.js", json.dumps([PAGES, str(tmp_path / "out.parquet")])],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    return dict(json.loads(done.stdout))


@pytest.mark.usefixtures("processes")
def test_pages_become_typed_row_groups(tmp_path: Path) -> None:
    told = run(tmp_path)
    assert told["rows"] == 3 and told["type"] == "application/vnd.apache.parquet"
    assert told["refused"] == "not a local time: yesterday"
    saved = pq.ParquetFile(tmp_path / "out.parquet")
    assert saved.metadata.num_row_groups == 2  # one per non-empty page
    assert (tmp_path / "out.parquet").stat().st_size == told["bytes"]
    table = saved.read()
    assert table.schema == pa.schema([
        pa.field("time", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("device", pa.string(), nullable=False),
        pa.field("tair", pa.float64()), pa.field("rh", pa.float64()),
        pa.field("local_time", pa.timestamp("ms"), nullable=False)])
    assert table.schema.metadata == {b"sds.units": b"C,pct"}  # empty values left out
    rows = table.to_pylist()
    assert [r["time"] for r in rows] == [
        datetime(2024, 11, 3, 5, tzinfo=UTC), datetime(2024, 11, 3, 6, tzinfo=UTC),
        datetime(2024, 11, 3, 7, 0, 0, 250000, tzinfo=UTC)]
    # The wall clock as the API wrote it: 01:00 twice (EDT, then EST), then 02:00.250.
    assert [r["local_time"] for r in rows] == [
        datetime(2024, 11, 3, 1), datetime(2024, 11, 3, 1), datetime(2024, 11, 3, 2, 0, 0, 250000)]
    assert [(r["tair"], r["rh"]) for r in rows] == [(1.5, None), (None, 0.25), (-0.0, 1e-300)]
    assert {r["device"] for r in rows} == {"Süd-1"}


@pytest.mark.usefixtures("processes")
def test_an_empty_export_is_a_valid_file(tmp_path: Path) -> None:
    run(tmp_path)
    table = pq.read_table(tmp_path / "out.parquet.empty")
    assert table.num_rows == 0 and table.column_names == ["time", "device", "tair"]
    assert table.schema.field("tair").type == pa.float64()
