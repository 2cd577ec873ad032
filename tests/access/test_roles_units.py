"""people/roles.py alone (no service): the one home of every role rule (issue 31)."""

from __future__ import annotations

import pytest

from people import roles
from shared.errors import BadParameter, Forbidden


def test_the_roles_strongest_first_and_the_managers() -> None:
    assert roles.ROLES == ("owner", "admin", "member", "viewer")
    assert [r for r in roles.ROLES if roles.manages(r)] == ["owner", "admin"]
    assert not roles.manages(None)
    assert [r for r in roles.ROLES if roles.is_owner(r)] == ["owner"]


def test_an_unknown_role_is_refused_naming_the_roles() -> None:
    assert roles.check_role("viewer") == "viewer"
    with pytest.raises(BadParameter, match="role: one of owner, admin, member, viewer"):
        roles.check_role("boss")


@pytest.mark.parametrize("role", ["owner", "admin"])
def test_only_members_and_viewers_may_be_teams_only(role: str) -> None:
    assert roles.check_teams_only("member", True) and roles.check_teams_only("viewer", True)
    assert roles.check_teams_only(role, False) is False
    with pytest.raises(BadParameter, match="teams_only: only for the roles member and viewer"):
        roles.check_teams_only(role, True)
    # A teams-only member promoted to a manager's role is no longer limited to their teams.
    assert roles.keeps_teams_only("viewer", True) and not roles.keeps_teams_only(role, True)


def test_only_an_owner_acts_on_an_owner() -> None:
    roles.check_owner_rule(by_owner=True, roles=("owner",), action="invites an owner")
    roles.check_owner_rule(by_owner=False, roles=("admin", "member"), action="x")
    with pytest.raises(Forbidden, match="^only an owner of the organisation invites an owner$"):
        roles.check_owner_rule(by_owner=False, roles=("owner",), action="invites an owner")
    with pytest.raises(Forbidden):
        roles.check_owner_rule(by_owner=False, roles=("member", "owner"), action="unmakes one")
