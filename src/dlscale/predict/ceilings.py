"""What bounds a device's step beside its compute and communication: the input pipeline's images per second
(a ceiling), a node's loader shared by its devices, a loader started afresh every epoch inside a timed window,
and the spread of step times that the stragglers term reads (model.predict_point)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeLoader:
    """A node's input pipeline measured at two settings: each loader worker's rate alone, and the node's
    rate with its cores full. Its devices share what it delivers."""

    worker_img_per_s: float
    """One worker's images/s when the workers do not crowd the cores."""
    node_img_per_s: float
    """The node's images/s with a worker on every core."""
    workers_per_device: int

    def per_device(self, devices_in_node: int) -> float:
        workers = self.workers_per_device * devices_in_node
        return min(workers * self.worker_img_per_s, self.node_img_per_s) / devices_in_node


@dataclass(frozen=True)
class EpochStart:
    """A loader started afresh every epoch while the program's timer already runs: its first batch is made
    by one worker alone (a DataLoader worker builds whole batches), batch / worker_img_per_s seconds that
    the epoch's first timed window includes."""

    worker_img_per_s: float
    """One loader worker's images/s."""
    epoch_images: int
    """Images in an epoch over all devices (a DistributedSampler pads it to a multiple of N)."""
    window_steps: int = 1
    """Steps per timed window: the rate is averaged over whole windows (the last partial one dropped)."""

    def per_step_s(self, devices: int, batch: int) -> float:
        steps = math.ceil(math.ceil(self.epoch_images / devices) / batch)
        windows = max(steps // self.window_steps, 1)
        return batch / self.worker_img_per_s / (windows * self.window_steps)


@dataclass(frozen=True)
class Ceilings:
    input_img_per_s: float | None = None
    """The input pipeline's images/s per device; None: not limited."""
    step_cv: float | None = None
    """Spread of one device's step time (std / mean); None: no stragglers."""
    node_loader: NodeLoader | None = None
    """A node's measured input pipeline, shared by its devices (a ceiling per device)."""
    epoch_start: EpochStart | None = None
    """The loader's start-up per epoch inside the timed windows."""
    source: dict = field(default_factory=dict)

    def input_ceiling(self, devices_in_node: int) -> float | None:
        ceilings = [c for c in (self.input_img_per_s,
                                self.node_loader.per_device(devices_in_node) if self.node_loader else None)
                    if c is not None]
        return min(ceilings) if ceilings else None
