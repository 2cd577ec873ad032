"""Test-only helpers: real PostgreSQL and mosquitto servers on loopback (see services.py)."""
