"""Alerts (docs/alerts.md), two processes shaped like ingest/: the evaluator
(`alerts/evaluator/`, `python -m alerts.evaluator`) turns readings and rollup buckets into rule
states and events (the outbox `alert_events`); the deliverer (`alerts/delivery/`,
`python -m alerts.delivery`) delivers them."""
