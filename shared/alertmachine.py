"""The state machine of one rule for one device: ok -> pending -> firing -> ok; pure.

In shared/ because two processes step it: the evaluator (alerts/, through alerts/machine.py)
and the dashboard's rule preview (serve/web/alertpreview.py), which runs a rule over a
device's last days with this very code.

Samples (time, value) are applied in time order. The firing condition must hold on every
sample for `for_seconds` (counted in sample time, from the first sample that met it) before
the rule fires; a firing rule resolves once the separate clear condition has held for
`clear_for_seconds`. Values between the two thresholds (the hysteresis band) change nothing,
so a value hovering at the firing threshold fires once and does not flap.

Applying the newest sample again (a rollup bucket recomputed with the same time, a reading
read twice after a restart) gives the same state and no second transition; a sample older
than the newest one applied is ignored (the evaluator reads in time order; docs/alerts.md
"Late data").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from shared.alertrules import Rule

OK, PENDING, FIRING = "ok", "pending", "firing"


@dataclass(frozen=True, slots=True)
class State:
    """Where one (rule, device) stands; `at`/`value`: the newest sample applied."""

    status: str = OK
    since: datetime | None = None  # pending: condition holds since; firing: fired at
    clearing_since: datetime | None = None  # firing: the clear condition holds since
    at: datetime | None = None
    value: float | None = None


@dataclass(frozen=True, slots=True)
class Transition:
    """An event to write: `firing` or `resolved`, caused by the sample at `at`."""

    kind: str
    at: datetime
    value: float


def step(rule: Rule, state: State, at: datetime, value: float | None
         ) -> tuple[State, Transition | None]:
    """Apply one sample; the new state and the transition it caused, if any."""
    if value is None or (state.at is not None and at < state.at):
        return state, None
    if state.status == FIRING:
        if not rule.clears(value):
            return replace(state, clearing_since=None, at=at, value=value), None
        clearing = state.clearing_since or at
        if (at - clearing).total_seconds() >= rule.clear_for_seconds:
            return State(OK, None, None, at, value), Transition("resolved", at, value)
        return replace(state, clearing_since=clearing, at=at, value=value), None
    if not rule.fires(value):
        return State(OK, None, None, at, value), None
    since = state.since if state.status == PENDING and state.since is not None else at
    if (at - since).total_seconds() >= rule.for_seconds:
        return State(FIRING, at, None, at, value), Transition("firing", at, value)
    return State(PENDING, since, None, at, value), None


def run(rule: Rule, samples: list[tuple[datetime, float | None]], state: State | None = None
        ) -> tuple[State, list[Transition]]:
    """Apply `samples` in order from `state` (default ok), one `step` each; the end state and
    transitions (the reference `advance` is checked against)."""
    state = state or State()
    found: list[Transition] = []
    for at, value in samples:
        state, transition = step(rule, state, at, value)
        if transition is not None:
            found.append(transition)
    return state, found


def advance(rule: Rule, state: State, samples: list[tuple[datetime, float | None]]
            ) -> tuple[State, list[Transition]]:
    """The same as `run`, for the evaluator's hot path: one (rule, device) over a pass's
    samples, making a State only at the end (a pass steps every rule of every reading)."""
    status, since, clearing, last_at, last_value = (state.status, state.since,
                                                     state.clearing_since, state.at, state.value)
    fires, clears = rule.fires, rule.clears
    hold, clear_hold = rule.for_seconds, rule.clear_for_seconds
    found: list[Transition] = []
    for at, value in samples:
        if value is None or (last_at is not None and at < last_at):
            continue
        last_at, last_value = at, value
        if status == FIRING:
            if not clears(value):
                clearing = None
                continue
            if clearing is None:
                clearing = at
            if (at - clearing).total_seconds() >= clear_hold:
                status, since, clearing = OK, None, None
                found.append(Transition("resolved", at, value))
        elif not fires(value):
            status, since = OK, None
        else:
            if status != PENDING or since is None:
                since = at
            if (at - since).total_seconds() >= hold:
                status, since = FIRING, at
                found.append(Transition("firing", at, value))
            else:
                status = PENDING
    if last_at == state.at and last_value == state.value:
        return state, found
    return State(status, since, clearing, last_at, last_value), found
