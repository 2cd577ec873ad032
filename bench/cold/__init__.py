"""Benchmark of the cold tier (issue 36): `python -m bench.cold`."""
