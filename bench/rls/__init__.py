"""Benchmark of the database roles and row-level security (run: python -m bench.rls)."""
