"""Learning-rate schedules driven by the global optimizer step.

`LRSchedule.lr_at(step)` is a pure function of the config, the peak LR, `steps_per_epoch`
and (for "plateau") the reductions recorded so far, so the config printer can show a
schedule without training. `apply(step)` writes that value into the optimizer.

Formulas (docs/references.md#hal-lr-schedule, #sc20-lr-schedule, #ngc-lr-schedule), with E = epochs,
W = warm-up epochs, step counted from 0 over the run,
e = step / steps_per_epoch (fractional epoch), base = the peak LR:
* warm-up per iteration: `base * (step + offset) / (W * steps_per_epoch)` for step < W * steps_per_epoch;
  offset 1 by default, 2 for HAL (`1 + step + epoch * len_epoch` with HAL's step = 1, 2, ...);
* warm-up per epoch (SC20, NVIDIA ConvNets): `base * (epoch + 1) / W` for epoch < W;
* step (HAL, Goyal et al.): `base * gamma ** (milestones passed)`, x0.1 at 30/60/80, and with
  `milestone_every` at every further multiple of it (HAL: 90, 120, ...);
* cosine (NVIDIA): `end + 0.5 * (1 + cos(pi * (e - W) / (E - W))) * (base - end)`;
* linear (NVIDIA): `end + (1 - (e - W) / (E - W)) * (base - end)`;
* plateau (SC20): torch's ReduceLROnPlateau(factor=0.2, patience=10, mode="min"),
  fed the validation loss once per epoch after warm-up.
Cosine and linear take e fractional (`anneal_per="iteration"`: they move every iteration and
equal NVIDIA's values at each epoch's first step) or whole (`anneal_per="epoch"`: NVIDIA's
policies, constant within an epoch).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from dlscale.config.sections import ScheduleConfig
from dlscale.errors import ConfigError, shown


class LRSchedule:
    """Sets the optimizer's LR from the global step (0 = the first optimizer step).

    `steps_per_epoch` counts optimizer steps (micro-batches / accumulation_steps).
    Call `apply(step)` before each optimizer step; for "plateau" call `observe(loss,
    epoch=e)` after validating epoch e, which changes the LR from epoch e + 1 on.
    """

    def __init__(
        self,
        cfg: ScheduleConfig,
        *,
        peak_lr: float,
        steps_per_epoch: int,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        if steps_per_epoch < 1:
            raise ConfigError(
                f"steps_per_epoch={steps_per_epoch}: the data set gives no full batch; "
                "lower the batch size or use more data"
            )
        self.cfg = cfg
        self.peak_lr = float(peak_lr)
        self.steps_per_epoch = int(steps_per_epoch)
        self.optimizer = optimizer
        # "plateau" state, as in torch.optim.lr_scheduler.ReduceLROnPlateau.
        self.best = math.inf if cfg.plateau_mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.reduction_epochs: list[int] = []
        """First epoch run at each reduced LR (one entry per reduction)."""
        self.last_observed_epoch = -1

    # ---------------------------------------------------------------- values
    def lr_at(self, step: int) -> float:
        """The LR for global optimizer step `step` (no side effects)."""
        if step < 0:
            raise ValueError(f"step={step} must be >= 0")
        fraction = self._warmup_fraction(step)
        if fraction is not None:
            numerator, denominator = fraction
            # HAL multiplies the warm-up into the step factor; in the references' order of operations
            base = self._step_decay(step) if self.cfg.name == "step" else self.peak_lr
            return base * numerator / denominator
        return self._decayed(step)

    def _warmup_fraction(self, step: int) -> tuple[float, float] | None:
        """(numerator, denominator) of the peak's fraction during warm-up, None once it is over."""
        warmup_epochs = self.cfg.warmup_epochs
        if warmup_epochs <= 0:
            return None
        if self.cfg.warmup_per == "iteration":
            warmup_steps = warmup_epochs * self.steps_per_epoch
            return (step + self.cfg.warmup_step_offset, warmup_steps) if step < warmup_steps else None
        epoch = step // self.steps_per_epoch
        return (epoch + 1, warmup_epochs) if epoch < warmup_epochs else None

    def _decayed(self, step: int) -> float:
        name = self.cfg.name
        if name == "constant":
            return self.peak_lr
        if name == "step":
            return self._step_decay(step)
        if name == "plateau":
            epoch = step // self.steps_per_epoch
            reductions = sum(1 for first in self.reduction_epochs if first <= epoch)
            return self.peak_lr * self.cfg.plateau_factor**reductions
        return self._annealed(step)

    def _step_decay(self, step: int) -> float:
        epoch = step // self.steps_per_epoch
        milestones, every = self.cfg.milestones, self.cfg.milestone_every
        passed = sum(1 for milestone in milestones if epoch >= milestone)
        last = max(milestones, default=0)
        if every and epoch > last:  # multiples of `every` in (last, epoch]
            passed += epoch // every - last // every
        return self.peak_lr * self.cfg.gamma**passed

    def _annealed(self, step: int) -> float:
        """Cosine or linear from the peak (end of warm-up) to end_lr (epoch E), then flat."""
        cfg = self.cfg
        whole = cfg.anneal_per == "epoch"  # NVIDIA: the policy takes the epoch number only
        epoch = min(step // self.steps_per_epoch if whole else step / self.steps_per_epoch, cfg.epochs)
        elapsed = epoch - cfg.warmup_epochs
        span = cfg.epochs - cfg.warmup_epochs
        # Same operation order as NVIDIA's lr_cosine_policy / lr_linear_policy, so the
        # values at epoch boundaries are bit-identical to theirs.
        if cfg.name == "cosine":
            remaining = 0.5 * (1 + math.cos(math.pi * elapsed / span))
        else:
            remaining = 1 - elapsed / span
        return cfg.end_lr + remaining * (self.peak_lr - cfg.end_lr)

    # ---------------------------------------------------------------- updates
    def apply(self, step: int) -> float:
        """Write `lr_at(step)` into every parameter group; returns it."""
        if self.optimizer is None:
            raise RuntimeError("LRSchedule.apply needs the optimizer passed at construction")
        lr = self.lr_at(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def observe(self, metric: float, *, epoch: int) -> bool:
        """Feed epoch `epoch`'s validation metric to "plateau"; True if the LR was reduced.

        The same rule as torch's ReduceLROnPlateau (relative threshold, no cooldown).
        Other schedules and warm-up epochs ignore the value.
        """
        if self.cfg.name != "plateau" or epoch + 1 <= self.cfg.warmup_epochs:
            return False
        if epoch <= self.last_observed_epoch:
            raise ValueError(
                f"epoch {epoch} was already observed (last {self.last_observed_epoch})"
            )
        self.last_observed_epoch = epoch
        if self._is_better(float(metric)):
            self.best = float(metric)
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.num_bad_epochs > self.cfg.plateau_patience:
            self.reduction_epochs.append(epoch + 1)
            self.num_bad_epochs = 0
            return True
        return False

    def _is_better(self, metric: float) -> bool:
        if self.cfg.plateau_mode == "min":
            return metric < self.best * (1 - self.cfg.plateau_threshold)
        return metric > self.best * (1 + self.cfg.plateau_threshold)

    # ---------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        """Plain data (floats, ints, lists): loads with torch.load(weights_only=True)."""
        return {
            "name": self.cfg.name,
            "peak_lr": self.peak_lr,
            "steps_per_epoch": self.steps_per_epoch,
            "best": self.best,
            "num_bad_epochs": self.num_bad_epochs,
            "reduction_epochs": list(self.reduction_epochs),
            "last_observed_epoch": self.last_observed_epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the plateau counters; refuses a checkpoint from a different schedule."""
        for key, ours in (
            ("name", self.cfg.name),
            ("peak_lr", self.peak_lr),
            ("steps_per_epoch", self.steps_per_epoch),
        ):
            if state[key] != ours:
                raise ConfigError(
                    f"the checkpoint's schedule has {key}={shown(state[key])} but this run has "
                    f"{shown(ours)}; resume with the same schedule, batch size and world size"
                )
        self.best = float(state["best"])
        self.num_bad_epochs = int(state["num_bad_epochs"])
        self.reduction_epochs = [int(e) for e in state["reduction_epochs"]]
        self.last_observed_epoch = int(state["last_observed_epoch"])
