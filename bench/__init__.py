"""dejima benchmarks: `bench/run` runs them all (see bench/__main__.py)."""
