"""Benchmarks: `python benchmarks/run.py --help`."""
