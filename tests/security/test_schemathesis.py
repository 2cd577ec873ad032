"""Schemathesis over the app's OpenAPI document (reliability plan S14, with the S5 denylist).

Run 1, as org A's user a1 (Basic): every operation, schema-valid and schema-invalid cases,
plus cases with org A's real ids held fixed (tables, device, location, API key ids) so the
generated parameters reach the queries behind them. Every response is checked by schemathesis
(no 5xx; status code, content type, headers and body as documented) and by a denylist: no raw
password, key or token of the world and no stored-secret column name in any answer.

Run 2, the BOLA probe, as org B's user b1 (Basic) and B's read-all API key: every operation
that names an object, with org A's objects held fixed (device names, location id, A's API key
ids, A's device and location on /data of every table). Any 2xx is a cross-tenant read or write;
collections B may list must hold none of A's identifiers; A's key rows must be unchanged.

The runs are derandomized, bounded in examples per operation and in time (see fuzzing.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask
from psycopg.rows import dict_row
from schemathesis import Case, GenerationMode

from shared.columns import TABLES
from tests.security.fuzzing import DOCUMENT_CHECKS, RESPONSE_CHECKS, Entry, Fuzzer, Tally
from tests.support.access_world import World, apikey, basic
from tests.support.apps import close_app, make_app
from tests.support.figures import Figures

POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
GENERIC_EXAMPLES = 25  # per operation and mode
SEEDED_EXAMPLES = 12  # per operation and fixed id
BUDGET_A = 120.0  # seconds of full generation for run 1; run 2 is smaller
BUDGET_B = 60.0
# Names of columns and fields that hold secrets or their digests: never in an answer.
SECRET_FIELDS = ("password_hash", '"digest"', "key_hash")

DEVICE = "GET /api/v2/devices/{name}"
LOCATION = "GET /api/v2/locations/{location_id}"
DATA = "GET /api/v2/data/{table}"
KEY_PUT = "PUT /api/v2/apikeys/{key_id}"
KEY_DELETE = "DELETE /api/v2/apikeys/{key_id}"
NOTE_OPS = tuple(f"{m} /api/v2/annotations/{{annotation_id}}" for m in ("GET", "PUT", "DELETE"))
COLLECTIONS = ("GET /api/v2/devices", "GET /api/v2/locations", "GET /api/v2/locations/summary",
               "GET /api/v2/apikeys")


@pytest.fixture(scope="module")
def fuzz_app(world: World) -> Iterator[Flask]:
    """The app of this module's world (throttling out of the way: the runs log in often)."""
    application = make_app(world.url, login_max_failures=100_000,
                           login_address_max_failures=100_000)
    try:
        yield application
    finally:
        close_app(application)


@pytest.fixture(scope="module")
def fuzzer(fuzz_app: Flask) -> Fuzzer:
    """Schemathesis' view of the app's own OpenAPI document."""
    return Fuzzer(fuzz_app)


def _deny_secrets(world: World) -> Any:
    secrets = world.secrets()

    def inspect(entry: Entry, case: Case, response: Any, tally: Tally) -> None:
        text = response.text or ""
        for secret in secrets:
            if secret in text:
                tally.fail("secret_exposure", entry.label, f"raw secret in {response.status_code}")
        for name in SECRET_FIELDS:
            if name in text:
                tally.fail("secret_exposure", entry.label, f"{name} in {response.status_code}")

    return inspect


def plan_a(fuzzer: Fuzzer, world: World) -> list[Entry]:
    """Run 1: A's own ids held fixed, then every operation in both modes."""
    entries = [Entry(label, mode, examples=GENERIC_EXAMPLES, tag="generic")
               for label in fuzzer.operations for mode in (POSITIVE, NEGATIVE)]
    seeded: list[tuple[str, dict[str, Any]]] = [
        (DEVICE, {"path_parameters": {"name": world.dev_a}}),
        (LOCATION, {"path_parameters": {"location_id": str(world.loc_a)}}),
        (KEY_PUT, {"path_parameters": {"key_id": str(world.key_ids["data"])}}),
        # The first case deletes the key; the rest see a 404.
        (KEY_DELETE, {"path_parameters": {"key_id": str(world.key_ids["none"])}}),
    ]
    for table in TABLES:
        seeded.append(("GET /api/v2/schemas/{table}", {"path_parameters": {"table": table}}))
        seeded.append((DATA, {"path_parameters": {"table": table},
                              "query": {"device": world.dev_a}}))
        seeded.append((DATA, {"path_parameters": {"table": table},
                              "query": {"location": str(world.loc_a)}}))
    # Seeded entries first: if a slow machine spends the time budget, the generic ones are
    # the ones cut short.
    return [Entry(label, POSITIVE, fixed, SEEDED_EXAMPLES, tag="seeded")
            for label, fixed in seeded] + entries


def plan_b(world: World) -> list[Entry]:
    """Run 2: operations naming one of org A's objects, with A's ids held fixed."""
    fixed: list[tuple[str, dict[str, Any]]] = [
        (DEVICE, {"path_parameters": {"name": world.dev_a}}),
        (DEVICE, {"path_parameters": {"name": world.dev_a_idle}}),
        (LOCATION, {"path_parameters": {"location_id": str(world.loc_a)}}),
    ]
    for key in ("all", "data", "apikeys"):
        key_id = str(world.key_ids[key])
        fixed.append((KEY_PUT, {"path_parameters": {"key_id": key_id}}))
        fixed.append((KEY_DELETE, {"path_parameters": {"key_id": key_id}}))
    fixed.append((KEY_PUT, {"path_parameters": {"key_id": str(world.key_ids["a2_all"])}}))
    for label in NOTE_OPS:  # org A's annotation: B's cases must all miss it
        fixed.append((label, {"path_parameters": {"annotation_id": str(world.annotation_a)}}))
    for table in TABLES:
        fixed.append((DATA, {"path_parameters": {"table": table},
                             "query": {"device": world.dev_a}}))
        fixed.append((DATA, {"path_parameters": {"table": table},
                             "query": {"location": str(world.loc_a)}}))
        fixed.append((DATA, {"path_parameters": {"table": table},
                             "query": {"device": world.dev_a, "location": str(world.loc_a)}}))
    return [Entry(label, POSITIVE, params, SEEDED_EXAMPLES, tag="bola")
            for label, params in fixed]


@pytest.fixture(scope="module")
def run_a(fuzzer: Fuzzer, world: World) -> Tally:
    """Run 1, as a1 with Basic credentials."""
    return fuzzer.run(plan_a(fuzzer, world), headers=basic("a1@a.example"), budget=BUDGET_A,
                      inspect=_deny_secrets(world))


def _a_identifiers(world: World) -> list[str]:
    return [world.dev_a, world.dev_a_idle, str(world.loc_a), str(world.org_a), str(world.a1),
            str(world.a2), *(str(world.key_ids[k]) for k in world.key_ids
                             if k not in ("b_all",))]


def _a_key_rows(world: World) -> list[dict[str, Any]]:
    with psycopg.connect(world.url) as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM api_keys WHERE user_id = ANY(%s) ORDER BY id",
                           ([world.a1, world.a2],)).fetchall()


@pytest.fixture(scope="module")
def run_b(fuzzer: Fuzzer, world: World, run_a: Tally) -> dict[str, Any]:
    """Run 2 (after run 1, which changes A's keys): b1 with Basic on every object operation,
    B's read-all API key on the read ones, then B's collections; A's key rows compared."""
    leaked = _a_identifiers(world)
    leaks: list[str] = []

    def inspect(entry: Entry, case: Case, response: Any, tally: Tally) -> None:
        if 200 <= response.status_code < 300:
            text = response.text or ""
            leaks.extend(f"{entry.label}: {ident}" for ident in leaked if ident in text)

    before = _a_key_rows(world)
    entries = plan_b(world)
    reads = [e for e in entries if e.label.startswith("GET ")]
    collections = [Entry(label, POSITIVE, examples=SEEDED_EXAMPLES, tag="collection")
                   for label in COLLECTIONS]
    with_basic = fuzzer.run(entries + collections, headers=basic("b1@b.example"),
                            budget=BUDGET_B / 2, checks=RESPONSE_CHECKS[:1], inspect=inspect)
    with_key = fuzzer.run(reads + collections[:3], headers=apikey(world.keys["b_all"]),
                          budget=BUDGET_B / 2, checks=RESPONSE_CHECKS[:1], inspect=inspect)
    after = _a_key_rows(world)
    return {"runs": (with_basic, with_key), "leaks": leaks, "before": before, "after": after}


def _bola_2xx(runs: tuple[Tally, ...]) -> list[tuple[str, int]]:
    return [(label, n) for run in runs for (tag, label), n in run.ok_by_tag.items()
            if tag == "bola" and n]


def test_run_a_has_no_server_errors_and_answers_as_documented(
        run_a: Tally, figures: Figures) -> None:
    figures.record("s14_cases", run_a.cases, section="security",
                   title="Schemathesis cases generated (run as org A)", target="recorded",
                   source="tests/security/test_schemathesis.py")
    figures.record("s14_5xx", run_a.server_errors, section="security",
                   title="Schemathesis 5xx responses", target="0",
                   source="tests/security/test_schemathesis.py")
    figures.record("s14_failures_by_check",
                   {name: run_a.failures.get(name, 0)
                    for name in (*RESPONSE_CHECKS, *DOCUMENT_CHECKS, "secret_exposure")},
                   section="security", title="Schemathesis failing cases per check (run as A)",
                   target="0 for the response checks and secret exposure",
                   source="tests/security/test_schemathesis.py")
    figures.record("s14_seconds", round(run_a.seconds, 1), section="security",
                   title="Schemathesis run time as org A (s)", target="< 180",
                   source="tests/security/test_schemathesis.py")
    assert run_a.cases >= 300, f"too few cases generated: {run_a.cases}"
    assert run_a.server_errors == 0, run_a.samples.get("not_a_server_error")
    for name in (*RESPONSE_CHECKS, "secret_exposure"):
        assert run_a.failures[name] == 0, f"{name}: {run_a.samples.get(name)}"


def test_run_a_reaches_the_seeded_objects(run_a: Tally) -> None:
    """Negative control of the BOLA probe: with A's own credentials the same fixed ids answer
    2xx, so B's 404s below come from tenancy, not from ids that exist nowhere."""
    for label in (DEVICE, LOCATION, DATA, KEY_PUT, KEY_DELETE):
        assert run_a.ok_by_tag[("seeded", label)] > 0, f"A never got a 2xx from {label}"


@pytest.mark.xfail(strict=True, reason=(
    "OpenAPI document is looser than the server (schemathesis positive_data_acceptance): the "
    "unit codes and order are enumerated now, but local_time, start_time and end_time stay free "
    "strings: what the server accepts (IANA names, offsets within a day, calendar-valid dates "
    "and times) has no exact OpenAPI form, so schema-valid generated strings get 400"))
def test_run_a_document_matches_what_the_server_accepts(run_a: Tally) -> None:
    for name in DOCUMENT_CHECKS:
        assert run_a.failures[name] == 0, f"{name}: {run_a.samples.get(name)}"


def test_bola_probe_org_b_gets_nothing_of_org_a(run_b: dict[str, Any],
                                                figures: Figures) -> None:
    runs: tuple[Tally, ...] = run_b["runs"]
    bola_cases = sum(n for run in runs for (tag, _), n in run.cases_by_tag.items()
                     if tag == "bola")
    bola_2xx = _bola_2xx(runs)
    figures.record("s14_bola_cases", bola_cases, section="security",
                   title="BOLA probe cases (org B on org A's objects)", target="recorded",
                   source="tests/security/test_schemathesis.py")
    figures.record("s14_bola_2xx", sum(n for _, n in bola_2xx), section="security",
                   title="BOLA probe 2xx answers", target="0",
                   source="tests/security/test_schemathesis.py")
    figures.record("s14_bola_5xx", sum(run.server_errors for run in runs), section="security",
                   title="BOLA probe 5xx answers", target="0",
                   source="tests/security/test_schemathesis.py")
    assert bola_cases >= 200, bola_cases
    assert bola_2xx == [], f"org B got 2xx on org A's objects: {bola_2xx}"
    assert run_b["leaks"] == [], f"org A's identifiers in B's answers: {run_b['leaks'][:10]}"
    assert all(run.server_errors == 0 for run in runs), [r.samples for r in runs]
    # The probe reached the tenancy check: every object operation answered 404 to some case
    # (not only 400s for generated parameters).
    for label in (DEVICE, LOCATION, DATA, KEY_PUT, KEY_DELETE, *NOTE_OPS):
        assert any(run.statuses_by_label[(label, 404)] for run in runs), label
    # Nothing of A's keys changed: B's PUT and DELETE cases reached no row.
    assert run_b["before"] == run_b["after"]
    # B's own collections did answer (the probe was authenticated, not refused wholesale).
    assert any(run.ok_by_tag[("collection", "GET /api/v2/devices")] for run in runs)
