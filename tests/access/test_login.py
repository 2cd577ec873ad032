"""Password logins: POST /auth/token and bearer tokens (S10), the basic-credential cache and its
invalidation, throttling before argon2 (S7), and equal timing for unknown emails (S8)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from people import credentials
from shared.config import Settings
from tests.support.access_world import PASSWORDS, World, apikey, basic, bearer
from tests.support.apps import close_app, make_app
from tests.support.ingesting import wait_for

A1_LOGIN = {"email": "a1@a.example", "password": PASSWORDS["a1@a.example"]}


@pytest.fixture
def fresh_app(fresh_world: World) -> Iterator[Flask]:
    """An app with the default throttling on a world of its own."""
    app = make_app(fresh_world.url, login_max_failures=3, login_address_max_failures=6,
                   login_window=60)
    yield app
    close_app(app)


def _count_verifies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = credentials.verify_password

    def counting(stored: str | None, password: str) -> bool:
        calls[0] += 1
        return real(stored, password)

    monkeypatch.setattr(credentials, "verify_password", counting)
    return calls


# ---- POST /auth/token ----------------------------------------------------------------------


def test_token_from_json_and_from_form(client: FlaskClient, world: World) -> None:
    for kwargs in ({"json": A1_LOGIN}, {"data": A1_LOGIN}):
        r = client.post("/api/v2/auth/token", **kwargs)
        assert r.status_code == 200, r.get_json()
        body = r.get_json()
        assert list(body) == ["token", "user_id", "org_id"] and body["user_id"] == str(world.a1)
        assert body["org_id"] == str(world.org_a)  # bound to the home organisation
        assert r.headers["Cache-Control"] == "no-store"
        assert credentials.well_formed(body["token"], credentials.TOKEN_PREFIX)
        assert len(body["token"]) - len(credentials.TOKEN_PREFIX) - 8 >= 43  # >= 256 bits
        assert client.get("/api/v2/devices", headers=bearer(body["token"])).status_code == 200
        # Scheme name in any case (public clients send "bearer").
        lower = {"Authorization": f"bearer {body['token']}"}
        assert client.get("/api/v2/devices", headers=lower).status_code == 200


@pytest.mark.parametrize("data, content_type", [
    ("email=a1@a.example", "text/plain"), ("<x/>", "application/xml"), ("{}", None)])
def test_other_bodies_are_415(client: FlaskClient, data: str, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    r = client.post("/api/v2/auth/token", data=data, headers=headers)
    assert r.status_code == 415 and r.get_json()["code"] == 415
    assert "application/json" in r.get_json()["message"]


@pytest.mark.parametrize("body, field", [
    ({"email": "a1@a.example"}, "password"), ({"password": "x"}, "email"),
    ({"email": "", "password": "x"}, "email"), ({"email": 5, "password": "x"}, "email")])
def test_incomplete_logins_are_400(client: FlaskClient, body: dict[str, Any],
                                   field: str) -> None:
    r = client.post("/api/v2/auth/token", json=body)
    assert r.status_code == 400 and field in r.get_json()["message"]


def test_wrong_password_and_unknown_email_answer_alike(client: FlaskClient) -> None:
    wrong = client.post("/api/v2/auth/token", json={**A1_LOGIN, "password": "nope-nope"})
    unknown = client.post("/api/v2/auth/token",
                          json={"email": "ghost@a.example", "password": "nope-nope"})
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.get_data() == unknown.get_data()
    assert wrong.headers["WWW-Authenticate"] == unknown.headers["WWW-Authenticate"]


def test_token_expires_after_the_configured_ttl(fresh_world: World) -> None:
    app = make_app(fresh_world.url, token_ttl=120)
    try:
        client = app.test_client()
        token = client.post("/api/v2/auth/token", json=A1_LOGIN).get_json()["token"]
        with psycopg.connect(fresh_world.url) as conn:
            lifetime = conn.execute(
                "SELECT expires_at - created_at FROM auth_tokens WHERE digest = %s",
                (credentials.digest(token),)).fetchone()
            assert lifetime is not None
            assert abs(lifetime[0] - timedelta(seconds=120)) < timedelta(seconds=2)
            assert client.get("/api/v2/devices", headers=bearer(token)).status_code == 200
            conn.execute("UPDATE auth_tokens SET expires_at = now() - interval '1 second'"
                         " WHERE digest = %s", (credentials.digest(token),))
            conn.commit()
        r = client.get("/api/v2/devices", headers=bearer(token))
        assert r.status_code == 401
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert 'error="invalid_token"' in r.headers["WWW-Authenticate"]
    finally:
        close_app(app)


def test_logout_revokes_the_token(client: FlaskClient) -> None:
    token = client.post("/api/v2/auth/token", json=A1_LOGIN).get_json()["token"]
    other = client.post("/api/v2/auth/token", json=A1_LOGIN).get_json()["token"]
    r = client.delete("/api/v2/auth/token", headers=bearer(token))
    assert r.status_code == 204
    after = client.get("/api/v2/devices", headers=bearer(token))
    assert after.status_code == 401 and "invalid_token" in after.headers["WWW-Authenticate"]
    assert client.delete("/api/v2/auth/token", headers=bearer(token)).status_code == 401
    # Only that token: the user's other session stays.
    assert client.get("/api/v2/devices", headers=bearer(other)).status_code == 200


@pytest.mark.parametrize("token", [
    "sdst_" + "A" * 43 + "00000000",  # right shape, wrong check suffix
    "sdsk_" + "A" * 51, "garbage", "sdst_short"])
def test_malformed_tokens_are_refused_without_a_query(
        client: FlaskClient, monkeypatch: pytest.MonkeyPatch, token: str) -> None:


    def no_query(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a malformed token reached the database")

    monkeypatch.setattr(psycopg.Connection, "execute", no_query)
    r = client.get("/api/v2/devices", headers=bearer(token))
    assert r.status_code == 401
    r = client.get("/api/v2/devices", headers=apikey(token))
    assert r.status_code == 401
    assert credentials.well_formed(token, credentials.TOKEN_PREFIX) is False


# ---- password changes and deactivation -----------------------------------------------------


def test_password_change_ends_cached_basic_and_tokens(fresh_world: World,
                                                      fresh_app: Flask) -> None:
    client = fresh_app.test_client()
    old = basic("a1@a.example")
    assert client.get("/api/v2/devices", headers=old).status_code == 200  # now cached
    token = client.post("/api/v2/auth/token", json=A1_LOGIN).get_json()["token"]
    with psycopg.connect(fresh_world.url) as conn:
        conn.execute("UPDATE users SET password_hash = %s, password_changed_at = now()"
                     " WHERE id = %s", (credentials.hash_password("a-brand-new-pw"),
                                        fresh_world.a1))
        conn.commit()
    assert client.get("/api/v2/devices", headers=old).status_code == 401
    assert client.get("/api/v2/devices", headers=bearer(token)).status_code == 401
    new = basic("a1@a.example", "a-brand-new-pw")
    assert client.get("/api/v2/devices", headers=new).status_code == 200
    # API keys are separate credentials and survive a password change (docs/auth.md).
    assert client.get("/api/v2/devices",
                      headers=apikey(fresh_world.keys["devices"])).status_code == 200


def test_deactivated_user_loses_every_credential(fresh_world: World, fresh_app: Flask) -> None:
    client = fresh_app.test_client()
    token = client.post("/api/v2/auth/token", json=A1_LOGIN).get_json()["token"]
    creds = [basic("a1@a.example"), bearer(token), apikey(fresh_world.keys["devices"])]
    for headers in creds:
        assert client.get("/api/v2/devices", headers=headers).status_code == 200
    with psycopg.connect(fresh_world.url) as conn:
        conn.execute("UPDATE users SET active = false WHERE id = %s", (fresh_world.a1,))
        conn.commit()
    for headers in creds:
        assert client.get("/api/v2/devices", headers=headers).status_code == 401


def test_repeated_basic_requests_verify_once(client: FlaskClient,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_verifies(monkeypatch)
    headers = basic("a2@a.example")
    for _ in range(20):
        assert client.get("/api/v2/devices", headers=headers).status_code == 200
    assert calls[0] == 1
    # A wrong password for the same account is verified every time, never served from cache.
    wrong = basic("a2@a.example", "not-it-at-all")
    for _ in range(3):
        assert client.get("/api/v2/devices", headers=wrong).status_code == 401
    assert calls[0] == 4


def test_outdated_hash_is_upgraded_on_login(fresh_world: World, fresh_app: Flask) -> None:
    from argon2 import PasswordHasher

    weak = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(
        PASSWORDS["a2@a.example"])
    with psycopg.connect(fresh_world.url) as conn:
        conn.execute("UPDATE users SET password_hash = %s WHERE id = %s", (weak, fresh_world.a2))
        conn.commit()
    client = fresh_app.test_client()
    assert client.get("/api/v2/devices", headers=basic("a2@a.example")).status_code == 200
    with psycopg.connect(fresh_world.url) as conn:
        stored = conn.execute("SELECT password_hash FROM users WHERE id = %s",
                              (fresh_world.a2,)).fetchone()
    assert stored is not None and stored[0] != weak
    assert stored[0].startswith("$argon2id$v=19$m=19456,t=2,p=1$")


# ---- throttling ----------------------------------------------------------------------------


def test_account_throttled_before_argon2(fresh_app: Flask,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    client = fresh_app.test_client()
    wrong = basic("a1@a.example", "guess-guess")
    for _ in range(3):
        assert client.get("/api/v2/devices", headers=wrong).status_code == 401
    calls = _count_verifies(monkeypatch)
    # CPU time of this process (the app runs in it), not wall time: the cost a refusal spares,
    # unmoved by other work on a shared machine (wall time failed once in a full run).
    started = time.process_time()
    for headers in (wrong, basic("a1@a.example")):  # even the right password must wait
        r = client.get("/api/v2/devices", headers=headers)
        assert r.status_code == 429, r.get_json()
        retry = int(r.headers["Retry-After"])
        assert 0 < retry <= 60
        assert r.get_json()["code"] == 429
    r = client.post("/api/v2/auth/token", json=A1_LOGIN)
    assert r.status_code == 429 and "Retry-After" in r.headers
    for _ in range(50):
        assert client.get("/api/v2/devices", headers=wrong).status_code == 429
    cpu = time.process_time() - started
    assert calls[0] == 0, "a throttled attempt computed a password hash"
    # 53 refusals cost less than half as many argon2 verifies would.
    verify = _one_verify_seconds(time.process_time)
    assert cpu < 53 * verify / 2, (cpu, verify)
    # Another account from the same address is not locked by a1's count.
    assert client.get("/api/v2/devices", headers=basic("a2@a.example")).status_code == 200


def test_account_throttle_follows_the_account_across_addresses(fresh_app: Flask) -> None:
    client = fresh_app.test_client()
    wrong = basic("a1@a.example", "guess-guess")
    for i in range(3):
        r = client.get("/api/v2/devices", headers=wrong,
                       environ_base={"REMOTE_ADDR": f"10.0.0.{i + 1}"})
        assert r.status_code == 401
    r = client.get("/api/v2/devices", headers=basic("a1@a.example"),
                   environ_base={"REMOTE_ADDR": "10.0.0.99"})
    assert r.status_code == 429


def test_address_throttled_across_accounts(fresh_app: Flask) -> None:
    client = fresh_app.test_client()
    env = {"REMOTE_ADDR": "192.0.2.7"}
    for i in range(6):  # 6 different (mostly unknown) accounts: each below its own limit
        r = client.post("/api/v2/auth/token", json={"email": f"u{i}@x.example",
                                                    "password": "whatever-1"},
                        environ_base=env)
        assert r.status_code == 401
    r = client.post("/api/v2/auth/token", json=A1_LOGIN, environ_base=env)
    assert r.status_code == 429
    # The same user from another address is fine.
    r = client.post("/api/v2/auth/token", json=A1_LOGIN,
                    environ_base={"REMOTE_ADDR": "192.0.2.8"})
    assert r.status_code == 200


def test_throttle_is_shared_by_workers_and_temporary(fresh_world: World) -> None:
    apps = [make_app(fresh_world.url, login_max_failures=2, login_window=2) for _ in range(2)]
    try:
        wrong = basic("a2@a.example", "guess-guess")
        assert apps[0].test_client().get("/api/v2/devices", headers=wrong).status_code == 401
        assert apps[1].test_client().get("/api/v2/devices", headers=wrong).status_code == 401
        right = basic("a2@a.example")
        assert apps[0].test_client().get("/api/v2/devices", headers=right).status_code == 429
        assert apps[1].test_client().get("/api/v2/devices", headers=right).status_code == 429
        wait_for(lambda: apps[1].test_client().get("/api/v2/devices", headers=right)
                 .status_code != 429, 10, every=0.2, what="the lockout's end")
        # Success clears the account's count: two more failures are needed to lock again.
        assert apps[0].test_client().get("/api/v2/devices", headers=wrong).status_code == 401
        assert apps[0].test_client().get("/api/v2/devices", headers=right).status_code == 200
    finally:
        for app in apps:
            close_app(app)


# ---- timing --------------------------------------------------------------------------------


def _one_verify_seconds(clock: Callable[[], float] = time.perf_counter) -> float:
    """The median of 5 argon2 verifies of a wrong password, timed by `clock`."""
    stored = credentials.hash_password("timing-reference")
    samples = []
    for _ in range(5):
        t0 = clock()
        credentials.verify_password(stored, "timing-reference-wrong")
        samples.append(clock() - t0)
    return statistics.median(samples)


def _login_gap(client: FlaskClient, n: int) -> float:
    """Median of paired (unknown email - wrong password) login times, timed back to back in
    alternating order so the load bursts of a shared machine hit both sides alike."""

    def timed(email: str, i: int) -> float:
        t0 = time.perf_counter()
        r = client.post("/api/v2/auth/token", json={"email": email, "password": f"bad-pw-{i}"})
        elapsed = time.perf_counter() - t0
        assert r.status_code == 401
        return elapsed

    diffs = []
    for i in range(n):
        if i % 2:
            unknown, wrong = timed("ghost@a.example", i), timed("a1@a.example", i)
        else:
            wrong, unknown = timed("a1@a.example", i), timed("ghost@a.example", i)
        diffs.append(unknown - wrong)
    return statistics.median(diffs)


def test_unknown_email_costs_the_same_as_a_wrong_password(
        client: FlaskClient, monkeypatch: pytest.MonkeyPatch, figures: Any) -> None:
    """S8: median of paired (unknown - wrong) < 25% of one argon2 verify; a negative control
    (no dummy verify for unknown emails) shows the test would see the difference."""
    verify = _one_verify_seconds()
    gap = _login_gap(client, 30)
    figures.record("s9_argon2_verify_ms", round(verify * 1e3, 1), section="security",
                   title="S9 argon2id verify time on this machine (ms, median of 5; "
                         "m=19456, t=2, p=1)",
                   target="recorded", source="tests/access/test_login.py")
    figures.record("s8_login_gap_ms", round(gap * 1e3, 2), section="security",
                   title="S8 login timing gap, unknown email minus wrong password (ms, median "
                         "of 30 interleaved pairs)",
                   target=f"< 25% of one verify ({0.25 * verify * 1e3:.1f} ms)",
                   source="tests/access/test_login.py")
    assert abs(gap) < 0.25 * verify, (gap, verify)

    real = credentials.verify_password

    def leaky(stored: str | None, password: str) -> bool:
        return False if stored is None else real(stored, password)

    # The control as many pairs as the measurement, against a verify timed just before it:
    # with 10 pairs and the verify of a busier moment it missed once under a full run's load
    # (-18.8 ms against half of 39 ms).
    verify = _one_verify_seconds()
    monkeypatch.setattr(credentials, "verify_password", leaky)
    gap = _login_gap(client, 30)
    figures.record("s8_control_gap_ms", round(gap * 1e3, 2), section="security",
                   title="S8 negative control: the same gap with the dummy verify removed (ms, "
                         "median of 30 pairs)",
                   target="about minus one verify", source="tests/access/test_login.py")
    assert -gap > 0.5 * verify, ("negative control: the gap should be visible", gap, verify)


def test_attempts_before_back_off_and_cpu_of_refusals(fresh_world: World,
                                                      figures: Any) -> None:
    """S7 at the shipped settings: failed logins allowed before 429 (<= 100, NIST), and the
    process CPU time of 100 refused attempts, which must not pay for argon2."""
    app = make_app(fresh_world.url)  # default thresholds
    try:
        client = app.test_client()
        wrong = basic("a1@a.example", "guess-guess")
        allowed = 0
        while (status := client.get("/api/v2/devices", headers=wrong).status_code) == 401:
            allowed += 1
            assert allowed <= 100, "no back-off within 100 failed logins"
        assert status == 429
        cpu0 = time.process_time()
        statuses = {client.get("/api/v2/devices", headers=wrong).status_code
                    for _ in range(100)}
        cpu = time.process_time() - cpu0
    finally:
        close_app(app)
    stored = credentials.hash_password("cpu-reference")
    verify0 = time.process_time()
    credentials.verify_password(stored, "cpu-reference-wrong")
    verify_cpu = time.process_time() - verify0
    figures.record("s7_attempts_before_back_off", allowed, section="security",
                   title="S7 failed logins allowed per account before 429 (shipped "
                         "SDS_LOGIN_MAX_FAILURES)",
                   target="<= 100", source="tests/access/test_login.py")
    figures.record("s7_cpu_s_per_100_refused", round(cpu, 3), section="security",
                   title="S7 CPU-seconds (API process) for 100 throttled login attempts "
                         f"(one argon2 verify: {verify_cpu:.3f} s)",
                   target="far below 100 verifies", source="tests/access/test_login.py")
    assert statuses == {429}
    assert allowed == Settings().login_max_failures
    assert cpu < 100 * verify_cpu / 10, (cpu, verify_cpu)


def test_forwarded_address_used_only_behind_trusted_proxies(fresh_world: World) -> None:
    """With one trusted proxy, the address it saw is throttled, not the proxy's own."""
    app = make_app(fresh_world.url, login_address_max_failures=2, trusted_proxy_hops=1)
    try:
        client = app.test_client()
        proxy = {"REMOTE_ADDR": "10.9.9.9"}
        for i in range(2):
            r = client.post("/api/v2/auth/token", environ_base=proxy,
                            headers={"X-Forwarded-For": "spoofed, 198.51.100.1"},
                            json={"email": f"x{i}@x.example", "password": "wrong-wrong"})
            assert r.status_code == 401
        blocked = client.post("/api/v2/auth/token", environ_base=proxy, json=A1_LOGIN,
                              headers={"X-Forwarded-For": "198.51.100.1"})
        assert blocked.status_code == 429
        # Another client behind the same proxy is not affected; forged left entries are ignored.
        other = client.post("/api/v2/auth/token", environ_base=proxy, json=A1_LOGIN,
                            headers={"X-Forwarded-For": "198.51.100.1, 198.51.100.2"})
        assert other.status_code == 200
    finally:
        close_app(app)


def test_stale_failure_counts_are_purged(fresh_world: World) -> None:
    """Guessing with ever new emails must not grow login_failures without bound."""
    app = make_app(fresh_world.url, login_window=60)
    try:
        client = app.test_client()
        with psycopg.connect(fresh_world.url) as conn:
            for i in range(20):
                conn.execute("INSERT INTO login_failures VALUES ('account', %s, 1,"
                             " now() - interval '2 minutes', now() - interval '2 minutes')",
                             (bytes([i]) * 32,))
            conn.commit()
        r = client.post("/api/v2/auth/token", json={"email": "new@x.example", "password": "no-no"})
        assert r.status_code == 401
        with psycopg.connect(fresh_world.url) as conn:
            left = conn.execute(
                "SELECT kind, failures FROM login_failures ORDER BY kind").fetchall()
        assert left == [("account", 1), ("address", 1)]  # only the live counts of that attempt
    finally:
        close_app(app)
