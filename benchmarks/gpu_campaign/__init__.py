"""The GPU campaign behind `python benchmarks/gpu.py`: its plan (plan.py), the runs (runner.py) and
the JSON and markdown it writes (report.py). See benchmarks/gpu.py and docs/benchmarks.md."""
