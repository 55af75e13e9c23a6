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
from torch import nn

from dlscale.distributed import barrier, min_over_ranks
from dlscale.errors import ConfigError, StorageError
from dlscale.precision import Precision
from dlscale.rundir import storage_cause, to_jsonable
from dlscale.train.checkpoint import (
    CheckpointManager,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    what_is_wrong,
)
from dlscale.train.resume_check import check_resume
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
    device: torch.device = torch.device("cpu")
    """Where this rank's collectives run (NCCL needs CUDA tensors)."""
    settings: dict = field(default_factory=dict)
    """The resolved settings of this attempt (flattened TrainConfig plus world_size)."""
    changes: list = field(default_factory=list)
    """Allowed setting changes of earlier resumes and this one: [{"step": S, "changed": {key: [old, new]}}]."""

    def save(self, progress: Progress, *, consumed: int, reason: str, is_main: bool) -> Path | None:
        """Rank 0 writes; every rank waits so that nobody reads or deletes a half-written state.
        consumed: samples this rank has taken from the sampler in the current epoch. A write that
        fails (a full disk) stops every rank with one line; the previous checkpoint is intact."""
        path, failure = None, None
        if is_main:
            try:
                path = self.checkpoints.save(self._state(progress, consumed, reason), epoch=progress.epoch,
                                             step=progress.step)
            except OSError as error:
                failure = error
        everyone_ok = _all_ranks_agree(failure is None, self.device)  # also the barrier after the write
        if failure is not None:
            previous = self.checkpoints.latest_path()
            kept = f"the previous checkpoint, {previous}, is intact" if previous else "no earlier checkpoint exists"
            cause, advice = storage_cause(failure)
            raise StorageError(f"writing a checkpoint into {self.checkpoints.directory} failed ({cause}); {kept}: "
                               f"{advice + ' and ' if advice else ''}run the same command to resume")
        if not everyone_ok:
            raise StorageError("rank 0 could not write the checkpoint (its error says why); the previous checkpoint "
                               "is intact: run the same command to resume")
        return path

    def _state(self, progress: Progress, consumed: int, reason: str) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "scaler": self.precision.state_dict(),
            "sampler": self.sampler.state_dict(consumed),
            "progress": to_jsonable(asdict(progress)),
            "rng": capture_rng_state(),
            "reason": reason,
            "torch": str(torch.__version__),
            "settings": self.settings,
            "settings_changes": self.changes,
        }

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
            state, error = load_checkpoint(Path(how), device)
            if state is None:
                raise ConfigError(f"--resume {how}: the file is {what_is_wrong(error)}; it is not loaded: resume "
                                  "from an earlier checkpoint file, or --resume auto for the newest intact one")
        else:
            raise ConfigError(f"--resume {how}: no such checkpoint file (or use auto / none)")
        if state is None:
            return None
        progress = Progress(**state["progress"])
        if "settings" in state:  # checkpoints from before settings were stored resume unchecked
            changed = check_resume(state["settings"], self.settings, run=str(self.checkpoints.directory.parent))
            self.changes = list(state.get("settings_changes", []))
            if changed:
                self.changes.append({"step": progress.step, "changed": {k: list(v) for k, v in changed.items()}})
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.precision.load_state_dict(state["scaler"])
        self.sampler.load_state_dict(state["sampler"])
        restore_rng_state(state["rng"])
        barrier()  # every rank has read it before rank 0 may rotate files
        return progress


def _all_ranks_agree(ok: bool, device: torch.device) -> bool:
    """True when ok on every rank; a collective, so also a barrier."""
    return min_over_ranks({"ok": ok}, device)["ok"] == 1
