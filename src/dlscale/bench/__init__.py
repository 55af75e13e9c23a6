"""Benchmarks: synthetic-data training throughput (synthetic.py) and the input pipeline alone (loader.py)."""
