"""Benchmark of aggregated pages over the cold tier (issue 36): `python -m bench.coldagg`."""
