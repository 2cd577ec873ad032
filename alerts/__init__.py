"""Alerts (docs/alerts.md): the evaluator `python -m alerts.evaluate` turns readings and rollup
buckets into rule states and events (the outbox `alert_events`); the deliverer delivers them."""
