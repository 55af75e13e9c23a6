"""SGD with momentum, learning-rate scaling rules and the weight-decay split.

Sources (docs/references.md#goyal-2017, #hal-lr-schedule, #sc20-presets, #ngc-bn-weight-decay,
#ngc-label-smoothing):
* linear scaling `lr = base * B / 256`: Goyal et al. 2017, "Accurate, Large Minibatch SGD";
  HAL (richardkxu/distributed-pytorch) uses it with base 0.1: 208 x 64 ranks -> 5.2.
* square-root scaling `0.1 * sqrt(B / 128)`: the NERSC SC20 tutorial presets
  (128 -> 0.1, 256 -> 0.14, 512 -> 0.2, 1024 -> 0.28, 2048 -> 0.4).
* no weight decay on normalisation parameters and biases (by module type), or on parameters
  whose name contains "bn" (NVIDIA DeepLearningExamples ConvNets without `--bn-weight-decay`),
  label smoothing (`--label-smoothing`).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.modules.batchnorm import _NormBase

from dlscale.config.sections import LR_SCALING_RULES, WEIGHT_DECAY_EXEMPTIONS, OptimConfig
from dlscale.errors import ConfigError, shown

# Modules whose parameters (affine scale and shift) never get weight decay when the
# exclusion is on. `_NormBase` covers every BatchNorm (incl. SyncBatchNorm, lazy ones)
# and InstanceNorm; SyncBatchNorm is listed anyway so the intent reads here.
NORM_MODULE_TYPES: tuple[type[nn.Module], ...] = (
    _NormBase,
    nn.SyncBatchNorm,
    nn.GroupNorm,
    nn.LayerNorm,
) + ((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ())


def images_per_step(per_rank_batch: int, world_size: int, accumulation_steps: int = 1) -> int:
    """Global batch seen by one optimizer step: the `global_batch` the LR rules expect."""
    return per_rank_batch * world_size * accumulation_steps


def scaled_lr(base_lr: float, global_batch: int, reference_batch: int, rule: str) -> float:
    """Learning rate for `global_batch` images per step, given `base_lr` for `reference_batch`.

    linear: `base * B / B_ref` (Goyal et al. 2017); HAL: 0.1 * 208 * 64 / 256 = 5.2.
    sqrt:   `base * sqrt(B / B_ref)`; with base 0.1 and B_ref 128 these are SC20's presets.
    """
    if global_batch < 1 or reference_batch < 1:
        raise ConfigError(
            f"global batch {global_batch} and reference batch {reference_batch} must be >= 1"
        )
    if rule == "none":
        return base_lr
    if rule == "linear":
        return base_lr * global_batch / reference_batch
    if rule == "sqrt":
        return base_lr * math.sqrt(global_batch / reference_batch)
    raise ConfigError(f"optim.lr_scaling={shown(rule)} is unknown; use one of {LR_SCALING_RULES}")


def param_groups(
    model: nn.Module, weight_decay: float, exclude_bn_and_bias: bool, exemption: str = "module_type"
) -> list[dict[str, object]]:
    """Split the trainable parameters into a decay group and a no-decay group.

    With the exclusion on, a parameter goes to no-decay when
    * exemption="module_type": its owning module is a normalisation layer (`NORM_MODULE_TYPES`)
      or it is that module's `bias` attribute. Module types, never names, decide, so a Linear
      weight named "bn_weight" still decays;
    * exemption="name_contains_bn": its name in `model.named_parameters()` contains "bn", NVIDIA
      ConvNets' `get_sgd_optimizer` with bn_weight_decay=False (docs/references.md#ngc-bn-weight-decay).
      With torchvision's names the stem's and the blocks' BNs match, the downsample BNs
      (`downsample.1`) and `fc.bias` do not: a ResNet-50 keeps decay on 9 tensors more.
    Each parameter lands in exactly one group (shared ones once, at their first owner, under
    their first name); frozen parameters are left out; empty groups are dropped.
    """
    if exemption not in WEIGHT_DECAY_EXEMPTIONS:
        raise ConfigError(f"optim.weight_decay_exemption={shown(exemption)}: use one of {WEIGHT_DECAY_EXEMPTIONS}")
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        is_norm = isinstance(module, NORM_MODULE_TYPES)
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            if exemption == "name_contains_bn":
                exempt = "bn" in (f"{module_name}.{name}" if module_name else name)
            else:
                exempt = is_norm or name == "bias"
            (no_decay if exclude_bn_and_bias and exempt else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def _sgd_implementation(model: nn.Module, fused: bool | None) -> dict[str, bool | None]:
    """Keyword arguments that pick torch's SGD kernel.

    None: torch's own choice (foreach on CUDA, a per-parameter loop on CPU).
    True: the fused kernel; torch 2.13 has it for cpu, cuda, mps, xpu, hpu and mtia
          with floating-point parameters. Elsewhere a ConfigError names foreach.
    False: the foreach (multi-tensor) kernel.
    """
    if fused is None:
        return {}
    if not fused:
        return {"foreach": True}
    supported = _fused_sgd_devices()
    for param in model.parameters():
        if param.device.type not in supported or not torch.is_floating_point(param):
            raise ConfigError(
                f"fused SGD is not available for {param.dtype} parameters on "
                f"{param.device.type} with torch {torch.__version__} (supported: "
                f"{sorted(supported)}); use fused=False (foreach) instead"
            )
    return {"fused": True}


def _fused_sgd_devices() -> set[str]:
    """Device types with a fused SGD kernel in this torch build."""
    try:  # private helper: the very list `torch.optim.SGD(fused=True)` checks against
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:  # older torch: fused SGD existed for CUDA only
        return {"cuda"}
    return set(_get_fused_kernels_supported_devices())


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, *, global_batch: int, fused: bool | None = None
) -> torch.optim.SGD:
    """SGD for `model` with the LR scaled to `global_batch` images per optimizer step.

    Build it after the model is on its device: the fused check looks at where the
    parameters are. Every group also records `initial_lr` (the scaled peak LR), the key
    torch's LR schedulers use for the same purpose.
    """
    lr = scaled_lr(cfg.lr, global_batch, cfg.reference_batch, cfg.lr_scaling)
    groups = param_groups(model, cfg.weight_decay, cfg.exclude_bn_and_bias_from_weight_decay,
                          cfg.weight_decay_exemption)
    if not groups:
        raise ConfigError("the model has no trainable parameters; unfreeze some layers")
    for group in groups:
        group["initial_lr"] = lr
    optimizer = torch.optim.SGD(
        groups,
        lr=lr,
        momentum=cfg.momentum,
        nesterov=cfg.nesterov,
        weight_decay=cfg.weight_decay,
        **_sgd_implementation(model, fused),
    )
    if optimizer.defaults.get("fused") and cfg.momentum:
        _zero_momentum_buffers(optimizer)
    return optimizer


def _zero_momentum_buffers(optimizer: torch.optim.SGD) -> None:
    """Fused SGD makes its momentum buffers with empty_like before its kernel runs, and the kernel
    returns at once when the fp16 loss scaler found inf gradients: a skipped first step (common:
    the scaler starts at 2**16) leaves uninitialised buffers that the next step reads (seen with
    torch 2.13 on the CPU; reported with 2.11 on CUDA, LibreYOLO/libreyolo#771). Zeros give stock
    SGD's first update (no dampening: momentum * 0 + grad) and survive a skipped step."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param)


def loss_fn(cfg: OptimConfig) -> nn.CrossEntropyLoss:
    """Cross-entropy with `cfg.label_smoothing`.

    torch's smoothing spreads `s` uniformly over all classes: `(1-s) * NLL + s * mean(-log p)`,
    the same loss as NVIDIA ConvNets' `LabelSmoothing(s)`.
    """
    return nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
