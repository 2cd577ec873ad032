"""House style holds across the tree: ruff with the rules in pyproject.toml (B, E, F, I, UP, W)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is part of the test extra (deploy/setup.sh installs it)"
    run = subprocess.run([ruff, "check", "--output-format", "concise", "shared", "ingest",
                          "aggregate", "serve", "bench", "tests", "client"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
