"""Derived values of a training configuration: batches, steps, peak LR, warm-up.

`dlscale config` prints these before a run is paid for; `fit` uses the same function.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlscale.config import TrainConfig
from dlscale.errors import ConfigError
from dlscale.train.optim import scaled_lr


@dataclass(frozen=True)
class Plan:
    world_size: int
    per_rank_batch: int
    """Images per rank per micro-step."""
    accumulation_steps: int
    global_batch: int
    """Images per optimizer step over all ranks."""
    train_size: int
    steps_per_epoch: int
    """Optimizer steps per epoch: whole global batches, or with data.drop_last=False also the
    last partial one (throughput counts it as a whole batch, as HAL's own throughput does)."""
    epochs: int
    peak_lr: float
    """Learning rate after warm-up, scaled for the global batch."""
    warmup_steps: int

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    @property
    def rank_images_per_step(self) -> int:
        """Images one rank trains on per optimizer step (all its micro-batches)."""
        return self.per_rank_batch * self.accumulation_steps

    def samples_seen(self, epoch_step: int) -> int:
        """Samples one rank has taken from the epoch's order after `epoch_step` optimizer steps of it (the
        sampler's position over all ranks is this times world_size)."""
        return epoch_step * self.rank_images_per_step


def per_rank_batch(cfg: TrainConfig, world_size: int) -> int:
    """Images per rank per micro-step: batch_size, or global_batch_size split over ranks and
    accumulation steps."""
    accumulation = cfg.optim.accumulation_steps
    per_step = world_size * accumulation
    if cfg.global_batch_size is not None:
        if cfg.global_batch_size % per_step:
            raise ConfigError(
                f"global_batch_size={cfg.global_batch_size} is not divisible by {world_size} ranks x "
                f"{accumulation} accumulation steps; pick a multiple of {per_step}"
            )
        per_rank = cfg.global_batch_size // per_step
        if cfg.batch_size is not None and cfg.batch_size != per_rank:
            raise ConfigError(f"batch_size={cfg.batch_size} per rank contradicts global_batch_size="
                              f"{cfg.global_batch_size} on {world_size} ranks; set only one of them")
    elif cfg.batch_size is not None:
        per_rank = cfg.batch_size
    else:
        raise ConfigError("set batch_size (per rank) or global_batch_size, e.g. --set batch_size=32")
    if per_rank < 1:
        raise ConfigError(f"the batch per rank is {per_rank}; it must be at least 1")
    return per_rank


def _steps_per_epoch(cfg: TrainConfig, train_size: int, world_size: int, per_rank: int) -> int:
    """Whole global batches; or, without drop_last, ceil(ceil(N / world_size) / per_rank) batches
    per rank, the number torch's DistributedSampler and DataLoader give (HAL's len(train_loader))."""
    if cfg.data.drop_last:
        return train_size // (per_rank * world_size * cfg.optim.accumulation_steps)
    if cfg.optim.accumulation_steps > 1:
        raise ConfigError("data.drop_last=false keeps a partial last batch, which gradient accumulation "
                          "cannot split; set optim.accumulation_steps=1 or data.drop_last=true")
    per_rank_samples = -(-train_size // world_size)
    return -(-per_rank_samples // per_rank)


def make_plan(cfg: TrainConfig, world_size: int, train_size: int) -> Plan:
    accumulation = cfg.optim.accumulation_steps
    per_step = world_size * accumulation
    per_rank = per_rank_batch(cfg, world_size)
    global_batch = per_rank * per_step
    steps = _steps_per_epoch(cfg, train_size, world_size, per_rank)
    if cfg.max_steps_per_epoch is not None:
        steps = min(steps, cfg.max_steps_per_epoch)
    if steps < 1:
        raise ConfigError(f"{train_size} training images are fewer than one global batch of {global_batch}; "
                          "lower the batch size or use fewer ranks")
    peak = scaled_lr(cfg.optim.lr, global_batch, cfg.optim.reference_batch, cfg.optim.lr_scaling)
    return Plan(
        world_size=world_size, per_rank_batch=per_rank, accumulation_steps=accumulation,
        global_batch=global_batch, train_size=train_size, steps_per_epoch=steps,
        epochs=cfg.schedule.epochs, peak_lr=peak,
        warmup_steps=round(cfg.schedule.warmup_epochs * steps),
    )
