"""Peak dense FLOP/s and memory bandwidth of known accelerators, for model FLOPs utilisation (MFU) and
dlscale predict's model of a step's fixed part.

Dense (no structured sparsity) TFLOP/s per GPU from NVIDIA's and AMD's whitepapers, datasheets and product
pages, the SM (AMD: compute unit) count of the whole product and its memory bandwidth
(docs/references.md#nvidia-peak-tflops and #amd-peak-tflops list each figure's source). A MIG instance
has a share of the SMs: its peak is the whole GPU's times its SMs over the whole GPU's (an A100 7g slice
has 98 of 108; an H100 1g slice 16 of 132, not 1/7), from the instance's own SM count where it is known,
else from its profile's g/7. MFU is only reported for devices in this table; anything else gets None
rather than a guess.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeak:
    tflops: dict[str, float]
    """Dense peak per dtype (fp32 without tensor cores; tf32, bf16, fp16 with them; AMD: its matrix cores)."""
    sms: int
    """Streaming multiprocessors (AMD: compute units) of the whole product."""
    memory_gbs: float | None = None
    """Memory bandwidth in GB/s (1e9 bytes/s) from the same datasheet; None where dlscale holds no source."""


PEAKS: dict[str, DevicePeak] = {  # most specific names first: every word of a key must be in the name
    "B200": DevicePeak({"tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0}, 148, 8000.0),
    "H200 NVL": DevicePeak({"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}, 132, 4800.0),
    "H200": DevicePeak({"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, 132, 4800.0),
    "H100 NVL": DevicePeak({"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}, 132, 3900.0),
    "H100 PCIe": DevicePeak({"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}, 114, 2000.0),
    "H100": DevicePeak({"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, 132, 3350.0),
    "L40S": DevicePeak({"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05}, 142, 864.0),
    "L40": DevicePeak({"fp32": 90.5, "tf32": 90.5, "bf16": 181.0, "fp16": 181.0}, 142, 864.0),
    "L4": DevicePeak({"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}, 58, 300.0),
    "A100 80GB": DevicePeak({"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, 108, 2039.0),
    "A100": DevicePeak({"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, 108, 1555.0),
    "A10": DevicePeak({"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, 72, 600.0),
    "A30": DevicePeak({"fp32": 10.3, "tf32": 82.0, "bf16": 165.0, "fp16": 165.0}, 56, 933.0),
    "A40": DevicePeak({"fp32": 37.4, "tf32": 74.8, "bf16": 149.7, "fp16": 149.7}, 84, 696.0),
    "V100S": DevicePeak({"fp32": 16.4, "fp16": 130.0}, 80, 1134.0),
    "V100-SXM3": DevicePeak({"fp32": 15.7, "fp16": 125.0}, 80, 900.0),
    "V100-SXM2": DevicePeak({"fp32": 15.7, "fp16": 125.0}, 80, 900.0),
    "V100-PCIE": DevicePeak({"fp32": 14.0, "fp16": 112.0}, 80, 900.0),
    "T4": DevicePeak({"fp32": 8.1, "fp16": 65.0}, 40, 320.0),
    "P100-SXM2": DevicePeak({"fp32": 10.6, "fp16": 21.2}, 56, 732.0),
    "P100-PCIE": DevicePeak({"fp32": 9.3, "fp16": 18.7}, 56, 732.0),
    "P40": DevicePeak({"fp32": 12.0}, 30, 346.0),
    "MI325X": DevicePeak({"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4}, 304, 6000.0),
    "MI300X": DevicePeak({"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4}, 304, 5300.0),
    "MI250X": DevicePeak({"fp32": 95.7, "bf16": 383.0, "fp16": 383.0}, 220, 3276.8),
    "MI250": DevicePeak({"fp32": 90.5, "bf16": 362.1, "fp16": 362.1}, 208, 3276.8),
    "MI210": DevicePeak({"fp32": 45.3, "bf16": 181.0, "fp16": 181.0}, 104, 1638.4),
    "MI100": DevicePeak({"fp32": 46.1, "bf16": 92.3, "fp16": 184.6}, 120, 1228.8),
}
PEAK_TFLOPS: dict[str, dict[str, float]] = {name: peak.tflops for name, peak in PEAKS.items()}
MIG_PROFILE = re.compile(r"\bMIG (\d)g\.", re.IGNORECASE)


def known_device(device_name: str) -> str | None:
    """The PEAKS key that names this device, or None."""
    return next((key for key in PEAKS if all(word in device_name for word in key.split())), None)


def peak_flops(device_name: str, dtype: str, sm_count: int | None = None) -> float | None:
    """Peak FLOP/s of the named device (or MIG instance with sm_count SMs) for dtype (fp32, tf32,
    bf16, fp16), or None if the device or its dtype is unknown."""
    key = known_device(device_name)
    if key is None or dtype not in PEAKS[key].tflops:
        return None
    peak = PEAKS[key].tflops[dtype] * 1e12
    mig = MIG_PROFILE.search(device_name)
    if mig is None:
        return peak
    share = sm_count / PEAKS[key].sms if sm_count else int(mig.group(1)) / 7
    return peak * min(share, 1.0)


def mfu(images_per_s: float, train_flops_per_image: float, device_name: str, dtype: str,
        sm_count: int | None = None) -> float | None:
    """Achieved training FLOP/s over the device's peak, or None for devices without a known peak."""
    peak = peak_flops(device_name, dtype, sm_count)
    if peak is None:
        return None
    return images_per_s * train_flops_per_image / peak


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, as SLURM and taskset set it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def host_memory_bytes() -> int | None:
    """This host's memory (MemTotal of /proc/meminfo; the page count elsewhere), None when unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None
