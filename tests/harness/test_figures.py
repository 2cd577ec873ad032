"""The figures recorder renders what was recorded, merged with earlier runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import figures as figmod


def test_record_merge_and_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figmod, "DOCS", tmp_path)
    monkeypatch.setattr(figmod, "JSON_PATH", tmp_path / "r.json")
    monkeypatch.setattr(figmod, "MD_PATH", tmp_path / "r.md")
    first = figmod.Figures()
    first.record("ledger.none", {"missing": 0, "extra": 0}, section="delivery",
                 title="Ledger, no faults", target="missing = 0, extra = 0", source="test_r1")
    first.record("authz", "120/120", section="security", title="Authorization matrix",
                 target="100%", source="test_matrix")
    first.write()
    second = figmod.Figures()
    second.record("authz", "121/121", section="security", title="Authorization matrix",
                  target="100%", source="test_matrix")
    second.write()
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["figures"]["authz"]["value"] == "121/121"
    assert doc["figures"]["ledger.none"]["value"] == {"missing": 0, "extra": 0}
    md = (tmp_path / "r.md").read_text()
    assert "| Ledger, no faults | missing 0, extra 0 | missing = 0, extra = 0 |" in md
    assert "121/121" in md and "120/120" not in md
    assert md.index("## Delivery and ingestion") < md.index("## Security")


def test_unknown_section_refused() -> None:
    with pytest.raises(ValueError, match="unknown section"):
        figmod.Figures().record("x", 1, section="misc", title="x", target="", source="")


def test_nothing_recorded_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figmod, "JSON_PATH", tmp_path / "r.json")
    figmod.Figures().write()
    assert not (tmp_path / "r.json").exists()


def test_workers_figures_are_absorbed_and_the_later_measurement_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under pytest-xdist each worker exports its figures and the controller absorbs them all
    (tests/conftest.py): one document with every worker's figures, written once."""
    monkeypatch.setattr(figmod, "DOCS", tmp_path)
    monkeypatch.setattr(figmod, "JSON_PATH", tmp_path / "r.json")
    monkeypatch.setattr(figmod, "MD_PATH", tmp_path / "r.md")
    gw0, gw1 = figmod.Figures(), figmod.Figures()
    gw0.record("ledger.none", {"missing": 0, "extra": 0}, section="delivery",
               title="Ledger, no faults", target="missing = 0, extra = 0", source="test_r1")
    gw0.record("authz", "120/120", section="security", title="Authorization matrix",
               target="100%", source="test_matrix")
    gw1.record("rpo", 0, section="recovery", title="RPO", target="0", source="test_drill")
    gw1.record("authz", "121/121", section="security", title="Authorization matrix",
               target="100%", source="test_matrix")
    exported = [json.loads(json.dumps(w.export())) for w in (gw1, gw0)]  # as execnet carries
    exported[0][1]["measured_at"] = "2099-01-01T00:00:00Z"  # gw1's authz measured later
    controller = figmod.Figures()
    for part in exported:
        controller.absorb(part)
    assert set(controller.recorded) == {"ledger.none", "authz", "rpo"}
    controller.write()
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["figures"]["authz"]["value"] == "121/121"
    assert doc["figures"]["ledger.none"]["value"] == {"missing": 0, "extra": 0}
    assert "| RPO | 0 | 0 |" in (tmp_path / "r.md").read_text()
