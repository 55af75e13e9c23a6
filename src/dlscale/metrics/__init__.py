"""What a run measures and where it goes.

Measuring: timing (throughput statistics and 95% intervals, device timers, per-iteration data and compute
times), ranks (per-rank lead times, the straggler verdict), compile (what torch.compile did), hardware
(datasheet peaks, MFU), input_bound (the input-bound warning), energy and nvml (GPU energy through NVML),
cost (device-hours), proc_io (/proc read counters). Recording: run (RunDir: the run directory's files),
provenance (env.json: command, git state, machine, packages), records (per-log-step records: metrics.jsonl,
TensorBoard, NVIDIA's DLLL file, the terminal), progress (the progress bar and plain progress lines),
tracking (--mlflow).
"""
