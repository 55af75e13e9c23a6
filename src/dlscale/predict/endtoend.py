"""The end-to-end rate: a training run's images over its whole time, start-up and evaluations included.

The table's img/s is the step rate: images over the time of the training steps alone, what a benchmark and a
published per-epoch throughput measure. A run to accuracy also starts up (processes, the data pipeline, a
first epoch that warms caches and autotuners) and evaluates every few epochs; at thousands of devices these
are a large share of a time to train. With the run's epochs given (--epochs), dlscale predict adds

    time to train = start-up + epochs x training images / step rate
                                    + evaluations x ceil(validation images / (N x batch)) x t(batch) / 3

An evaluation step is a forward pass alone: a third of a training step's FLOPs
(docs/references.md#training-flops-3x), taken as a third of its time at the same batch per device. The
start-up is given (--startup-s) or unknown, and then taken as zero and said to be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlscale.errors import ConfigError
from dlscale.metrics.cost import IMAGENET_TRAIN_IMAGES
from dlscale.predict.model import Point

IMAGENET_VAL_IMAGES = 50_000
"""ILSVRC-2012's validation images (docs/references.md#imagenet-size; the training images: metrics/cost.py)."""
FORWARD_SHARE = 1 / 3
"""A forward pass's share of a training step (docs/references.md#training-flops-3x)."""


@dataclass(frozen=True)
class Schedule:
    epochs: float
    eval_every: float = 1.0
    """Epochs between two evaluations (MLPerf's ResNet-50 evaluates every 4)."""
    startup_s: float | None = None
    """Seconds before the first step; None: unknown, taken as zero."""
    train_images: int = IMAGENET_TRAIN_IMAGES
    eval_images: int = IMAGENET_VAL_IMAGES

    def __post_init__(self) -> None:
        for name in ("epochs", "eval_every"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"--{name.replace('_', '-')} {value!r} must be a number above 0")
        if self.startup_s is not None and not (math.isfinite(self.startup_s) and self.startup_s >= 0):
            raise ConfigError(f"--startup-s {self.startup_s!r} must be 0 or more")

    @property
    def evaluations(self) -> int:
        return math.floor(self.epochs / self.eval_every + 1e-9)

    def describe(self) -> str:
        start = (f"start-up {self.startup_s:g} s (given)" if self.startup_s is not None
                 else "start-up UNKNOWN, TAKEN AS ZERO (--startup-s)")
        return (f"{self.epochs:g} epochs of {self.train_images:,} images at the step rate, an evaluation of "
                f"{self.eval_images:,} images every {self.eval_every:g} epoch(s) ({self.evaluations} in all), a "
                f"forward pass a third of a training step per image (docs/references.md#training-flops-3x); {start}")


@dataclass(frozen=True)
class EndToEnd:
    time_to_train_s: float
    evaluation_s: float
    """All evaluations together."""
    img_per_s: float
    """Training images over the time to train."""


def end_to_end(schedule: Schedule, point: Point) -> EndToEnd:
    """The time to train at a predicted point: its step rate for the epochs, its compute for the evaluations."""
    training = schedule.epochs * schedule.train_images / point.img_per_s_total
    eval_steps = math.ceil(schedule.eval_images / (point.devices * point.batch_per_device))
    evaluation = schedule.evaluations * eval_steps * point.compute_ms / 1e3 * FORWARD_SHARE
    total = (schedule.startup_s or 0.0) + training + evaluation
    return EndToEnd(total, evaluation, schedule.epochs * schedule.train_images / total)
