"""Peak dense FLOP/s of known accelerators, for model FLOPs utilisation (MFU).

Values are NVIDIA's datasheet figures without structured sparsity, in TFLOP/s per GPU:
A100 SXM/PCIe (A100 datasheet: FP32 19.5, TF32 156, BF16/FP16 312), H100 SXM (H100 datasheet:
FP32 67, TF32 494.7, BF16/FP16 989.4), H100 PCIe (51, 378, 756), H100 NVL (60, 417.5, 835.5),
H200 (same Hopper die and clocks as H100 SXM: 67, 494.7, 989.4). MFU is only reported for
devices in this table; anything else gets None rather than a guess.
"""

from __future__ import annotations

import os

PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
    "H100": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
}


def peak_flops(device_name: str, dtype: str) -> float | None:
    """Peak FLOP/s of the named device for dtype (fp32, tf32, bf16, fp16), or None if unknown."""
    for key, peaks in PEAK_TFLOPS.items():  # most specific names first
        if all(word in device_name for word in key.split()):
            return peaks[dtype] * 1e12
    return None


def mfu(images_per_s: float, train_flops_per_image: float, device_name: str, dtype: str) -> float | None:
    """Achieved training FLOP/s over the device's peak, or None for devices without a known peak."""
    peak = peak_flops(device_name, dtype)
    if peak is None:
        return None
    return images_per_s * train_flops_per_image / peak


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, as SLURM and taskset set it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
