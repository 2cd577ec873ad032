"""testbed/browser.py: headless Debian Chromium starts, runs a page's JavaScript, reports
its console errors, and leaves no browser process or profile behind."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from testbed.browser import chromium, console_errors, wait_for

PAGE = ("data:text/html,<title>probe</title><script>window.answer = 6 * 7;"
        " console.error('probe-error');</script>")


def _chromium_pids(profile: str) -> list[int]:
    """Pids of processes whose command line names `profile` (our browser, nobody else's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if profile in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.usefixtures("processes")
def test_headless_chromium_runs_a_page_and_cleans_up() -> None:
    with chromium() as driver:
        driver.get(PAGE)
        assert wait_for(driver, "window.answer") == 42
        assert driver.title == "probe"
        assert any("probe-error" in m for m in console_errors(driver))
        args = driver.capabilities["chrome"]["userDataDir"]
        profile = re.sub(r"/+$", "", args)
        assert os.path.isdir(profile)
        assert _chromium_pids(profile)
    assert not os.path.exists(profile)
    assert not _chromium_pids(profile)
