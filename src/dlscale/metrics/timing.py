"""Throughput statistics with the Horovod/BlueFog benchmark's conventions.

The +- printed after a rate is 1.96 x the population standard deviation (numpy's default
ddof=0) over timed iterations: the half-width of a normal 95% interval, exactly what
`pytorch_synthetic_benchmark.py` prints, so numbers compare with published ones.
"""

from __future__ import annotations

import math
import time
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


class DeviceTimer:
    """Sums intervals of device time without synchronising inside them; read on log steps only.

    On CUDA each interval is a pair of events recorded on the current stream: its time is the
    time the stream spent between the two points, which is what the device waited (for a batch,
    for a collective), not the host's time to enqueue the work. The events are read in total_s(),
    which waits for the last one: call it where the host synchronises anyway (a log step). On the
    CPU the work runs as it is called, and the host clock is the device's.
    """

    def __init__(self, device: torch.device, *, event_factory: Callable[..., object] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.on_cuda = device.type == "cuda"
        self.event = event_factory or (torch.cuda.Event if self.on_cuda else None)
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        self.seconds = 0.0
        self.pairs: list[tuple[object, object]] = []
        self.count = 0
        self._open: object | float | None = None

    def start(self) -> None:
        self._open = self._mark()

    def stop(self) -> None:
        if self._open is None:
            raise RuntimeError("DeviceTimer.stop() without start()")
        end = self._mark()
        if self.on_cuda:
            self.pairs.append((self._open, end))
        else:
            self.seconds += end - self._open
        self.count += 1
        self._open = None

    def total_s(self) -> float:
        """Seconds summed over the intervals since the last reset (waits for the last CUDA event)."""
        if self.pairs:
            self.pairs[-1][1].synchronize()
            self.seconds += sum(start.elapsed_time(end) for start, end in self.pairs) / 1000.0
            self.pairs = []
        return self.seconds

    def _mark(self) -> object | float:
        if not self.on_cuda:
            return self.clock()
        event = self.event(enable_timing=True)
        event.record()
        return event
