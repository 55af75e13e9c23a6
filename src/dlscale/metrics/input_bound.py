"""Is training waiting for its data? One line that says so, by how much, and what would help."""

from __future__ import annotations

import math

from dlscale.metrics.hardware import available_cores

INPUT_BOUND_SHARE = 0.10
"""A step that waits for data this share of its time or more is input-bound. Below it the wait
is the fixed cost of receiving a ready batch from a worker (unpickling, shared-memory mapping,
the host-to-device copy) plus timing noise; above it the device idles a tenth of every step
because the loader delivers batches more slowly than the model consumes them."""


DECODE_PATHS = {
    "fast": "JPEGs decoded by the loader workers (reduced-scale where the crop allows)",
    "plain": "JPEGs decoded at full size by the loader workers",
    "gpu": "JPEGs decoded on the device, the loader workers only reading files",
    "not JPEG": "images held as arrays, nothing to decode",
}
"""What each decode path (data.decode, resolved) does, as the warning and `dlscale explain` say it."""
PROCESS_WHY = ("on an H100 the device path's decode in the training process returned only after the work queued "
               "before it on every stream, and a process of its own has none of the training's work queued")
"""Why the device path on CUDA may decode better in a process of its own: what was measured on an H100
(docs/benchmarks.md, benchmarks/decode_overlap.py's probe), not its cause (a device-wide synchronisation, or
allocations that the driver serialises with the queued work); the process's gain is for a GPU run to measure."""
PROCESS_TAX = 1.12
"""CPU time per image of DataLoader worker processes over loader threads on the fast JPEG path: pickling, shared
memory, collation and the main process's side of the queue (benchmarks/input_threads.py on the 2-core development
VM with nothing else running, threads / processes in images per CPU-second, in the median of three runs by threads
/ one thread: docs/profiling.md, "Threads or processes", and its record
docs/results/input-threads-2026-11-29-vm-quiet8.json)."""
THREADS_FIX = (f"loader threads instead of worker processes (data.workers_kind=thread: the same batches at about "
               f"1/{PROCESS_TAX:.2f} of the CPU time per image, benchmarks/input_threads.py)")
PROCESS_FIX = f"the device decode in a process of its own (data.device_feed=process: {PROCESS_WHY})"


def input_bound_warning(data_wait_s: float, step_s: float, *, workers: int, decode: str,
                        cores: int | None = None, batch_size: int | None = None,
                        cpu_s_per_image: float | None = None, device_type: str | None = None,
                        decode_process: bool = False, workers_kind: str = "process") -> str | None:
    """One line when data wait is INPUT_BOUND_SHARE of step time or more, naming the decode path, the
    kind and number of loader workers, the cores they need and what would help; None otherwise. cores: CPU
    cores this rank's loader may use (default: all this process may). cpu_s_per_image: CPU seconds per image
    of the training process and its loader workers (the cores a path needs per image/s). device_type: where
    the model runs. decode_process: the device path decodes in a process of its own
    (data.device_feed=process). workers_kind: "thread" or "process" (data.workers_kind, resolved)."""
    if step_s <= 0 or data_wait_s < INPUT_BOUND_SHARE * step_s:
        return None
    cores = cores or available_cores()
    compute_s = max(step_s - data_wait_s, 1e-12)
    rates = f" ({batch_size / step_s:.0f} of {batch_size / compute_s:.0f} img/s)" if batch_size else ""
    need = cores_needed(workers, step_s, compute_s)
    fixes = []
    if decode == "gpu" and device_type == "cuda" and not decode_process:
        fixes.append(PROCESS_FIX)
    if workers > 0 and workers_kind == "process" and decode in ("fast", "plain") and device_type == "cuda":
        fixes.append(THREADS_FIX)  # on a CPU device the step's operators and the threads contend: processes won
    if workers < cores and decode != "gpu":  # on the device path the workers only read files
        fixes.append(f"more loader workers (data.num_workers={min(cores, max(2, 2 * workers, need))}; now {workers}, "
                     f"{cores} cores for this rank)")
    if decode == "plain":
        fixes.append("the fast JPEG path (data.decode=fast)")
    if decode in ("fast", "plain") and device_type == "cuda":
        fixes.append("the device decode path (data.decode=gpu or auto: the workers only read files; `dlscale loader "
                     "--decode gpu --device cuda` measures its CPU time per image)")
    if not fixes or need > cores:
        fixes.append("more CPU cores per rank, a smaller data.image_size or faster storage "
                     "(`dlscale loader` measures the pipeline alone)")
    needs = (f"; with {workers} {workers_said(workers, workers_kind)}, keeping up at their rate takes about {need} "
             f"loader cores for this rank ({cores} here)" if workers > 0
             else "; no loader workers: the training process decodes between steps")
    return (f"training is input-bound: {100 * data_wait_s / step_s:.0f}% of each step ({1000 * data_wait_s:.1f} of "
            f"{1000 * step_s:.1f} ms) waits for data, so it runs {step_s / compute_s:.2f}x below the model's compute "
            f"rate{rates}{needs}{_path(decode, cpu_s_per_image, batch_size, compute_s)}; try {' and '.join(fixes)}")


def _path(decode: str, cpu_s_per_image: float | None, batch_size: int | None, compute_s: float) -> str:
    """The decode path, and the cores it needs per rank at the model's rate (from its CPU time per image)."""
    said = f"; decode path {decode} ({DECODE_PATHS.get(decode, decode)})"
    if not cpu_s_per_image or not batch_size:
        return said
    return (f"{said} takes {1000 * cpu_s_per_image:.2f} CPU-ms per image in the training process and its workers: "
            f"about {cores_said(cores_for_rate(cpu_s_per_image, batch_size / compute_s))} per rank at the model's rate")


def workers_said(count: int, kind: str) -> str:
    """What count workers of kind are called: 1 loader worker thread, 2 loader worker processes."""
    plural = "" if count == 1 else "es" if kind == "process" else "s"
    return f"loader worker {kind}{plural}"


def cores_said(count: int) -> str:
    return f"{count} core{'' if count == 1 else 's'}"


def cores_for_rate(cpu_s_per_image: float, images_per_s: float) -> int:
    """CPU cores busy feeding images_per_s at cpu_s_per_image (at least one)."""
    return max(1, math.ceil(cpu_s_per_image * images_per_s - 1e-9))


def cores_needed(workers: int, step_s: float, compute_s: float) -> int:
    """Loader workers (one core each) that would deliver a batch per compute_s, when `workers` busy
    workers deliver one per step_s: the workers' rate scaled to the model's (at least one more)."""
    return max(workers + 1, math.ceil(workers * step_s / compute_s - 1e-9))
