"""The static files' version ignores the asset writer's hidden temporaries (a concurrent
setup's `.next.*` file vanished between the listing and the read, and the edge's config failed
to render: tests/backup/test_rpo.py in a full run)."""

from __future__ import annotations

from pathlib import Path

from serve.web import assetversion


def test_hidden_temporaries_do_not_change_the_version(tmp_path: Path) -> None:
    (tmp_path / "vendor" / "pkg").mkdir(parents=True)
    (tmp_path / "vendor" / "pkg" / "mod.js").write_text("export const a = 1;\n")
    before = assetversion.digest(tmp_path)
    (tmp_path / "vendor" / "pkg" / ".next.Ab12").write_text("half-written")
    assert assetversion.digest(tmp_path) == before
    (tmp_path / "vendor" / "pkg" / "mod.js").write_text("export const a = 2;\n")
    assert assetversion.digest(tmp_path) != before
