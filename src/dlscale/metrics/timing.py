"""Throughput statistics with the Horovod/BlueFog benchmark's conventions.

The +- printed after a rate is 1.96 x the population standard deviation (numpy's default
ddof=0) over timed iterations: the half-width of a normal 95% interval, exactly what
`pytorch_synthetic_benchmark.py` prints, so numbers compare with published ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

Z95 = 1.96


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """(mean, 1.96 x population std) of values; (nan, nan) for no values."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / n
    return mean, Z95 * math.sqrt(var)


def device_synchronizer(device: torch.device) -> Callable[[], None]:
    """A function that waits for the device's queued work: timed regions must end with it."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def format_duration(seconds: float) -> str:
    """HAL's time-to-solution format: '1.00 hrs 7.00 mins 51.31 secs'."""
    hours, rest = divmod(seconds, 3600.0)
    minutes, secs = divmod(rest, 60.0)
    return f"{hours:.2f} hrs {minutes:.2f} mins {secs:.2f} secs"
