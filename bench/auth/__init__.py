"""Benchmark of request authentication (run: python -m bench.auth)."""
