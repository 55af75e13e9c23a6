"""Throughput statistics with the Horovod/BlueFog benchmark's conventions.

The +- printed after a rate is 1.96 x the population standard deviation (numpy's default
ddof=0) over timed iterations: the half-width of a normal 95% interval, exactly what
`pytorch_synthetic_benchmark.py` prints, so numbers compare with published ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

Z95 = 1.96

LATENCY_QUANTILES = {"at100": 1.0, "at99": 0.99, "at95": 0.95}
"""NVIDIA ConvNets' val.compute_latency_at100/_at99/_at95: `np.quantile(latencies, q,
interpolation="nearest")` over the epoch's iterations (docs/references.md#ngc-throughput-metrics)."""


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

    def __enter__(self) -> DeviceTimer:
        """`with timer:` times its body (train_step's regions use it for the forward pass)."""
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

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


def time_forward(module: torch.nn.Module, timer: DeviceTimer) -> None:
    """Time `module`'s own forward passes in training mode with `timer`, by hooks on the module: inside a
    DDP wrapper that is after the buffer broadcast DDP's forward starts with, where every rank waits for
    rank 0 (and on gloo rank 0 for the others), which would hide a slow rank. Not for compiled models,
    whose graphs the hooks would break: time the wrapper's forward there (train_step's regions)."""
    module.register_forward_pre_hook(lambda m, args: timer.start() if m.training else None)
    module.register_forward_hook(lambda m, args, out: timer.stop() if m.training else None)


@dataclass
class IterationTimes:
    """Per-iteration data wait and compute time of a loop, measured as NVIDIA ConvNets' validate()
    measures them: `data_time` from the end of the previous iteration until the batch is there,
    compute time the rest of the iteration up to a device synchronisation."""

    data_s: list[float] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    images: int = 0

    def add(self, data_s: float, compute_s: float, images: int) -> None:
        self.data_s.append(data_s)
        self.compute_s.append(compute_s)
        self.images += images

    def rates(self) -> tuple[float, float]:
        """(images / all time, images / compute time) in images/s; 0 for no iterations."""
        compute = sum(self.compute_s)
        total = compute + sum(self.data_s)
        return (self.images / total if total > 0 else 0.0, self.images / compute if compute > 0 else 0.0)

    def latency_ms(self) -> dict[str, float | None]:
        """Mean data wait, mean compute latency and its ConvNets quantiles, in milliseconds."""
        if not self.compute_s:
            return {"data_time_ms": None, "compute_latency_ms": None,
                    **{f"compute_latency_{name}_ms": None for name in LATENCY_QUANTILES}}
        latencies = np.asarray(self.compute_s)
        quantiles = {f"compute_latency_{name}_ms": 1000 * float(np.quantile(latencies, q, method="nearest"))
                     for name, q in LATENCY_QUANTILES.items()}
        return {"data_time_ms": 1000 * float(np.mean(self.data_s)),
                "compute_latency_ms": 1000 * float(latencies.mean()), **quantiles}
