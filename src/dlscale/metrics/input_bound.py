"""Is training waiting for its data? One line that says so, by how much, and what would help."""

from __future__ import annotations

import math

from dlscale.metrics.hardware import available_cores

INPUT_BOUND_SHARE = 0.10
"""A step that waits for data this share of its time or more is input-bound. Below it the wait
is the fixed cost of receiving a ready batch from a worker (unpickling, shared-memory mapping,
the host-to-device copy) plus timing noise; above it the device idles a tenth of every step
because the loader delivers batches more slowly than the model consumes them."""


def input_bound_warning(data_wait_s: float, step_s: float, *, workers: int, decode: str,
                        cores: int | None = None, batch_size: int | None = None) -> str | None:
    """One line when data wait is INPUT_BOUND_SHARE of step time or more, naming what would help;
    None otherwise. cores: CPU cores this rank's loader may use (default: all this process may)."""
    if step_s <= 0 or data_wait_s < INPUT_BOUND_SHARE * step_s:
        return None
    cores = cores or available_cores()
    compute_s = max(step_s - data_wait_s, 1e-12)
    rates = f" ({batch_size / step_s:.0f} of {batch_size / compute_s:.0f} img/s)" if batch_size else ""
    need = cores_needed(workers, step_s, compute_s)
    fixes = []
    if workers < cores:
        fixes.append(f"more loader workers (data.num_workers={min(cores, max(2, 2 * workers, need))}; now {workers}, "
                     f"{cores} cores for this rank)")
    if decode == "plain":
        fixes.append("the fast JPEG path (data.decode=fast)")
    if not fixes or need > cores:
        fixes.append("more CPU cores per rank, a smaller data.image_size or faster storage "
                     "(`dlscale loader` measures the pipeline alone)")
    needs = (f"; at this rate per worker, keeping up takes about {need} loader cores for this rank ({cores} here)"
             if workers > 0 else "")
    return (f"training is input-bound: {100 * data_wait_s / step_s:.0f}% of each step ({1000 * data_wait_s:.1f} of "
            f"{1000 * step_s:.1f} ms) waits for data, so it runs {step_s / compute_s:.2f}x below the model's compute "
            f"rate{rates}{needs}; try {' and '.join(fixes)}")


def cores_needed(workers: int, step_s: float, compute_s: float) -> int:
    """Loader workers (one core each) that would deliver a batch per compute_s, when `workers` busy
    workers deliver one per step_s: the workers' rate scaled to the model's (at least one more)."""
    return max(workers + 1, math.ceil(workers * step_s / compute_s - 1e-9))
