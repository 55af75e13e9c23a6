"""What a checkpoint holds and how a run continues from it, exactly, at any step boundary.

`Progress` is where training stands (epoch, step, best accuracy, history); `RunState` is the
objects whose state a checkpoint saves with it: model, optimizer, schedule, loss scaler, the
sampler's position and the RNG states. Resuming is decided from the checkpoint directory alone
(docs/references.md#checkpoint-protocol), never from restart counters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from dlscale.errors import ConfigError
from dlscale.metrics.run import to_jsonable
from dlscale.precision import Precision
from dlscale.train.checkpoint import CheckpointManager, capture_rng_state, restore_rng_state
from dlscale.train.schedule import LRSchedule


@dataclass
class Progress:
    """What a checkpoint must carry besides model, optimizer and schedule to continue exactly."""

    epoch: int = 0
    epoch_step: int = 0
    """Optimizer steps done in `epoch`."""
    step: int = 0
    """Optimizer steps done in total."""
    elapsed_s: float = 0.0
    """Wall time spent training and evaluating, summed over attempts."""
    best_top1_pct: float = -1.0
    best_top5_pct: float = -1.0
    best_epoch: int = -1
    time_to_target_s: float | None = None
    history: list = field(default_factory=list)
    """Per-epoch records (validation metrics, throughput)."""
    skipped_samples: int = 0


@dataclass
class RunState:
    """The objects a checkpoint saves and restores."""

    model: nn.Module
    """The unwrapped model."""
    optimizer: torch.optim.Optimizer
    schedule: LRSchedule
    precision: Precision
    sampler: object
    """The training sampler: state_dict(consumed) and load_state_dict(state)."""
    checkpoints: CheckpointManager

    def save(self, progress: Progress, *, consumed: int, reason: str, is_main: bool) -> Path | None:
        """Rank 0 writes; every rank waits so that nobody reads or deletes a half-written state.
        consumed: samples this rank has taken from the sampler in the current epoch."""
        path = None
        if is_main:
            state = {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(),
                "scaler": self.precision.state_dict(),
                "sampler": self.sampler.state_dict(consumed),
                "progress": to_jsonable(asdict(progress)),
                "rng": capture_rng_state(),
                "reason": reason,
                "torch": str(torch.__version__),
            }
            path = self.checkpoints.save(state, epoch=progress.epoch, step=progress.step)
        if dist.is_initialized():
            dist.barrier()
        return path

    def resume(self, how: str, device: torch.device) -> Progress | None:
        """how: auto (the latest good checkpoint, if any), none (refused if checkpoints exist), or a
        file. Returns the restored Progress, or None when starting fresh."""
        if how == "none":
            if self.checkpoints.checkpoints():
                raise ConfigError(f"{self.checkpoints.directory.parent} already holds checkpoints; resume with "
                                  "--resume auto, or choose another --name")
            return None
        if how == "auto":
            state = self.checkpoints.load_latest(map_location=device)
        elif Path(how).is_file():
            state = torch.load(how, map_location=device, weights_only=True)
        else:
            raise ConfigError(f"--resume {how}: no such checkpoint file (or use auto / none)")
        if state is None:
            return None
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.precision.load_state_dict(state["scaler"])
        self.sampler.load_state_dict(state["sampler"])
        restore_rng_state(state["rng"])
        if dist.is_initialized():
            dist.barrier()  # every rank has read it before rank 0 may rotate files
        return Progress(**state["progress"])
