"""Dashboard benchmarks: chart library candidates, and the device page as served."""
