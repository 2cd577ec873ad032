"""Benchmarks: one package per issue, each runnable with `python -m bench.<name>`."""
