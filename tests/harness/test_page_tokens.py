"""Absence checks on dashboard pages look for whole tokens: a random CSRF token on the page may
hold a device's name as a substring (a team-page test failed on a token containing "B1")."""

from __future__ import annotations

from tests.support.dashboard import shows

PAGE = ('<form><input type="hidden" name="csrf" value="q7-xB1Zr_A1k9ZZw">'
        '<option value="A2">A2</option></form><p>sensors/A3/readings</p><td>ZZ</td>')


def test_a_name_inside_a_random_token_is_not_shown() -> None:
    assert "B1" in PAGE and "A1" in PAGE  # a substring check would call them shown
    assert not shows(PAGE, "B1") and not shows(PAGE, "A1")


def test_a_name_as_an_element_attribute_or_path_part_is_shown() -> None:
    assert shows(PAGE, "A2") and shows(PAGE, "A3") and shows(PAGE, "ZZ")
    assert not shows(PAGE, "A")  # nor a prefix of a longer name
