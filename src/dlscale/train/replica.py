"""One builder of a rank's replica for bench and train: the model placed on its device in its
memory format, wrapped by the strategy, compiled if asked, and its optimizer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from dlscale.config.sections import OptimConfig, StrategyConfig
from dlscale.distributed.env import DistEnv
from dlscale.models import pad_stem
from dlscale.precision import Precision
from dlscale.speed import SpeedOptions
from dlscale.strategies import build_strategy
from dlscale.train.optim import build_optimizer
from dlscale.train.step import StepParts


@dataclass
class Replica:
    model: nn.Module
    """The unwrapped model on its device: evaluated, checkpointed, counted."""
    parts: StepParts
    """What the train step runs (parts.model is the wrapped and/or compiled model)."""


def build_replica(model: nn.Module, *, env: DistEnv, device: torch.device, speed: SpeedOptions,
                  strategy: StrategyConfig, optim: OptimConfig, global_batch: int, precision: Precision,
                  loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Replica:
    """Pad the stem if asked, place, wrap (the strategy broadcasts rank 0's weights), compile (after wrapping, so DDP's
    optimizer splits graphs at buckets), and build SGD with the LR scaled to global_batch."""
    speed = speed.resolved(device)
    model = speed.place_model(pad_stem(model, speed.stem_channels), device)
    chosen = build_strategy(strategy, env)
    wrapped = speed.maybe_compile(chosen.wrap(model, device))
    optimizer = build_optimizer(model, optim, global_batch=global_batch,
                                fused=True if speed.fused_optimizer else None)
    return Replica(model, StepParts(wrapped, optimizer, precision, chosen, loss_fn))
