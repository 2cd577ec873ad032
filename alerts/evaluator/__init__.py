"""The alert evaluator (`python -m alerts.evaluator`): turns readings, rollup buckets and
device status into rule states and events (the outbox `alert_events`), beside the deliverer
(alerts/delivery/) that sends them.

Modules: `service` (the process: lock, LISTEN, passes, sweeps), `passes` (one pass),
`store` (its SQL), `rows` (the typed rows that cross them), `rules` (which rule watches which
device), `machine` (one rule's state machine, pure), `metrics`. The rule model itself
(validation, units, titles) is shared/alertrules.py, which the API uses too.
docs/alerts.md "Evaluation".
"""
