"""Alerts (issue 24): rules evaluated after ingest, events (notifications) and their delivery.

alerts.evaluate turns readings into `alert_events`; alerts.delivery delivers them over the
organisation's channels. Both meet the API (serve) only in the database.
"""
