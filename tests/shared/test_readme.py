"""The README stays true: its configuration table equals the settings, and it has exactly the
two set-up commands that .ci/run relies on."""

from __future__ import annotations

import re
from pathlib import Path

from shared.config import markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_configuration_table_matches_settings() -> None:
    m = re.search(r"<!-- config-table:start -->\n(.*?)\n<!-- config-table:end -->", README, re.S)
    assert m, "README lost its config-table markers"
    assert m.group(1) == markdown_table(), "run: sds config --markdown, paste into README"


def test_ci_runs_the_readme_test_command() -> None:
    assert "deploy/test.sh" in README and "deploy/run.sh" in README
    assert "deploy/test.sh" in (ROOT / ".ci" / "run").read_text()
