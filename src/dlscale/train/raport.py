"""NVIDIA ConvNets' PARAMETER record for a dlscale run: its argument names with this run's values.

ConvNets logs `args.__dict__` (main.py's argparse flags plus `distributed`, `local_rank`, `gpu`,
`world_size`) and `model.<flag>` of its model parser as PARAMETER records of the `--raport-file`
(NVIDIA/DeepLearningExamples@729963dd PyTorch/Classification/ConvNets/main.py,
image_classification/models/resnet.py; docs/references.md#dllogger-format). Readers of those files
take values from there, e.g. NCF's `get_training_data` reads `batch_size`. dlscale writes the
same names in one PARAMETER record, beside its own keys; one record and not two because NCF's
reader looks up `batch_size` in every PARAMETER record it finds. Flags that dlscale has no
counterpart for carry ConvNets' default (e.g. `mixup` 0.0, `jit` "no").

Values keep the JSON types ConvNets' own record has: `warmup` is an int (`type=int`); `end_lr` and
`static_loss_scale` are floats when given on the command line but ints when they come from their
defaults (`default=0`, `default=1`) or from configs.yml through launch.py's `set_defaults` (the NGC
recipe's `static_loss_scale: 128`, `warmup: 8`), so a whole number is written as an int.
"""

from __future__ import annotations

from pathlib import Path

from dlscale.config.sections import TrainConfig
from dlscale.data import DatasetInfo
from dlscale.distributed import DistEnv
from dlscale.train.plan import Plan

CHECKPOINT_FILENAME = "checkpoint-<step>.pt"
"""How dlscale names its checkpoints in the run directory (train/checkpoint.py: checkpoint-<step, 9 digits>.pt),
for ConvNets' `checkpoint_filename` (its default "checkpoint.pth.tar")."""


def whole(value: float) -> int | float:
    """A whole number as an int (as ConvNets' record holds its int defaults and configs.yml's values), else as is."""
    return int(value) if float(value).is_integer() else value


def convnets_parameters(cfg: TrainConfig, plan: Plan, env: DistEnv, info: DatasetInfo, *,
                        raport_file: str | None, workspace: Path, loss_scale: float) -> dict:
    """ConvNets' argument names -> this run's values. `batch_size` is per GPU and `lr` the peak
    learning rate for the global batch, as ConvNets' flags mean them; `loss_scale` is the GradScaler's
    scale at the start (ConvNets' `--static-loss-scale`, the scaler's init_scale)."""
    return {**_data_arguments(cfg, info), **_optim_arguments(cfg, plan),
            **_run_arguments(cfg, env, raport_file, workspace, loss_scale), **_model_arguments(cfg, info)}


def _data_arguments(cfg: TrainConfig, info: DatasetInfo) -> dict:
    return {
        "data": cfg.data.path,
        "data_backend": "synthetic" if cfg.data.name == "synthetic" else "pytorch",
        "interpolation": "bilinear",
        "workers": cfg.data.num_workers,
        "prefetch": cfg.data.prefetch_factor,
        "image_size": info.image_size,
        "augmentation": None,
    }


def _optim_arguments(cfg: TrainConfig, plan: Plan) -> dict:
    optim, schedule = cfg.optim, cfg.schedule
    return {
        "epochs": plan.epochs,
        "run_epochs": -1,
        "early_stopping_patience": -1,
        "batch_size": plan.per_rank_batch,
        "optimizer_batch_size": plan.global_batch if plan.accumulation_steps > 1 else -1,
        "lr": plan.peak_lr,
        "lr_schedule": schedule.name,
        "end_lr": whole(schedule.end_lr),
        "warmup": whole(schedule.warmup_epochs),
        "label_smoothing": optim.label_smoothing,
        "mixup": 0.0,
        "optimizer": "sgd",
        "momentum": optim.momentum,
        "weight_decay": optim.weight_decay,
        "bn_weight_decay": not optim.exclude_bn_and_bias_from_weight_decay,
        "rmsprop_alpha": 0.9,
        "rmsprop_eps": 1e-3,
        "nesterov": optim.nesterov,
        "use_ema": None,
    }


def _run_arguments(cfg: TrainConfig, env: DistEnv, raport_file: str | None, workspace: Path,
                   loss_scale: float) -> dict:
    return {
        "print_freq": cfg.log_every,
        "resume": None,
        "static_loss_scale": whole(loss_scale),
        "prof": cfg.max_steps_per_epoch if cfg.max_steps_per_epoch is not None else -1,
        "amp": cfg.precision.startswith("amp"),
        "seed": cfg.seed,
        "gather_checkpoints": cfg.checkpoint.keep_last,
        "raport_file": raport_file,
        "evaluate": False,
        "training_only": False,
        "save_checkpoints": cfg.checkpoint.enabled,
        "checkpoint_filename": CHECKPOINT_FILENAME,
        "jit": "no",
        "workspace": str(workspace),
        "memory_format": "nhwc" if cfg.speed.channels_last else "nchw",
        "gpu_affinity": "none",
        "topk": 5,
        "distributed": env.world_size > 1,
        "local_rank": env.local_rank,
        "gpu": env.local_rank,
        "world_size": env.world_size,
    }


def _model_arguments(cfg: TrainConfig, info: DatasetInfo) -> dict:
    return {
        "arch": cfg.model.name,
        "model.num_classes": info.num_classes,
        "model.last_bn_0_init": cfg.model.zero_init_residual,
        "model.conv_init": cfg.model.conv_init,
        "model.trt": False,
        "model.fused_se": True,
        "model.pretrained_from_file": None,
        "model.pretrained": False,
    }
