"""Alert benchmarks (issue 24): latency from publish to webhook; the evaluation cost."""
