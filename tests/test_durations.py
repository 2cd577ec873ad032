"""tests/support/durations.py: module seconds from a JUnit report, merged into the file that
orders the modules for the xdist workers (tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import durations

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_durations" name="test_a" time="1.5"/>
<testcase classname="tests.test_durations" name="test_b" time="2.25"/>
<testcase classname="tests.test_lint.TestSomething" name="test_c" time="4.0"/>
<testcase classname="tests.gone.test_removed" name="test_d" time="9.0"/>
</testsuite></testsuites>"""


def test_a_report_sums_each_modules_tests_and_finds_modules_of_classes(tmp_path: Path) -> None:
    report = tmp_path / "run.xml"
    report.write_text(REPORT)
    assert durations.from_junit(report) == {"tests/test_durations.py": 3.75,
                                            "tests/test_lint.py": 4.0}


def test_main_merges_into_the_file_and_drops_modules_that_are_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report, target = tmp_path / "run.xml", tmp_path / "durations.json"
    report.write_text(REPORT)
    target.write_text(json.dumps({"tests/test_lint.py": 1.0, "tests/test_docs.py": 7.0,
                                  "tests/nowhere/test_old.py": 5.0}))
    monkeypatch.setattr(durations, "FILE", target)
    assert durations.main([str(report)]) == 0
    assert json.loads(target.read_text()) == {
        "tests/test_docs.py": 7.0, "tests/test_durations.py": 3.8, "tests/test_lint.py": 4.0}
    assert durations.main([]) == 2


def test_the_checked_in_file_names_only_modules_that_exist() -> None:
    measured = durations.load()
    assert measured, "tests/durations.json is missing or empty"
    assert [m for m in measured if not (durations.ROOT / m).is_file()] == []
