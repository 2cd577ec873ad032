"""The README stays true and short: the settings table (docs/settings.md, linked from the
README) equals the settings, and the README leads with the two set-up commands that .ci/run
relies on, "Try it" and "Operating it", before any reference material."""

from __future__ import annotations

import re
from pathlib import Path

from shared.config import markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SETTINGS = (ROOT / "docs" / "settings.md").read_text()


def test_configuration_table_matches_settings() -> None:
    m = re.search(r"<!-- config-table:start -->\n(.*?)\n<!-- config-table:end -->", SETTINGS,
                  re.S)
    assert m, "docs/settings.md lost its config-table markers"
    assert m.group(1) == markdown_table(), "run: sds config --markdown, paste into docs/settings.md"


def test_readme_leads_with_setup_try_it_and_operating_it() -> None:
    """About 100 rows of settings stood before "Operating it"; they live in docs/settings.md."""
    prose = re.sub(r"```.*?```", "", README, flags=re.S)  # a shell comment is no heading
    headings = re.findall(r"^#+ (.+)$", prose, re.M)
    assert headings[1:4] == ["Set up", "Try it", "systemd"] and headings[4] == "Operating it"
    assert "](docs/settings.md)" in README
    assert "| `SDS_" not in README and "config-table" not in README
    setup = README[README.index("## Set up"):README.index("### Try it")]
    first = re.search(r"```sh\n(.*?)```", setup, re.S).group(1)  # type: ignore[union-attr]
    assert [line.split()[0] for line in first.splitlines()] == ["deploy/run.sh", "deploy/test.sh"]


def test_ci_runs_the_readme_test_command() -> None:
    assert "deploy/test.sh" in README and "deploy/run.sh" in README
    assert "deploy/test.sh" in (ROOT / ".ci" / "run").read_text()
