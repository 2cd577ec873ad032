"""The rule state machine the evaluator steps (docs/alerts.md "States"): it lives in
shared/alertmachine.py, where the dashboard's rule preview reaches it too (the processes never
import each other); the evaluator keeps importing it from here."""

from shared.alertmachine import FIRING, OK, PENDING, State, Transition, advance, run, step

__all__ = ["FIRING", "OK", "PENDING", "State", "Transition", "advance", "run", "step"]
