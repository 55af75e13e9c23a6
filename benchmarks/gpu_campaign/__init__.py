"""The GPU campaign behind `python benchmarks/gpu.py`: its stages and their estimates (plan.py, decode.py, levers.py),
the parts that order them (parts.py), the runs (runner.py, readers.py; wheels.py installs what the GPU machine lacks,
nvjpg.py samples its JPEG engines) and the JSON and markdown it writes (report.py, data_report.py). See
benchmarks/gpu.py and docs/benchmarks.md."""
