"""The dashboard's admin pages never wait for an export (issue 30 item 5).

The members and teams pages read their lists through the API in-process, 10,000 records a page
(serve/web/peoplepages.py, teampages.py). While the heavy-page pool was keyed on `limit` those
reads were heavy pages: whenever someone exported, the pages failed with a page titled "400",
and an invitation created meanwhile lost its shown-once link. The pool now takes what a request
costs, and a listing of the organisation's records is no heavy page. The export is stood in for
by the heavy slot this test holds itself on the same lock file (an flock on a second open file
conflicts as one from another process does).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from people import links
from serve.fairshare import HEAVY, Slots
from shared.config import Settings
from tests.support.apps import close_app, make_app
from tests.support.dashboard import World, csrf_of, sign_in


@pytest.fixture
def busy(world: World, tmp_path: Path) -> Iterator[tuple[Flask, Path]]:
    """The app with the heavy-page pool as shipped, its one slot held by an export."""
    defaults = Settings()
    slots = tmp_path / "slots"
    app = make_app(world.url, api_slot_dir=str(slots),
                   api_heavy_slots=defaults.api_heavy_slots,
                   api_heavy_rows=defaults.api_heavy_rows,
                   api_user_concurrency=defaults.api_user_concurrency,
                   api_org_concurrency=defaults.api_org_concurrency)
    held = [Slots(slots).try_take(HEAVY, 1) for _ in range(defaults.api_heavy_slots)]
    assert None not in held
    try:
        yield app, slots
    finally:
        for fd in held:
            os.close(fd or -1)
        close_app(app)


def test_members_and_teams_pages_answer_while_an_export_holds_the_heavy_slot(
        busy: tuple[Flask, Path], world: World) -> None:
    app, _slots = busy
    client = app.test_client()
    sign_in(client, "admin@a.example")
    members = client.get("/dashboard/members")
    assert members.status_code == 200, members.get_data(as_text=True)[:2000]
    teams = client.get("/dashboard/teams")
    assert teams.status_code == 200, teams.get_data(as_text=True)[:2000]
    made = client.post("/dashboard/teams", data={"csrf": csrf_of(teams.get_data(as_text=True)),
                                                  "name": "Night shift"})
    assert made.status_code == 303
    team = client.get(made.headers["Location"])
    assert team.status_code == 200, team.get_data(as_text=True)[:2000]
    assert 'id="add-devices"' in team.get_data(as_text=True)


def test_a_created_invitation_shows_its_link_while_an_export_runs(
        busy: tuple[Flask, Path], world: World) -> None:
    app, _slots = busy
    client = app.test_client()
    sign_in(client, "admin@a.example")
    csrf = csrf_of(client.get("/dashboard/members").get_data(as_text=True))
    done = client.post("/dashboard/invitations", data={
        "csrf": csrf, "email": "busy@a.example", "role": "viewer"})
    shown = done.get_data(as_text=True)
    assert done.status_code == 200, shown[:2000]
    found = re.search(r'id="invite-link" readonly value="([^"]+)"', shown)
    assert found and links.ACCEPT_PATH in found.group(1), shown[:3000]
