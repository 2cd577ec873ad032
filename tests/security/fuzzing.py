"""A bounded schemathesis runner for the security tests (reliability plan S14, S5).

`Fuzzer` loads the app's own OpenAPI document through WSGI (no server, no network), generates
cases per operation with schemathesis' Hypothesis strategies, sends each with the given
credentials and runs schemathesis' checks one by one, so every failure is counted under the
name of the check that raised it. Generation is derandomized (same cases every run) and bounded
twice: a number of examples per plan entry, and a time budget after which the remaining entries
run with a handful of examples only, so every operation is still exercised.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import schemathesis
import schemathesis.checks
from flask import Flask
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import FlakyFailure, Unsatisfiable, UnsatisfiedAssumption
from schemathesis import Case, GenerationMode

# Checks run on every response. The first five are about the server and its answers; the last
# three compare the OpenAPI document with what the server accepts and enforces.
RESPONSE_CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
                   "response_headers_conformance", "response_schema_conformance")
DOCUMENT_CHECKS = ("negative_data_rejection", "positive_data_acceptance", "ignored_auth")
ALL_CHECKS = RESPONSE_CHECKS + DOCUMENT_CHECKS
# When the time budget is spent, later plan entries still run this many examples each.
MIN_EXAMPLES = 3


@dataclass(frozen=True)
class Entry:
    """One generation job: an operation, a mode, parameters held fixed, and how many cases."""

    label: str  # e.g. "GET /api/v2/devices/{name}"
    mode: GenerationMode = GenerationMode.POSITIVE
    fixed: dict[str, Any] = field(default_factory=dict)  # as_strategy(path_parameters=, query=)
    examples: int = 25
    tag: str = ""  # free-form grouping (e.g. "seeded", "bola")


@dataclass
class Tally:
    """What a run sent and saw."""

    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    statuses_by_label: Counter[tuple[str, int]] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)  # check name -> failing cases
    failures_by_operation: Counter[tuple[str, str]] = field(default_factory=Counter)
    samples: dict[str, str] = field(default_factory=dict)  # check name -> first failing case
    ok_by_tag: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tag, label) -> 2xx
    cases_by_tag: Counter[tuple[str, str]] = field(default_factory=Counter)
    unsatisfiable: list[tuple[str, str]] = field(default_factory=list)
    shortened: int = 0  # entries run with MIN_EXAMPLES after the budget was spent
    seconds: float = 0.0

    @property
    def server_errors(self) -> int:
        """Responses with a 5xx status."""
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def fail(self, check: str, label: str, detail: str) -> None:
        """Count one failing case for `check`, keeping the first as an example."""
        self.failures[check] += 1
        self.failures_by_operation[(label, check)] += 1
        self.samples.setdefault(check, f"{label}: {detail}"[:1500])


def _failure_text(exc: BaseException) -> str:
    parts = getattr(exc, "exceptions", None) or [exc]
    return " | ".join(str(getattr(p, "title", "") or p).splitlines()[0] for p in parts)


class Fuzzer:
    """Generates and sends cases for the operations of one app's OpenAPI document."""

    def __init__(self, app: Flask, path: str = "/api/v2/openapi.json") -> None:
        self.schema = schemathesis.openapi.from_wsgi(path, app)
        self.operations = {op.label: op for op in
                           (result.ok() for result in self.schema.get_all_operations())}

    def run(self, entries: Iterable[Entry], *, headers: dict[str, str], budget: float,
            checks: Iterable[str] = ALL_CHECKS,
            inspect: Callable[[Entry, Case, Any, Tally], None] | None = None) -> Tally:
        """Send every entry's cases with `headers`; `inspect(entry, case, response, tally)`
        adds the caller's own checks. Stops generating in full after `budget` seconds."""
        tally = Tally()
        check_functions = [(name, getattr(schemathesis.checks, name)) for name in checks]
        started = time.monotonic()
        for entry in entries:
            operation = self.operations[entry.label]
            examples = entry.examples
            if time.monotonic() - started > budget:
                examples = min(examples, MIN_EXAMPLES)
                tally.shortened += 1

            strategy = operation.as_strategy(generation_mode=entry.mode, **entry.fixed)
            test = settings(max_examples=examples, deadline=None, database=None,
                            derandomize=True, phases=(Phase.explicit, Phase.generate),
                            suppress_health_check=list(HealthCheck))(
                given(case=strategy)(self._sender(entry, headers, check_functions, tally,
                                                  inspect)))
            try:
                test()
            except Unsatisfiable:
                # Nothing to negate (an operation without parameters or body): no case exists.
                tally.unsatisfiable.append((entry.label, entry.mode.value))
            except FlakyFailure as exc:
                # Schemathesis's generator rejecting on replay a case it made before ("Unreliable
                # assumption"): no request failed, the generator did. Seen for the negative
                # cases of POST .../reset-link once another operation's schema changed what
                # Hypothesis drew before it. Anything else flaky (a check) still fails.
                if not all(isinstance(e, UnsatisfiedAssumption) for e in exc.exceptions):
                    raise
                tally.unsatisfiable.append((entry.label, f"{entry.mode.value}: flaky generator"))
        tally.seconds = time.monotonic() - started
        return tally

    @staticmethod
    def _sender(entry: Entry, headers: dict[str, str], check_functions: list[tuple[str, Any]],
                tally: Tally, inspect: Callable[[Entry, Case, Any, Tally], None] | None
                ) -> Callable[[Case], None]:
        """The Hypothesis test body of one entry: send a case, count it, run the checks."""

        def send(case: Case) -> None:
            _send(entry, case, headers, check_functions, tally, inspect)

        return send


def _send(entry: Entry, case: Case, headers: dict[str, str],
          check_functions: list[tuple[str, Any]], tally: Tally,
          inspect: Callable[[Entry, Case, Any, Tally], None] | None) -> None:
    response = case.call(headers=headers)
    tally.cases += 1
    tally.statuses[response.status_code] += 1
    tally.statuses_by_label[(entry.label, response.status_code)] += 1
    tally.cases_by_tag[(entry.tag, entry.label)] += 1
    if 200 <= response.status_code < 300:
        tally.ok_by_tag[(entry.tag, entry.label)] += 1
    for name, check in check_functions:
        try:
            case.validate_response(response, checks=[check], headers=headers)
        except (AssertionError, BaseExceptionGroup) as exc:
            tally.fail(name, entry.label, f"{response.status_code} "
                       f"{response.request.method} {response.request.url} -> "
                       f"{_failure_text(exc)}; body {response.text[:300]!r}")
    if inspect is not None:
        inspect(entry, case, response, tally)
