"""The rule state machine alone (alerts/evaluator/machine.py): pending, firing, hysteresis,
clearing, flapping input, re-applied and out-of-order samples."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from alerts.evaluator.machine import FIRING, OK, PENDING, State, run, step
from shared import alertrules

T0 = datetime(2026, 1, 10, 3, 0, tzinfo=UTC)


def frost(**extra: object) -> alertrules.Rule:
    body = {"name": "Frost", "table": "calibrated", "column": "tair",
            "scope": {"organisation": True}, "condition": {"op": "<", "threshold": 0},
            "for": 900, "clear": {"op": ">=", "threshold": 1}} | extra
    return alertrules.parse(body)


def series(*values: float | None, every: int = 300) -> list[tuple[datetime, float | None]]:
    return [(T0 + timedelta(seconds=i * every), v) for i, v in enumerate(values)]


def test_pending_until_the_condition_held_for_its_duration() -> None:
    rule = frost()
    state, events = run(rule, series(-1, -1, -1))  # 0, 5, 10 min: held 10 min < 15
    assert state.status == PENDING and state.since == T0 and events == []
    state, events = run(rule, series(-1, -1, -1, -1))  # 15 min
    assert state.status == FIRING
    assert [(e.kind, e.at, e.value) for e in events] == [
        ("firing", T0 + timedelta(minutes=15), -1)]


def test_a_break_in_the_condition_restarts_the_pending_time() -> None:
    state, events = run(frost(), series(-1, -1, 0.5, -1, -1, -1))
    assert state.status == PENDING and state.since == T0 + timedelta(minutes=15)
    assert events == []


def test_no_duration_fires_at_the_first_reading() -> None:
    state, events = run(frost(**{"for": 0}), series(2, -0.1))
    assert state.status == FIRING and [e.kind for e in events] == ["firing"]


def test_hysteresis_values_between_the_thresholds_neither_fire_nor_clear() -> None:
    rule = frost(**{"for": 0})
    state, events = run(rule, series(-0.5, 0.5, 0.9, 0.2))
    assert state.status == FIRING and [e.kind for e in events] == ["firing"]
    state, event = step(rule, state, T0 + timedelta(minutes=20), 1.0)
    assert state.status == OK and event is not None and event.kind == "resolved"


def test_flapping_input_at_the_threshold_does_not_flap() -> None:
    # A value hovering at 0 +- 0.1 for ten hours: one firing, no resolve, no second firing.
    rule = frost(**{"for": 0})
    values = [(-0.1 if i % 2 else 0.1) for i in range(120)]
    state, events = run(rule, series(*values))
    assert [e.kind for e in events] == ["firing"] and state.status == FIRING


def test_without_hysteresis_the_same_input_would_flap() -> None:
    # The control: clear at the firing threshold itself turns the same input into 119 events.
    rule = frost(**{"for": 0, "clear": {"op": ">=", "threshold": 0}})
    values = [(-0.1 if i % 2 else 0.1) for i in range(120)]
    _state, events = run(rule, series(*values))
    assert len(events) == 119


def test_clear_must_hold_for_its_duration() -> None:
    rule = frost(**{"for": 0, "clear_for": 600})
    state, events = run(rule, series(-1, 2, 2, -1, 2, 2, 2))
    assert [(e.kind, e.at) for e in events] == [
        ("firing", T0), ("resolved", T0 + timedelta(minutes=30))]
    assert state.status == OK


def test_missing_values_change_nothing() -> None:
    state, events = run(frost(), series(-1, None, -1, None, -1, -1))
    assert state.status == FIRING and len(events) == 1


def test_the_newest_sample_again_is_idempotent_and_older_ones_are_ignored() -> None:
    rule = frost(**{"for": 0})
    state, events = run(rule, series(-1))
    again, more = step(rule, state, T0, -1)
    assert again == state and more is None
    older, none = step(rule, state, T0 - timedelta(minutes=5), 5)
    assert older == state and none is None
    # A recomputed bucket (same time, new value) is applied.
    cleared, event = step(rule, state, T0, 3)
    assert cleared.status == OK and event is not None and event.kind == "resolved"


def test_default_state_is_ok() -> None:
    assert State().status == OK


def test_advance_equals_step_by_step_on_random_input() -> None:
    # The evaluator's fast loop (advance) against the reference (step), on random series with
    # gaps, repeats, out-of-order times and values around both thresholds.
    import random

    from alerts.evaluator.machine import advance

    rng = random.Random(7)
    for case in range(300):
        rule = frost(**{"for": rng.choice((0, 300, 900)), "clear_for": rng.choice((0, 600))})
        samples = []
        for i in range(rng.randint(0, 40)):
            minutes = i * 5 + rng.choice((0, 0, 0, -5, -10))  # some repeats and regressions
            value = rng.choice((None, -1.0, -0.1, 0.0, 0.5, 1.0, 2.0))
            samples.append((T0 + timedelta(minutes=minutes), value))
        start = rng.choice((State(), run(rule, samples[:3])[0]))
        assert advance(rule, start, samples) == run(rule, samples, start), case
