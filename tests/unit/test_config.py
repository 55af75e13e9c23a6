"""Presets against the published recipes, inheritance, overrides and derived values."""

import math

import pytest
import torch

from dlscale.config import load_config, load_presets, preset_files
from dlscale.errors import ConfigError
from dlscale.models import build_model
from dlscale.train.optim import build_optimizer
from dlscale.train.plan import make_plan
from dlscale.train.schedule import LRSchedule


@pytest.mark.parametrize("source", ["cifar100", "imagenet", "cpu"])
def test_every_shipped_preset_resolves(source):
    _, presets = load_presets(source)
    for name in presets:
        cfg, run_name = load_config(f"{source}:{name}")
        assert run_name == f"{source}-{name}"
        assert cfg.schedule.epochs > 0


# SC20 (docs/references.md#sc20-presets): global batch, published square-root-scaled LR, epochs, warm-up.
SC20 = [
    ("bs128", 128, 0.1, 100, 0), ("bs256", 256, 0.14, 100, 0), ("bs512-opt", 512, 0.2, 120, 0),
    ("bs1024-opt", 1024, 0.28, 120, 0), ("bs2048-opt", 2048, 0.4, 120, 0),
    ("bs1024-warmup-opt", 1024, 0.28, 120, 8), ("bs2048-warmup-opt", 2048, 0.4, 120, 16),
]


@pytest.mark.parametrize("preset,batch,lr,epochs,warmup", SC20)
def test_sc20_presets(preset, batch, lr, epochs, warmup):
    cfg, _ = load_config(f"cifar100:{preset}")
    assert (cfg.global_batch_size, cfg.optim.lr, cfg.schedule.epochs, cfg.schedule.warmup_epochs) == \
        (batch, lr, epochs, warmup)
    assert cfg.model.name == "resnet50_cifar" and cfg.optim.weight_decay == 5e-4
    assert cfg.schedule.name == "plateau" and cfg.schedule.plateau_factor == 0.2
    # The published values are 0.1 * sqrt(B / 128) rounded to two decimals.
    assert lr == pytest.approx(0.1 * math.sqrt(batch / 128), abs=0.005)


def test_sc20_optimisation_progression():
    amp, _ = load_config("cifar100:bs256-amp")
    nhwc, _ = load_config("cifar100:bs256-amp-nhwc")
    extra, _ = load_config("cifar100:bs256-amp-nhwc-extra-opts")
    assert amp.precision == "amp_fp16" and not amp.speed.channels_last
    assert nhwc.speed.channels_last and not nhwc.speed.fused_optimizer
    assert extra.speed.fused_optimizer and extra.speed.cudnn_benchmark and extra.speed.channels_last


def test_global_batch_is_split_over_ranks():
    cfg, _ = load_config("cifar100:bs1024-opt")
    plan = make_plan(cfg, 8, 50_000)
    assert (plan.per_rank_batch, plan.global_batch, plan.steps_per_epoch) == (128, 1024, 48)
    with pytest.raises(ConfigError, match="not divisible by 3 ranks"):
        make_plan(cfg, 3, 50_000)


def test_hal_peak_lr_on_64_ranks_and_warmup():
    cfg, _ = load_config("imagenet:hal-rn50")
    plan = make_plan(cfg, 64, 1_281_167)
    assert plan.global_batch == 208 * 64
    assert plan.peak_lr == pytest.approx(5.2)  # 0.1 x 13312 / 256
    assert plan.warmup_steps == 5 * plan.steps_per_epoch
    schedule = LRSchedule(cfg.schedule, peak_lr=plan.peak_lr, steps_per_epoch=plan.steps_per_epoch)
    steps = plan.steps_per_epoch
    # HAL: lr * (1 + i + epoch * len_epoch) / (5 * len_epoch), i = 1 at the first iteration
    assert schedule.lr_at(0) == pytest.approx(5.2 * 2 / (5 * steps))
    assert schedule.lr_at(30 * steps) == pytest.approx(0.52)
    assert schedule.lr_at(80 * steps) == pytest.approx(0.0052)


def test_hal_preset_reproduces_hal_learning_rate_at_every_iteration():
    # HAL on 64 GPUs x 208: DistributedSampler without drop_last, so len(train_loader) =
    # ceil(ceil(1281167 / 64) / 208) = ceil(20019 / 208) = 97; adjust_learning_rate(epoch, i, 97)
    # with i = 1 .. 97: 5.2 * 0.1 ** (epoch // 30 + [epoch >= 80]), times (1 + i + epoch * 97) / 485
    # while epoch < 5 (richardkxu/distributed-pytorch@b2a3e175 imagenet_ddp_apex.py).
    cfg, _ = load_config("imagenet:hal-rn50", ["schedule.epochs=150"])
    plan = make_plan(cfg, 64, 1_281_167)
    assert plan.steps_per_epoch == 97
    schedule = LRSchedule(cfg.schedule, peak_lr=plan.peak_lr, steps_per_epoch=97)
    for step in range(150 * 97):
        epoch, i = step // 97, step % 97 + 1
        factor = epoch // 30 + (1 if epoch >= 80 else 0)
        lr = 5.2 * 0.1**factor
        if epoch < 5:
            lr = lr * (1 + i + epoch * 97) / (5 * 97)
        assert schedule.lr_at(step) == pytest.approx(lr, rel=1e-12), step
    dropped, _ = load_config("imagenet:hal-rn50", ["data.drop_last=true"])
    assert make_plan(dropped, 64, 1_281_167).steps_per_epoch == 96  # 1281167 // 13312


def test_partial_batches_refuse_gradient_accumulation():
    cfg, _ = load_config("imagenet:hal-rn50", ["optim.accumulation_steps=2"])
    with pytest.raises(ConfigError, match="accumulation_steps=1 or data.drop_last=true"):
        make_plan(cfg, 64, 1_281_167)


def test_ngc_presets():
    amp, _ = load_config("imagenet:ngc-rn50-amp")
    tf32, _ = load_config("imagenet:ngc-rn50-tf32")
    plan = make_plan(amp, 8, 1_281_167)
    assert plan.peak_lr == pytest.approx(2.048)  # NVIDIA's 2k configuration
    assert amp.optim.label_smoothing == 0.1 and amp.optim.exclude_bn_and_bias_from_weight_decay
    assert amp.schedule.name == "cosine" and amp.schedule.warmup_epochs == 8
    assert (amp.precision, tf32.precision, tf32.speed.channels_last) == ("amp_fp16", "tf32", False)
    schedule = LRSchedule(amp.schedule, peak_lr=plan.peak_lr, steps_per_epoch=plan.steps_per_epoch)
    e = 50  # NVIDIA: end_lr + 0.5 (1 + cos(pi (e - W) / (E - W))) (base - end_lr), once per epoch
    for step in (e * plan.steps_per_epoch, (e + 1) * plan.steps_per_epoch - 1):
        assert schedule.lr_at(step) == pytest.approx(0.5 * (1 + math.cos(math.pi * (e - 8) / (90 - 8))) * 2.048)
    assert amp.optim.weight_decay_exemption == "name_contains_bn"  # NVIDIA: "bn" in the name
    with torch.device("meta"):
        model = build_model("resnet50")
    optimizer = build_optimizer(model, amp.optim, global_batch=plan.global_batch)
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay = {names[id(p)] for g in optimizer.param_groups if g["weight_decay"] == 0 for p in g["params"]}
    assert no_decay == {n for n in names.values() if "bn" in n} and len(no_decay) == 98  # 49 BNs named bn*


def test_sc20_epoch_warmup():
    cfg, _ = load_config("cifar100:bs1024-warmup-opt")
    plan = make_plan(cfg, 8, 50_000)
    schedule = LRSchedule(cfg.schedule, peak_lr=plan.peak_lr, steps_per_epoch=plan.steps_per_epoch)
    for epoch in range(8):  # SC20: lr = base * (epoch + 1) / warmup_epochs
        assert schedule.lr_at(epoch * plan.steps_per_epoch + 3) == pytest.approx(0.28 * (epoch + 1) / 8)


def test_overrides_and_errors(tmp_path):
    cfg, _ = load_config("cpu:digits", ["optim.lr=0.3", "schedule.milestones=[2, 4]", "speed.channels_last=true"])
    assert cfg.optim.lr == 0.3 and cfg.schedule.milestones == (2, 4) and cfg.speed.channels_last
    with pytest.raises(ConfigError, match="unknown preset 'nope'.*known: default, digits, synthetic"):
        load_config("cpu:nope")
    with pytest.raises(ConfigError, match=r"unknown key optim.lrr: did you mean optim.lr\? optim has: .*lr"):
        load_config("cpu:digits", ["optim.lrr=1"])
    with pytest.raises(ConfigError, match=r"unknown key epochs: did you mean schedule.epochs\? top level has: "):
        load_config("cpu:digits", ["epochs=3"])
    with pytest.raises(ConfigError, match=r"unknown key model.seed: did you mean data.seed or seed\?"):
        load_config("cpu:digits", ["model.seed=3"])
    with pytest.raises(ConfigError, match=r"unknown key optim.zzz; optim has: "):  # nothing close: no guess
        load_config("cpu:digits", ["optim.zzz=3"])
    with pytest.raises(ConfigError, match="optim.lr must be a number"):
        load_config("cpu:digits", ["optim.lr=fast"])
    with pytest.raises(ConfigError, match="precision='fp8' is not one of"):
        load_config("cpu:digits", ["precision=fp8"])
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        load_config("cpu:digits", ["optim.lr"])
    with pytest.raises(ConfigError, match="no preset file"):
        load_config("missing.yaml:x")
    own = tmp_path / "mine.yaml"
    own.write_text("default:\n  global_batch_size: 32\nfast:\n  base: slow\n  log_every: 1\n"
                   "slow:\n  schedule: {epochs: 3}\nloop:\n  base: loop\n")
    cfg, name = load_config(f"{own}:fast")
    assert (cfg.global_batch_size, cfg.schedule.epochs, cfg.log_every, name) == (32, 3, 1, "mine-fast")
    with pytest.raises(ConfigError, match="inherits from itself"):
        load_config(f"{own}:loop")
    assert set(preset_files()) == {"cifar100", "imagenet", "cpu"}
