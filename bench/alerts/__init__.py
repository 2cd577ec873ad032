"""Alerts benchmark (issue 24): `.venv/bin/python -m bench.alerts`."""
