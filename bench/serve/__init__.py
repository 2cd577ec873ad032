"""Benchmark of /data and /schemas serving (run: python -m bench.serve)."""
