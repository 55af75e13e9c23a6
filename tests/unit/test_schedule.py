"""LR schedules against the reference formulas (docs/references.md#hal-lr-schedule, #sc20-lr-schedule,
#ngc-lr-schedule)."""

import copy

import numpy as np
import pytest
import torch

from dlscale.config import ScheduleConfig
from dlscale.errors import ConfigError
from dlscale.train.optim import scaled_lr
from dlscale.train.schedule import LRSchedule

HAL_PEAK = 5.2  # 0.1 * 208 * 64 / 256


def hal_lr(peak, epoch, step, len_epoch):
    """HAL imagenet_ddp_apex.py adjust_learning_rate, written out independently. `step` is HAL's
    `i`, which its train loop increments before the call: 1 .. len_epoch."""
    factor = epoch // 30
    if epoch >= 80:
        factor += 1
    lr = peak * (0.1**factor)
    if epoch < 5:
        lr = lr * float(1 + step + epoch * len_epoch) / (5.0 * len_epoch)
    return lr


def nvidia_lr(base, epoch, warmup, epochs, kind, end_lr=0.0):
    """NVIDIA ConvNets lr_cosine_policy / lr_linear_policy per epoch."""
    if epoch < warmup:
        return base * (epoch + 1) / warmup
    e, es = epoch - warmup, epochs - warmup
    if kind == "cosine":
        return end_lr + (0.5 * (1 + np.cos(np.pi * e / es)) * (base - end_lr))
    return base * (1 - (e / es))


def hal_schedule(steps_per_epoch, epochs=90):
    cfg = ScheduleConfig(name="step", epochs=epochs, warmup_epochs=5, warmup_per="iteration",
                         warmup_step_offset=2, milestone_every=30)
    peak = scaled_lr(0.1, 208 * 64, 256, "linear")
    return LRSchedule(cfg, peak_lr=peak, steps_per_epoch=steps_per_epoch)


def test_default_per_iteration_warmup_and_step_decay():
    spe = 96
    cfg = ScheduleConfig(name="step", epochs=90, warmup_epochs=5, warmup_per="iteration")
    sched = LRSchedule(cfg, peak_lr=HAL_PEAK, steps_per_epoch=spe)
    for step in (0, 1, 95, 96, 250, 479):  # offset 1: the peak on the last warm-up step
        assert sched.lr_at(step) == pytest.approx(HAL_PEAK * (1 + step) / (5 * spe), rel=1e-12)
    assert sched.lr_at(479) == pytest.approx(5.2)
    assert sched.lr_at(5 * spe) == pytest.approx(5.2)
    assert sched.lr_at(30 * spe - 1) == pytest.approx(5.2)
    assert sched.lr_at(30 * spe) == pytest.approx(0.52)
    assert sched.lr_at(60 * spe) == pytest.approx(0.052)
    assert sched.lr_at(80 * spe) == pytest.approx(0.0052)
    assert sched.lr_at(90 * spe - 1) == pytest.approx(0.0052)
    assert sched.lr_at(150 * spe) == pytest.approx(0.0052)  # no decay after the last milestone


def test_hal_learning_rate_by_hand_at_97_steps_per_epoch():
    # 64 GPUs x 208: a DistributedSampler without drop_last gives ceil(ceil(1281167 / 64) / 208) = 97
    # steps. HAL: lr = 5.2 * 0.1 ** (epoch // 30 + [epoch >= 80]) * (1 + i + epoch * 97) / 485 while
    # epoch < 5, with i = 1 .. 97 the iteration inside the epoch.
    sched = hal_schedule(97, epochs=200)
    by_hand = {
        0: 5.2 * 2 / 485,  # epoch 0, i = 1
        96: 5.2 * 98 / 485,  # epoch 0, i = 97
        97: 5.2 * 99 / 485,  # epoch 1, i = 1
        484: 5.2 * 486 / 485,  # epoch 4, i = 97: just above the peak
        485: 5.2,  # epoch 5
        30 * 97 - 1: 5.2,
        30 * 97: 0.52,
        60 * 97: 0.052,
        80 * 97: 0.0052,
        90 * 97 - 1: 0.0052,
        90 * 97: 0.00052,  # 90 // 30 + 1 = 4
        120 * 97: 0.000052,
        150 * 97: 0.0000052,
    }
    for step, lr in by_hand.items():
        assert sched.lr_at(step) == pytest.approx(lr, rel=1e-12), step


def test_hal_every_step_matches_the_reference_code():
    spe = 7
    sched = hal_schedule(spe, epochs=130)
    for step in range(130 * spe):
        epoch, i = divmod(step, spe)
        assert sched.lr_at(step) == pytest.approx(hal_lr(HAL_PEAK, epoch, i + 1, spe), rel=1e-12)


def test_nvidia_cosine_at_epoch_boundaries_is_exact():
    spe = 10
    cfg = ScheduleConfig(name="cosine", epochs=90, warmup_epochs=8, warmup_per="epoch", end_lr=0.0)
    peak = scaled_lr(0.256, 256, 256, "linear")
    sched = LRSchedule(cfg, peak_lr=peak, steps_per_epoch=spe)
    for epoch in (0, 3, 7, 8, 9, 30, 45, 70, 89):
        assert sched.lr_at(epoch * spe) == nvidia_lr(0.256, epoch, 8, 90, "cosine")
    assert sched.lr_at(8 * spe) == 0.256
    assert sched.lr_at(3 * spe + 9) == 0.256 * 4 / 8  # per-epoch warm-up: flat in the epoch
    # after warm-up the cosine moves every iteration, between the epoch-boundary values
    assert sched.lr_at(20 * spe) > sched.lr_at(20 * spe + 5) > sched.lr_at(21 * spe)
    assert sched.lr_at(90 * spe) == pytest.approx(0.0, abs=1e-15)
    assert sched.lr_at(95 * spe) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("kind", ["cosine", "linear"])
def test_nvidia_policies_per_epoch_at_every_iteration(kind):
    spe = 10
    cfg = ScheduleConfig(name=kind, epochs=90, warmup_epochs=8, warmup_per="epoch", anneal_per="epoch")
    sched = LRSchedule(cfg, peak_lr=2.048, steps_per_epoch=spe)
    for step in range(90 * spe):
        assert sched.lr_at(step) == pytest.approx(nvidia_lr(2.048, step // spe, 8, 90, kind), rel=1e-12), step
    assert sched.lr_at(20 * spe + 5) == sched.lr_at(20 * spe)  # constant within the epoch


def test_cosine_with_end_lr_and_linear_decay():
    spe = 4
    cos = LRSchedule(
        ScheduleConfig(name="cosine", epochs=20, warmup_epochs=2, warmup_per="epoch", end_lr=0.01),
        peak_lr=1.0,
        steps_per_epoch=spe,
    )
    lin = LRSchedule(
        ScheduleConfig(name="linear", epochs=20, warmup_epochs=2, warmup_per="epoch"),
        peak_lr=1.0,
        steps_per_epoch=spe,
    )
    for epoch in range(20):
        assert cos.lr_at(epoch * spe) == nvidia_lr(1.0, epoch, 2, 20, "cosine", end_lr=0.01)
        assert lin.lr_at(epoch * spe) == pytest.approx(nvidia_lr(1.0, epoch, 2, 20, "linear"))
    assert cos.lr_at(20 * spe) == pytest.approx(0.01)


def test_sc20_per_epoch_warmup():
    spe = 5
    base = 0.28  # bs1024-warmup-opt: lr 0.28, 8 warm-up epochs
    cfg = ScheduleConfig(name="plateau", epochs=120, warmup_epochs=8, warmup_per="epoch")
    sched = LRSchedule(cfg, peak_lr=base, steps_per_epoch=spe)
    for epoch in range(8):
        for i in (0, spe - 1):
            assert sched.lr_at(epoch * spe + i) == pytest.approx(base * (epoch + 1) / 8)
    assert sched.lr_at(8 * spe) == pytest.approx(base)


def test_plateau_reduces_by_0_2_after_patience_plus_one_bad_epochs():
    cfg = ScheduleConfig(name="plateau", epochs=100, plateau_patience=10)
    sched = LRSchedule(cfg, peak_lr=0.1, steps_per_epoch=3)
    assert not sched.observe(1.0, epoch=0)  # new best
    for epoch in range(1, 11):  # 10 bad epochs: within patience
        assert not sched.observe(1.0, epoch=epoch)
        assert sched.lr_at((epoch + 1) * 3) == pytest.approx(0.1)
    assert sched.observe(1.0, epoch=11)  # the 11th bad epoch
    assert sched.lr_at(11 * 3) == pytest.approx(0.1)  # epoch 11 itself ran at the old LR
    assert sched.lr_at(12 * 3) == pytest.approx(0.02)


def sc20_losses():
    rng = np.random.default_rng(0)
    improving = list(np.linspace(3.0, 1.5, 15))
    flat = [1.5 + 0.01 * rng.random() for _ in range(30)]
    return improving + flat + [1.0] + [1.2] * 20


def test_plateau_matches_torch_reduce_lr_on_plateau_after_warmup():
    # SC20 train.py: per-epoch warm-up, then `scheduler.step(val_loss)` when epoch >= W.
    warmup, spe, base = 4, 2, 0.2
    cfg = ScheduleConfig(name="plateau", epochs=80, warmup_epochs=warmup, warmup_per="epoch")
    ours = LRSchedule(cfg, peak_lr=base, steps_per_epoch=spe)
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=base)
    torch_sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, factor=0.2, patience=10, mode="min"
    )
    reductions = 0
    for epoch, loss in enumerate(sc20_losses()):
        if epoch < warmup:
            optimizer.param_groups[0]["lr"] = base * (epoch + 1) / warmup
        assert ours.lr_at(epoch * spe) == pytest.approx(optimizer.param_groups[0]["lr"], rel=1e-12)
        if epoch >= warmup:
            torch_sched.step(loss)
        reductions += ours.observe(loss, epoch=epoch)
    assert reductions >= 2  # the comparison covered several reductions


def _run(sched, optimizer, steps, spe, losses, start=0):
    lrs = []
    for step in range(start, steps):
        lrs.append(sched.apply(step))
        assert optimizer.param_groups[0]["lr"] == lrs[-1]
        if (step + 1) % spe == 0:
            epoch = step // spe
            sched.observe(losses[epoch], epoch=epoch)
    return lrs


@pytest.mark.parametrize(
    "cfg",
    [
        ScheduleConfig(name="step", epochs=12, warmup_epochs=2, milestones=(5, 9)),
        ScheduleConfig(name="cosine", epochs=12, warmup_epochs=2.5, end_lr=0.001),
        ScheduleConfig(name="linear", epochs=12, warmup_epochs=2, warmup_per="epoch"),
        ScheduleConfig(name="constant", epochs=12),
        ScheduleConfig(name="plateau", epochs=40, warmup_epochs=1, plateau_patience=2),
    ],
    ids=lambda c: c.name,
)
def test_resumed_schedule_continues_exactly(cfg, tmp_path):
    spe = 3
    steps = cfg.epochs * spe
    losses = sc20_losses()

    def fresh():
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
        return LRSchedule(cfg, peak_lr=0.4, steps_per_epoch=spe, optimizer=optimizer), optimizer

    sched, optimizer = fresh()
    uninterrupted = _run(sched, optimizer, steps, spe, losses)

    k = steps // 2 + 1  # stop mid-epoch, inside a plateau's bad-epoch streak
    first, optimizer = fresh()
    head = _run(first, optimizer, k, spe, losses)
    torch.save(copy.deepcopy(first.state_dict()), tmp_path / "s.pt")
    resumed, optimizer = fresh()
    resumed.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    tail = _run(resumed, optimizer, steps, spe, losses, start=k)
    assert head + tail == uninterrupted
    if cfg.name == "plateau":
        assert first.state_dict()["num_bad_epochs"] > 0 and sched.reduction_epochs
        assert resumed.reduction_epochs == sched.reduction_epochs


def test_load_state_dict_refuses_another_schedule():
    cfg = ScheduleConfig(name="cosine", epochs=10)
    state = LRSchedule(cfg, peak_lr=0.1, steps_per_epoch=10).state_dict()
    with pytest.raises(ConfigError, match="steps_per_epoch"):
        LRSchedule(cfg, peak_lr=0.1, steps_per_epoch=20).load_state_dict(state)


def test_lr_at_is_pure_and_apply_sets_every_group():
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([{"params": [a]}, {"params": [b], "weight_decay": 0.0}], lr=9.0)
    sched = LRSchedule(
        ScheduleConfig(name="step", epochs=90), peak_lr=0.1, steps_per_epoch=2, optimizer=optimizer
    )
    values = [sched.lr_at(s) for s in range(200)]
    assert [g["lr"] for g in optimizer.param_groups] == [9.0, 9.0]
    assert [sched.lr_at(s) for s in range(200)] == values
    assert sched.apply(61) == pytest.approx(0.01)
    assert [g["lr"] for g in optimizer.param_groups] == [sched.lr_at(61)] * 2


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "exp"},
        {"warmup_epochs": 2.5, "warmup_per": "epoch"},
        {"name": "cosine", "epochs": 5, "warmup_epochs": 5},
        {"name": "step", "milestones": (60, 30)},
        {"name": "step", "warmup_epochs": 5, "milestones": (3, 30)},
        {"name": "plateau", "plateau_factor": 1.0},
        {"warmup_step_offset": -1},
        {"anneal_per": "step"},
        {"name": "step", "milestone_every": -30},
    ],
)
def test_config_errors(bad):
    with pytest.raises(ConfigError):
        ScheduleConfig(**bad)


def test_zero_steps_per_epoch_is_a_config_error():
    with pytest.raises(ConfigError, match="batch size"):
        LRSchedule(ScheduleConfig(), peak_lr=0.1, steps_per_epoch=0)
