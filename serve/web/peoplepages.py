"""The dashboard's people pages (issue 23): the signed-in user's own API keys, the
organisation's members with invitations and reset links, and the user's preferences (name,
units, time zone) with their own pending invitations into other organisations and "sign out
everywhere".

Every read and write goes through the API as the signed-in user, in-process
(serve/web/apicall.py), like the alert pages: a form POSTs to a dashboard route with the
session's CSRF value, the route calls `/api/v2/apikeys`, `/api/v2/orgs/{id}/users`,
`/api/v2/orgs/{id}/invitations` or `/api/v2/users/me`, and a refusal shows the API's own
message on the page. Which scopes a key may hold, which roles exist and who may change them
are the API's rules (people/keypolicy.py, the OpenAPI document's role values, the API's
403s), read here, never restated.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from flask import Response, current_app, redirect, render_template, request, session, url_for

from people import keypolicy
from people.principal import Principal
from serve import preferences
from serve.args import MAX_LIMIT
from serve.pool import pool
from serve.web import apicall, charts
from serve.web import session as web_session
from serve.web.alertpages import FIELD_MAX
from serve.web.views import PREFIX, _html, blp, signed_in
from shared import units
from shared.errors import BadRequest, Forbidden, NotFound, ServiceError

ROLE_PATH = "/api/v2/orgs/{org_id}/users/{user_id}"  # the OpenAPI path whose body names roles
ROLES_CACHE = "web.openapi_roles"  # app.extensions key of the roles' part of that document


def answered(answer: apicall.Answer) -> Any:
    """The body of a 2xx answer; the API's 404 as the page's 404, anything else as a 400."""
    if answer.ok:
        return answer.body
    if answer.status == 404:
        raise NotFound(answer.message)
    if answer.status == 403:
        raise Forbidden(answer.message)
    raise BadRequest(answer.message)


def me() -> dict[str, Any]:
    """The signed-in user's record from `GET /api/v2/users/me` (role, organisation, prefs)."""
    return cast(dict[str, Any], answered(apicall.call("GET", "/api/v2/users/me")))


def status_of(answer: apicall.Answer) -> int:
    """The page's status for a refused API call (apicall.Answer.page_status)."""
    return answer.page_status


# ---- API keys ----------------------------------------------------------------------------


def grantable(principal: Principal, scopes: dict[str, str]) -> dict[str, str]:
    """The scopes of the API's map that this user may put on a key: the API's own rule
    (people/keypolicy.check_scopes) asked scope by scope."""
    out = {}
    with pool().connection() as conn:
        for scope, text in scopes.items():
            try:
                keypolicy.check_scopes(conn, principal, [scope])
            except Forbidden:
                continue
            out[scope] = text
    return out


def masked(value: str | None) -> str:
    """A key value as the list shows it: never the whole key on screen after its creation."""
    if not value:
        return ""
    if "..." in value:
        return value  # already masked by the API (show-once keys)
    return f"{value[:9]}...{value[-4:]}"


def _keys_page(principal: Principal, *, created: dict[str, Any] | None = None,
               error: str | None = None, form: dict[str, Any] | None = None,
               status: int = 200, confirm: str | None = None) -> Response:
    """The keys page; `confirm`: the id of the key whose deletion is asked for (a 404 when
    it is none of the user's keys)."""
    keys = answered(apicall.call("GET", "/api/v2/apikeys"))
    scopes = grantable(principal, answered(apicall.call("GET", "/api/v2/apikeys/scopes")))
    for key in keys:
        key["shown"] = masked(key.get("apikey"))
    asked = None
    if confirm is not None:
        asked = next((k for k in keys if str(k.get("id")) == confirm), None)
        if asked is None:
            raise NotFound(f"unknown API key {confirm!r}")
    return _html(render_template(
        "web/keys.html", keys=keys, scopes=scopes, created=created, error=error,
        form=form or {"scopes": []}, nav="keys", confirm=asked,
        deleted=request.args.get("deleted") == "1"), status)


@blp.route(f"{PREFIX}/keys", methods=["GET"])
@signed_in
def api_keys(principal: Principal) -> Response:
    """The signed-in user's API keys and the form that makes one."""
    return _keys_page(principal)


@blp.route(f"{PREFIX}/keys", methods=["POST"])
@signed_in
def api_key_create(principal: Principal) -> Response:
    """Make a key (POST /api/v2/apikeys); its value is shown on this answer only."""
    web_session.check_csrf()
    body: dict[str, Any] = {"name": request.form.get("name", "").strip()[:FIELD_MAX],
                            "scopes": request.form.getlist("scopes")[:100]}
    if request.form.get("exp", "").strip():
        body["exp"] = request.form["exp"].strip()[:FIELD_MAX]
    answer = apicall.call("POST", "/api/v2/apikeys", json=body)
    if not answer.ok:
        return _keys_page(principal, error=answer.message, form=body,
                          status=status_of(answer))
    return _keys_page(principal, created=answer.body)


@blp.route(f"{PREFIX}/keys/<objid('API key'):key_id>/active", methods=["POST"])
@signed_in
def api_key_active(principal: Principal, key_id: UUID) -> Response:
    """Deactivate or reactivate a key (PUT /api/v2/apikeys/{id} {"active": ...})."""
    web_session.check_csrf()
    state = request.form.get("active", "")
    if state not in ("true", "false"):
        raise BadRequest("active: send true or false")
    answered(apicall.call("PUT", f"/api/v2/apikeys/{key_id}", json={"active": state == "true"}))
    return cast(Response, redirect(url_for("web.api_keys"), code=303))


@blp.route(f"{PREFIX}/keys/<objid('API key'):key_id>/delete", methods=["POST"])
@signed_in
def api_key_delete(principal: Principal, key_id: UUID) -> Response:
    """Delete a key (DELETE /api/v2/apikeys/{id}) once confirmed (`confirm=yes`; without it
    the page asks first); the page then says so. It fails on its next use."""
    web_session.check_csrf()
    if request.form.get("confirm") != "yes":
        return _keys_page(principal, confirm=str(key_id))
    answered(apicall.call("DELETE", f"/api/v2/apikeys/{key_id}"))
    return cast(Response, redirect(url_for("web.api_keys", deleted="1"), code=303))


# ---- members -----------------------------------------------------------------------------


def roles_in(openapi: Any, seen: list[str]) -> list[str]:
    """The roles a member may be given: the enum of `role` in the OpenAPI document's body of
    `PUT /orgs/{id}/users/{user_id}`, then any other role a member holds (so a role the API
    adds shows up without a change here)."""
    found: list[str] = []
    try:
        body = openapi["paths"][ROLE_PATH]["put"]["requestBody"]["content"]
        schema = body["application/json"]["schema"]
        if "$ref" in schema:
            schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
        found = [str(r) for r in schema["properties"]["role"]["enum"]]
    except (KeyError, TypeError, AttributeError):
        found = []
    return list(dict.fromkeys(found + [r for r in seen if r]))


def _openapi_roles() -> dict[str, Any]:
    """The part of the API's OpenAPI document that names the roles, read once per process
    (the document is fixed while the process runs; reading it costs about 20 ms)."""
    cached = current_app.extensions.get(ROLES_CACHE)
    if cached is None:
        doc = apicall.call("GET", "/api/v2/openapi.json").body or {}
        cached = {"paths": {ROLE_PATH: (doc.get("paths") or {}).get(ROLE_PATH)},
                  "components": doc.get("components")}
        if cached["paths"][ROLE_PATH] is not None:  # never remember a failed read
            current_app.extensions[ROLES_CACHE] = cached
    return cast(dict[str, Any], cached)


def _members(user: dict[str, Any]) -> list[dict[str, Any]]:
    page = answered(apicall.call("GET", f"/api/v2/orgs/{user['org_id']}/users",
                            query={"limit": MAX_LIMIT}))
    return cast(list[dict[str, Any]], page["items"])


def _invitations(user: dict[str, Any]) -> list[dict[str, Any]]:
    page = answered(apicall.call("GET", f"/api/v2/orgs/{user['org_id']}/invitations",
                                 query={"limit": MAX_LIMIT}))
    return cast(list[dict[str, Any]], page["items"])


def _members_page(principal: Principal, *, error: str | None = None,
                  status: int = 200, invited: dict[str, Any] | None = None,
                  reset: dict[str, Any] | None = None,
                  form: dict[str, Any] | None = None) -> Response:
    manage = web_session.is_admin(principal)
    user: dict[str, Any] = {}
    try:
        user = me()
        people = _members(user)
        roles = roles_in(_openapi_roles(), [p["role"] for p in people])
        # Only administrators may list invitations (the API's 403 for anyone else).
        pending = _invitations(user) if manage else []
    except ServiceError as exc:
        if invited is None and reset is None:
            raise
        # A link shown once was just made: it is shown whatever happens to the lists (a
        # busy service, a cap on requests in flight), or it would be lost for good.
        people, roles, pending = [], [], []
        error = f"The lists could not be read ({exc.message}); reload the page to see them."
    if reset is not None:
        reset["email"] = next((p["email"] for p in people if p["id"] == reset["user_id"]), "")
    return _html(render_template(
        "web/members.html", people=people, roles=roles, me=user, error=error,
        manage=manage, invitations=pending, invited=invited, reset=reset,
        form=form or {}, nav="members"), status)


@blp.route(f"{PREFIX}/members", methods=["GET"])
@signed_in
def members(principal: Principal) -> Response:
    """The organisation's members with their roles; administrators change roles and remove."""
    return _members_page(principal)


def _member(user_id: UUID) -> tuple[dict[str, Any], dict[str, Any]]:
    user = me()
    found = next((p for p in _members(user) if p["id"] == str(user_id)), None)
    if found is None:
        raise NotFound(f"unknown user {str(user_id)!r}")
    return user, found


@blp.route(f"{PREFIX}/members/<objid('user'):user_id>/role", methods=["POST"])
@signed_in
def member_role(principal: Principal, user_id: UUID) -> Response:
    """Change a member's role (PUT /api/v2/orgs/{id}/users/{user_id}); a refusal (the last
    administrator, a member asking) is shown on the page with the API's message."""
    web_session.check_csrf()
    user = me()
    role = request.form.get("role", "").strip()[:FIELD_MAX]
    answer = apicall.call("PUT", f"/api/v2/orgs/{user['org_id']}/users/{user_id}",
                          json={"role": role})
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _members_page(principal, error=answer.message, status=status_of(answer))
    return cast(Response, redirect(url_for("web.members"), code=303))


@blp.route(f"{PREFIX}/members/<objid('user'):user_id>/remove", methods=["GET"])
@signed_in
def member_remove_confirm(principal: Principal, user_id: UUID) -> Response:
    """The confirm step before removing a member: who, and what removal does."""
    _user, person = _member(user_id)
    return _html(render_template("web/member_remove.html", person=person, nav="members"))


@blp.route(f"{PREFIX}/members/<objid('user'):user_id>/remove", methods=["POST"])
@signed_in
def member_remove(principal: Principal, user_id: UUID) -> Response:
    """Remove a member (DELETE /api/v2/orgs/{id}/users/{user_id}): their account is
    deactivated and every token and key of theirs stops at once."""
    web_session.check_csrf()
    user = me()
    answer = apicall.call("DELETE", f"/api/v2/orgs/{user['org_id']}/users/{user_id}")
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _members_page(principal, error=answer.message, status=status_of(answer))
    return cast(Response, redirect(url_for("web.members", removed=1), code=303))


# ---- invitations and reset links ----------------------------------------------------------


def invite_body(form: dict[str, str]) -> dict[str, Any]:
    """The POST /orgs/{id}/invitations body from the invite form, passed on as typed (the API
    judges the email and the role); the checkbox is sent only when ticked."""
    return {"email": form.get("email", "").strip()[:FIELD_MAX],
            "role": form.get("role", "").strip()[:FIELD_MAX],
            "teams_only": form.get("teams_only") == "on"}


@blp.route(f"{PREFIX}/invitations", methods=["POST"])
@signed_in
def invitation_create(principal: Principal) -> Response:
    """Invite someone (POST /api/v2/orgs/{id}/invitations): the answer says whether the link
    was mailed, or shows it (once) for the administrator to pass on."""
    web_session.check_csrf()
    user = me()
    body = invite_body(request.form.to_dict())
    answer = apicall.call("POST", f"/api/v2/orgs/{user['org_id']}/invitations", json=body)
    if not answer.ok:
        return _members_page(principal, error=answer.message, status=status_of(answer),
                             form=body)
    return _members_page(principal, invited=answer.body)


@blp.route(f"{PREFIX}/invitations/<objid('invitation'):invitation_id>/revoke", methods=["POST"])
@signed_in
def invitation_revoke(principal: Principal, invitation_id: UUID) -> Response:
    """Revoke a pending invitation (DELETE /api/v2/orgs/{id}/invitations/{id}): its link
    stops working at once."""
    web_session.check_csrf()
    user = me()
    answer = apicall.call("DELETE",
                          f"/api/v2/orgs/{user['org_id']}/invitations/{invitation_id}")
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _members_page(principal, error=answer.message, status=status_of(answer))
    return cast(Response, redirect(url_for("web.members", revoked=1), code=303))


@blp.route(f"{PREFIX}/members/<objid('user'):user_id>/reset-link", methods=["POST"])
@signed_in
def member_reset_link(principal: Principal, user_id: UUID) -> Response:
    """A password-reset link for a member (POST /api/v2/orgs/{id}/users/{id}/reset-link),
    shown once to the administrator, who passes it on."""
    web_session.check_csrf()
    user = me()
    answer = apicall.call("POST", f"/api/v2/orgs/{user['org_id']}/users/{user_id}/reset-link")
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _members_page(principal, error=answer.message, status=status_of(answer))
    return _members_page(principal, reset=answer.body)


# ---- preferences -------------------------------------------------------------------------


def account_body(form: dict[str, str]) -> dict[str, Any]:
    """The PATCH /users/me body from the preferences form: name (empty clears it), each unit
    chosen and the zone, passed on as typed (the API judges them)."""
    name = form.get("name", "").strip()[:FIELD_MAX]
    chosen = {p: form.get(p, "").strip()[:FIELD_MAX] for p in units.UNIT_PARAMS}
    prefs: dict[str, Any] = {"units": {p: c for p, c in chosen.items() if c}}
    zone = form.get("zone", "").strip()[:FIELD_MAX]
    if zone:
        prefs["zone"] = zone
    return {"name": name or None, "preferences": prefs}


def _account_page(*, typed: dict[str, str] | None = None, error: str | None = None,
                  saved: bool = False, joined: bool = False,
                  status: int = 200) -> Response:
    user = me()
    # The user's pending invitations (issue 30): they join another organisation only here.
    invitations = answered(apicall.call("GET", "/api/v2/users/me/invitations"))
    prefs = user.get("preferences") or {}
    chosen = {p: (prefs.get("units") or {}).get(p, units.DEFAULTS[p])
              for p in units.UNIT_PARAMS}
    zone = prefs.get("zone", "device")
    if typed is not None:  # a refused form: shown as typed
        user["name"] = typed.get("name", "")
        chosen.update({p: typed[p] for p in units.UNIT_PARAMS if typed.get(p)})
        zone = typed.get("zone", zone)
    return _html(render_template(
        "web/account.html", user=user, chosen=chosen, zone=zone,
        unit_choices=charts.unit_choices(), zone_words=preferences.ZONE_WORDS, error=error,
        saved=saved, invitations=invitations, joined=joined, nav="account"), status)


@blp.route(f"{PREFIX}/account", methods=["GET"])
@signed_in
def account(principal: Principal) -> Response:
    """The user's name, units and time zone: the dashboard's defaults on every page."""
    return _account_page(saved=request.args.get("saved") == "1",
                         joined=request.args.get("joined") == "1")


@blp.route(f"{PREFIX}/account", methods=["POST"])
@signed_in
def account_save(principal: Principal) -> Response:
    """Save the preferences form through PATCH /api/v2/users/me."""
    web_session.check_csrf()
    form = request.form.to_dict()
    answer = apicall.call("PATCH", "/api/v2/users/me", json=account_body(form))
    if not answer.ok:
        return _account_page(typed=form, error=answer.message, status=status_of(answer))
    return cast(Response, redirect(url_for("web.account", saved=1), code=303))


@blp.route(f"{PREFIX}/account/invitations/<objid('invitation'):invitation_id>/accept",
           methods=["POST"])
@signed_in
def account_invitation_accept(principal: Principal, invitation_id: UUID) -> Response:
    """Accept one of the user's pending invitations (POST
    /api/v2/users/me/invitations/{id}/accept): the account's own consent, signed in."""
    web_session.check_csrf()
    answer = apicall.call("POST", f"/api/v2/users/me/invitations/{invitation_id}/accept",
                          json={})
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _account_page(error=answer.message, status=status_of(answer))
    return cast(Response, redirect(url_for("web.account", joined=1), code=303))


@blp.route(f"{PREFIX}/account/sign-out-everywhere", methods=["POST"])
@signed_in
def account_sign_out_everywhere(principal: Principal) -> Response:
    """Sign out everywhere (POST /api/v2/users/me/credentials/revoke): every token and API key
    of the account ends, this session's too, and the browser goes to the sign-in form."""
    web_session.check_csrf()
    answer = apicall.call("POST", "/api/v2/users/me/credentials/revoke")
    if not answer.ok:
        return _account_page(error=answer.message, status=status_of(answer))
    session.clear()
    return cast(Response, redirect(url_for("web.login", everywhere=1), code=303))
