"""Optimizer, LR scaling rules, weight-decay split and loss."""

import dataclasses
import math

import pytest
import torch
from torch import nn

from dlscale.config import OptimConfig
from dlscale.errors import ConfigError
from dlscale.models import build_model
from dlscale.train.optim import (
    build_optimizer,
    images_per_step,
    loss_fn,
    param_groups,
    scaled_lr,
)


def test_hal_linear_scaling_gives_5_2():
    # HAL: 208 images per GPU x 64 GPUs, 0.1 per 256 -> 5.2 (docs/references.md#hal-lr-schedule).
    global_batch = images_per_step(208, 64)
    assert global_batch == 13312
    assert scaled_lr(0.1, global_batch, 256, "linear") == pytest.approx(5.2, rel=1e-12)


def test_sc20_sqrt_presets():
    # SC20 presets: 0.1 * sqrt(B / 128) -> 128: 0.1, 256: 0.14, 512: 0.2, 1024: 0.28, 2048: 0.4.
    expected = {128: 0.1, 256: 0.1414, 512: 0.2, 1024: 0.2828, 2048: 0.4}
    for batch, lr in expected.items():
        assert scaled_lr(0.1, batch, 128, "sqrt") == pytest.approx(lr, abs=1e-4)


def test_no_scaling_and_unknown_rule():
    assert scaled_lr(0.3, 4096, 256, "none") == 0.3
    with pytest.raises(ConfigError, match="lr_scaling"):
        scaled_lr(0.1, 512, 256, "cubic")


def test_config_is_frozen_keyword_only_and_validated():
    cfg = OptimConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        OptimConfig(0.1)  # type: ignore[misc]
    for bad in (
        {"lr": 0.0},
        {"lr_scaling": "log"},
        {"label_smoothing": 1.0},
        {"accumulation_steps": 0},
        {"momentum": 0.0, "nesterov": True},
        {"weight_decay_exemption": "bias_only"},
    ):
        with pytest.raises(ConfigError):
            OptimConfig(**bad)


class Gate(nn.Module):
    """Not a norm layer, although its parameter name says "bn"."""

    def __init__(self) -> None:
        super().__init__()
        self.bn_weight = nn.Parameter(torch.ones(3))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=True)
        self.bn1 = nn.BatchNorm2d(4)
        self.gn = nn.GroupNorm(2, 4)
        self.ln = nn.LayerNorm(4)
        self.sync = nn.SyncBatchNorm(4)
        self.bn = nn.Linear(4, 3)  # a Linear named "bn": its weight decays
        self.fc = nn.Linear(3, 2)
        self.gate = Gate()


def _ids(params):
    return {id(p) for p in params}


def test_param_groups_split_by_module_type_not_name():
    model = Net()
    decay, no_decay = param_groups(model, 1e-4, exclude_bn_and_bias=True)
    assert decay["weight_decay"] == 1e-4 and no_decay["weight_decay"] == 0.0
    expected_decay = _ids(
        [model.conv.weight, model.bn.weight, model.fc.weight, model.gate.bn_weight]
    )
    norms = [model.bn1, model.gn, model.ln, model.sync]
    expected_no_decay = _ids(
        [p for m in norms for p in m.parameters()] + [model.conv.bias, model.bn.bias, model.fc.bias]
    )
    assert _ids(decay["params"]) == expected_decay
    assert _ids(no_decay["params"]) == expected_no_decay
    total = len(list(model.parameters()))
    assert len(decay["params"]) + len(no_decay["params"]) == total == 4 + 8 + 3


def test_param_groups_without_exclusion_is_one_group():
    model = Net()
    (group,) = param_groups(model, 5e-4, exclude_bn_and_bias=False)
    assert group["weight_decay"] == 5e-4
    assert _ids(group["params"]) == _ids(model.parameters())


def test_param_groups_shared_and_frozen_parameters():
    model = Net()
    model.fc2 = nn.Linear(3, 2)
    model.fc2.weight = model.fc.weight  # shared: must appear once
    model.conv.weight.requires_grad_(False)  # frozen: left out
    groups = param_groups(model, 1e-4, exclude_bn_and_bias=True)
    listed = [id(p) for g in groups for p in g["params"]]
    assert len(listed) == len(set(listed))
    assert id(model.conv.weight) not in listed
    assert id(model.fc.weight) in listed


def _decay_names(model, exemption):
    decay, no_decay = param_groups(model, 1e-4, exclude_bn_and_bias=True, exemption=exemption)
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)] for p in decay["params"]}, {names[id(p)] for p in no_decay["params"]}


def test_nvidia_rule_exempts_names_containing_bn_on_resnet50():
    # NVIDIA ConvNets get_sgd_optimizer, bn_weight_decay=False: wd 0 where "bn" in the name
    # (docs/references.md#ngc-bn-weight-decay). ResNet-50 with torchvision's names: 161 tensors
    # (53 convs, 53 BNs x 2, fc weight and bias); the stem BN and 16 blocks x 3 BNs are named bn*,
    # so 49 x 2 = 98 are exempt; the 4 downsample BNs (downsample.1) and fc.bias are not.
    with torch.device("meta"):
        model = build_model("resnet50")
    decay, exempt = _decay_names(model, "name_contains_bn")
    assert (len(decay), len(exempt)) == (63, 98)
    by_type_decay, by_type_exempt = _decay_names(model, "module_type")
    assert (len(by_type_decay), len(by_type_exempt)) == (54, 107)  # every BN and every bias
    downsample_bns = {f"layer{i}.0.downsample.1.{p}" for i in range(1, 5) for p in ("weight", "bias")}
    assert decay - by_type_decay == downsample_bns | {"fc.bias"}  # the 9 tensors more with decay
    assert "bn1.weight" in exempt and "layer3.5.bn3.bias" in exempt


def test_nvidia_rule_goes_by_name_not_type():
    model = Net()  # Net.gate.bn_weight is a plain parameter whose name contains "bn"
    decay, exempt = _decay_names(model, "name_contains_bn")
    assert exempt == {"bn.weight", "bn.bias", "bn1.weight", "bn1.bias", "gate.bn_weight"}
    assert "gn.weight" in decay and "conv.bias" in decay


def test_excluded_parameters_really_get_no_decay():
    # With zero gradients, SGD moves a parameter only through its weight decay term.
    model = Net()
    cfg = OptimConfig(
        lr=1.0, momentum=0.0, weight_decay=0.1, exclude_bn_and_bias_from_weight_decay=True
    )
    optimizer = build_optimizer(model, cfg, global_batch=256)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert moved == {"conv.weight", "bn.weight", "fc.weight", "gate.bn_weight"}


def test_build_optimizer_scales_lr_and_sets_hyperparameters():
    cfg = OptimConfig(
        lr=0.1, lr_scaling="linear", nesterov=True, exclude_bn_and_bias_from_weight_decay=True
    )
    optimizer = build_optimizer(Net(), cfg, global_batch=208 * 64)
    assert isinstance(optimizer, torch.optim.SGD)
    assert len(optimizer.param_groups) == 2
    for group in optimizer.param_groups:
        assert group["lr"] == pytest.approx(5.2)
        assert group["initial_lr"] == group["lr"]
        assert group["momentum"] == 0.9 and group["nesterov"] is True


def _train_three_steps(fused):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    cfg = OptimConfig(lr=0.5, nesterov=True, exclude_bn_and_bias_from_weight_decay=True)
    optimizer = build_optimizer(model, cfg, global_batch=256, fused=fused)
    data = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        model(data).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return optimizer, torch.cat([p.detach().flatten() for p in model.parameters()])


def test_fused_and_foreach_match_the_plain_loop_on_cpu():
    # torch 2.13 has a fused SGD kernel for CPU; foreach runs on CPU through a fallback.
    loop_opt, loop = _train_three_steps(None)
    fused_opt, fused = _train_three_steps(True)
    foreach_opt, foreach = _train_three_steps(False)
    assert all(g["fused"] for g in fused_opt.param_groups)
    assert all(g["foreach"] for g in foreach_opt.param_groups)
    torch.testing.assert_close(fused, loop)
    torch.testing.assert_close(foreach, loop)


def _train_after_a_skipped_first_step(fused):
    """An fp16-style run whose first step overflows (the loss scaler skips it), then three steps.
    Before each optimizer step, freed NaN-filled blocks of the parameters' sizes make memory that
    the step would take uninitialised read as NaN."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = build_optimizer(model, OptimConfig(lr=0.1), global_batch=256, fused=fused)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    data = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    for step in range(4):
        loss = model(data).square().mean() * (float("inf") if step == 0 else 1.0)
        scaler.scale(loss).backward()
        junk = [torch.full_like(p, float("nan")) for p in model.parameters()]
        del junk
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    return torch.cat([p.detach().flatten() for p in model.parameters()]), scaler.get_scale()


def test_a_skipped_first_step_leaves_fused_sgd_equal_to_the_plain_loop():
    loop, loop_scale = _train_after_a_skipped_first_step(None)
    fused, fused_scale = _train_after_a_skipped_first_step(True)
    assert loop_scale == fused_scale == 2.0**15  # the first step was skipped, the others were not
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, loop)


def test_fused_where_unsupported_names_the_alternative():
    model = nn.Linear(2, 2, device="meta")
    with pytest.raises(ConfigError, match="fused=False"):
        build_optimizer(model, OptimConfig(), global_batch=256, fused=True)


def test_label_smoothing_matches_its_definition():
    s = 0.1
    logits = torch.randn(5, 7, generator=torch.Generator().manual_seed(2))
    target = torch.tensor([0, 3, 6, 2, 2])
    log_p = logits.log_softmax(dim=1)
    nll = -log_p[torch.arange(5), target].mean()
    uniform = -log_p.mean(dim=1).mean()
    expected = (1 - s) * nll + s * uniform  # NVIDIA ConvNets LabelSmoothing
    got = loss_fn(OptimConfig(label_smoothing=s))(logits, target)
    assert math.isclose(got.item(), expected.item(), rel_tol=1e-6)
    assert loss_fn(OptimConfig())(logits, target).item() == pytest.approx(nll.item(), rel=1e-6)
