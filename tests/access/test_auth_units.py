"""Pure checks of serve.auth: header parsing, Basic decoding, the basic cache."""

from __future__ import annotations

import base64
import uuid

import pytest

from people import credentials, roles
from people.principal import USER_ONLY, Principal
from serve.authenticator import BasicCache
from serve.authheader import decode_basic, parse_authorization
from shared.errors import Unauthorized
from tests.support.ingesting import wait_for


@pytest.mark.parametrize("header, scheme, value", [
    ("Basic abc=", "basic", "abc="),
    ("basic abc=", "basic", "abc="),
    ("BEARER tok", "bearer", "tok"),
    ("bearer tok", "bearer", "tok"),
    ("Apikey key", "apikey", "key"),
    ("apikey key", "apikey", "key"),
    ("APIKEY key", "apikey", "key"),
    ("  Apikey \t  key  ", "apikey", "key"),
], ids=["basic", "basic-lower", "bearer-upper", "bearer-lower", "apikey", "apikey-lower",
        "apikey-upper", "spaces-tabs"])
def test_scheme_names_are_case_insensitive(header: str, scheme: str, value: str) -> None:
    creds = parse_authorization(header)
    assert (creds.scheme, creds.value) == (scheme, value)


@pytest.mark.parametrize("header", ["", "   ", "Apikey", "Apikey   ", "Token abc", "Digest x=1"])
def test_bad_headers_are_401(header: str) -> None:
    with pytest.raises(Unauthorized) as info:
        parse_authorization(header)
    assert info.value.scheme in ("Basic", "Apikey")


@pytest.mark.parametrize("header, challenge", [
    ("apikey ", "Apikey"), ("Bearer", "Bearer"), ("basic  ", "Basic")])
def test_empty_value_challenges_with_its_own_scheme(header: str, challenge: str) -> None:
    with pytest.raises(Unauthorized) as info:
        parse_authorization(header)
    assert info.value.scheme == challenge


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_basic_password_may_hold_colons_and_unicode() -> None:
    assert decode_basic(_b64("a@b.c:pa:ss:wörd")) == ("a@b.c", "pa:ss:wörd")


@pytest.mark.parametrize("value", ["not base64!", _b64("no-colon"), _b64(":pw"), _b64("a@b:"),
                                   base64.b64encode(b"\xff\xfe:x").decode()])
def test_bad_basic_values_are_401(value: str) -> None:
    with pytest.raises(Unauthorized):
        decode_basic(value)


def test_principal_rights() -> None:
    user, org = uuid.uuid4(), uuid.uuid4()
    basic = Principal(user, org, "basic")
    key = Principal(user, org, "apikey", scopes=frozenset({"data:read"}))
    assert basic.allows("devices:read") and basic.allows(USER_ONLY)
    assert key.allows("data:read")
    assert not key.allows("devices:read")
    assert not key.allows(USER_ONLY)
    assert set(basic.scopes) == set(credentials.SCOPES)


@pytest.mark.parametrize("role", roles.ROLES)
def test_the_role_caps_every_kind_of_caller(role: str) -> None:
    """Password and token callers get their role's scopes; a key its own within them."""
    user, org = uuid.uuid4(), uuid.uuid4()
    allowed = roles.ROLE_SCOPES[role]
    everything = frozenset(credentials.SCOPES)
    for kind in ("basic", "bearer"):
        caller = Principal(user, org, kind, role=role)
        assert {s for s in credentials.SCOPES if caller.allows(s)} == allowed
        assert caller.allows(USER_ONLY)  # one's own keys and tokens, whatever the role
    key = Principal(user, org, "apikey", scopes=everything, role=role)
    assert {s for s in credentials.SCOPES if key.allows(s)} == allowed
    assert not key.allows(USER_ONLY)
    assert Principal(user, org, "basic", role=role).manages == (role in ("owner", "admin"))


def test_the_role_table() -> None:
    """Owners and admins hold every scope; a viewer no write but their own profile; a member
    adds annotations and alert rules; every role reads everything."""
    reads = {s for s in credentials.SCOPES if s.endswith(":read")}
    table = roles.ROLE_SCOPES
    assert table["owner"] == table["admin"] == frozenset(credentials.SCOPES)
    assert table["viewer"] == reads | {"users:write"}
    assert table["member"] == reads | {"users:write", "annotations:write", "notifications:write"}
    assert not roles.role_allows(None, "data:read")  # no membership: nothing
    assert not roles.role_allows("boss", "data:read")


def test_basic_cache_needs_same_user_and_same_hash() -> None:
    cache = BasicCache(ttl=60)
    user = uuid.uuid4()
    fp = cache.fingerprint("A@Example.com", "secret-pw")
    assert fp == cache.fingerprint("a@example.com", "secret-pw")
    assert fp != cache.fingerprint("a@example.com", "secret-pw2")
    assert b"secret-pw" not in fp
    assert not cache.get(fp, user_id=user, password_hash="$argon2id$h1")
    cache.put(fp, user_id=user, password_hash="$argon2id$h1")
    assert cache.get(fp, user_id=user, password_hash="$argon2id$h1")
    # The password changed (new hash): the remembered verify no longer counts.
    assert not cache.get(fp, user_id=user, password_hash="$argon2id$h2")
    assert not cache.get(fp, user_id=uuid.uuid4(), password_hash="$argon2id$h1")


def test_basic_cache_expires_and_is_bounded() -> None:
    cache = BasicCache(ttl=0.05, size=3)
    user = uuid.uuid4()
    fps = [cache.fingerprint("a@b.c", f"pw{i}") for i in range(5)]
    for fp in fps:
        cache.put(fp, user_id=user, password_hash="h")
    assert not cache.get(fps[0], user_id=user, password_hash="h")  # evicted (oldest)
    assert cache.get(fps[4], user_id=user, password_hash="h")
    wait_for(lambda: not cache.get(fps[4], user_id=user, password_hash="h"), 2, every=0.01,
             what="the entry's expiry")


def test_disabled_cache_remembers_nothing() -> None:
    cache = BasicCache(ttl=0)
    user = uuid.uuid4()
    fp = cache.fingerprint("a@b.c", "pw")
    cache.put(fp, user_id=user, password_hash="h")
    assert not cache.get(fp, user_id=user, password_hash="h")
