"""Benchmark of storage per device-year (run: python -m bench.storage)."""
