"""Every section of a run's configuration: frozen dataclasses, a docstring under each field,
their checks in __post_init__ (a bad value is a ConfigError naming the key, at construction).

    TrainConfig                    what `dlscale train` runs (a preset plus --set overrides)
      model: ModelConfig           which network
      data: DataConfig             which data set and how it is fed (config/data.py)
      optim: OptimConfig           SGD, learning-rate scaling, weight decay, label smoothing
      schedule: ScheduleConfig     warm-up and the shape of the learning rate over training
      strategy: StrategyConfig     how replicas synchronise (DDP or neighbour averaging)
      checkpoint: CheckpointConfig when checkpoints are written and how many are kept
      speed: SpeedOptions          channels_last, cuDNN autotuning, fused SGD, compile (dlscale.speed)
    BenchConfig                    what `dlscale bench` runs (synthetic data)

`dlscale config FILE:PRESET` prints a resolved TrainConfig; presets.py reads the preset files.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

from dlscale.config.bounds import (
    BATCH_MAX,
    GLOBAL_BATCH_MAX,
    IMAGE_SIDE_MAX,
    IMAGE_SIDE_MIN,
    SEED_MAX,
    TIMEOUT_MAX_S,
    WIDTH_MAX,
    check,
)
from dlscale.config.data import DataConfig
from dlscale.errors import ConfigError, shown
from dlscale.speed import SpeedOptions

PrecisionName = Literal["fp32", "tf32", "amp_fp16", "amp_bf16"]
PRECISIONS: tuple[str, ...] = typing.get_args(PrecisionName)
"""Numeric precisions, the one list: fp32 (IEEE, TF32 off), tf32 (fp32 with TF32 tensor cores),
and automatic mixed precision to fp16 (with loss scaling) or bf16 (dlscale.precision)."""

LrScaling = Literal["none", "linear", "sqrt"]
LR_SCALING_RULES: tuple[str, ...] = typing.get_args(LrScaling)
ScheduleName = Literal["constant", "step", "cosine", "linear", "plateau"]
SCHEDULE_NAMES: tuple[str, ...] = typing.get_args(ScheduleName)
WARMUP_UNITS = ("iteration", "epoch")
ANNEAL_UNITS = ("iteration", "epoch")
DYNAMIC_SCHEDULES = ("auto", "one_peer", "inner_outer_exp2", "inner_outer_ring")
DIST_OPTIMIZERS = ("allreduce", "gradient_allreduce", "neighbor_allreduce", "hierarchical_neighbor_allreduce")
"""The names of dlscale.strategies.STRATEGIES, here so that the CLI's parsers list them without torch."""
TOPOLOGY_NAMES = ("exp2", "ring", "mesh", "star", "full")
"""The names of dlscale.strategies.TOPOLOGIES (BlueFog's graphs), here for the same reason."""
WeightDecayExemption = Literal["module_type", "name_contains_bn"]
WEIGHT_DECAY_EXEMPTIONS: tuple[str, ...] = typing.get_args(WeightDecayExemption)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    name: str = "resnet50"
    """Model name from `dlscale models`."""
    width: int = 64
    """Base channel count; 64 is the standard ResNet."""
    zero_init_residual: bool = False
    """Zero the last BN gamma of every residual block (Goyal et al. 2017)."""
    norm: Literal["batch", "group"] = "batch"
    """BatchNorm, or GroupNorm (per sample: results do not depend on the split over ranks)."""
    conv_init: Literal["fan_out", "fan_in"] = "fan_out"
    """Kaiming-normal mode of the convolutions: "fan_out" as torchvision's ResNet, "fan_in" as NVIDIA ConvNets'
    (its default, models/common.py LayerBuilder; the ngc-rn50-* presets). They differ for every conv whose input
    and output channels differ (36 of ResNet-50's 53)."""

    def __post_init__(self) -> None:
        check(1 <= self.width <= WIDTH_MAX, f"model.width={self.width} must be 1 to {WIDTH_MAX} channels "
              "(64: the standard ResNet)")
        check(self.conv_init in ("fan_out", "fan_in"),
              f"model.conv_init={shown(self.conv_init)}: use fan_out (torchvision's) or fan_in (NVIDIA ConvNets')")


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    """SGD settings. The learning rate is given for `reference_batch` images per step."""

    lr: float = 0.1
    """Learning rate for a global batch of `reference_batch` images; scaled by `lr_scaling`."""
    momentum: float = 0.9
    """SGD momentum (HAL, SC20 and NVIDIA ConvNets all use 0.9; NVIDIA's ResNet presets 0.875)."""
    nesterov: bool = False
    """Use Nesterov momentum (needs momentum > 0)."""
    weight_decay: float = 1e-4
    """L2 penalty added to the gradient (1e-4 for ImageNet ResNet-50, SC20 uses 5e-4 on CIFAR)."""
    exclude_bn_and_bias_from_weight_decay: bool = False
    """Give normalisation-layer parameters and all biases zero weight decay (NVIDIA's default);
    which parameters exactly is `weight_decay_exemption`."""
    weight_decay_exemption: WeightDecayExemption = "module_type"
    """What the exclusion exempts. "module_type": every parameter of a normalisation layer and every
    bias (dlscale's rule); "name_contains_bn": every parameter whose name contains "bn", NVIDIA
    ConvNets' rule without --bn-weight-decay, which leaves decay on the downsample BNs and fc.bias
    (docs/references.md#ngc-bn-weight-decay)."""
    lr_scaling: LrScaling = "none"
    """How `lr` grows with the global batch: "none", "linear" (Goyal et al. 2017) or "sqrt"."""
    reference_batch: int = 256
    """Global batch (images per optimizer step) that `lr` was tuned for."""
    label_smoothing: float = 0.0
    """Cross-entropy label smoothing in [0, 1) (NVIDIA's ResNet-50 presets use 0.1)."""
    accumulation_steps: int = 1
    """Micro-batches whose gradients are summed before one optimizer step (>= 1)."""

    def __post_init__(self) -> None:
        check(self.lr > 0, f"optim.lr={self.lr} must be > 0")
        check(0 <= self.momentum < 1, f"optim.momentum={self.momentum} must be in [0, 1)")
        check(
            not self.nesterov or self.momentum > 0,
            "optim.nesterov=true needs optim.momentum > 0; set a momentum or turn nesterov off",
        )
        check(self.weight_decay >= 0, f"optim.weight_decay={self.weight_decay} must be >= 0")
        check(
            self.lr_scaling in LR_SCALING_RULES,
            f"optim.lr_scaling={shown(self.lr_scaling)} is unknown; use one of {LR_SCALING_RULES}",
        )
        check(self.reference_batch >= 1, "optim.reference_batch must be a positive integer")
        check(
            0 <= self.label_smoothing < 1,
            f"optim.label_smoothing={self.label_smoothing} must be in [0, 1)",
        )
        check(1 <= self.accumulation_steps <= BATCH_MAX, f"optim.accumulation_steps must be 1 to {BATCH_MAX:,}")
        check(self.weight_decay_exemption in WEIGHT_DECAY_EXEMPTIONS,
              f"optim.weight_decay_exemption={shown(self.weight_decay_exemption)}: use one of "
              f"{WEIGHT_DECAY_EXEMPTIONS}")


@dataclass(frozen=True, kw_only=True)
class ScheduleConfig:
    """Shape of the learning rate over training; the peak comes from `OptimConfig`."""

    name: ScheduleName = "step"
    """One of "constant", "step", "cosine", "linear", "plateau"."""
    epochs: int = 90
    """Length of training in epochs; cosine and linear reach `end_lr` here."""
    warmup_epochs: float = 0.0
    """Linear warm-up length (HAL 5, NVIDIA 8, SC20 8 or 16); 0 turns warm-up off."""
    warmup_per: Literal["iteration", "epoch"] = "iteration"
    """Warm-up granularity: "iteration" (HAL) or "epoch" (SC20, NVIDIA; needs whole epochs)."""
    warmup_step_offset: int = 1
    """Per-iteration warm-up is `base * (step + offset) / (W * steps_per_epoch)`, step counted from 0:
    1 reaches the peak on the last warm-up step; HAL's loop counts iterations from 1 and adds 1,
    so its offset is 2 (docs/references.md#hal-lr-schedule)."""
    milestones: tuple[int, ...] = (30, 60, 80)
    """Epochs at which "step" multiplies the LR by `gamma` (HAL, NVIDIA: 30, 60, 80)."""
    milestone_every: int = 0
    """"step": after the last milestone, multiply by `gamma` again at every multiple of this many
    epochs (HAL: 30, i.e. at 90, 120, ...); 0: no decay after the last milestone (NVIDIA)."""
    gamma: float = 0.1
    """Factor applied at each milestone of "step"."""
    end_lr: float = 0.0
    """Final LR of "cosine" and "linear" (NVIDIA `--end-lr`, default 0)."""
    anneal_per: Literal["iteration", "epoch"] = "iteration"
    """"cosine" and "linear" at the fractional epoch of every iteration ("iteration"), or constant
    within an epoch at its whole-epoch value ("epoch": NVIDIA ConvNets' lr policies)."""
    plateau_factor: float = 0.2
    """Plateau: LR multiplier on each reduction (SC20: 0.2)."""
    plateau_patience: int = 10
    """Plateau: bad epochs tolerated; the LR drops after `patience + 1` (SC20: 10)."""
    plateau_mode: Literal["min", "max"] = "min"
    """Plateau: "min" for a loss, "max" for an accuracy."""
    plateau_threshold: float = 1e-4
    """Plateau: relative improvement that counts as better (torch's default 1e-4)."""

    def __post_init__(self) -> None:
        check(
            self.name in SCHEDULE_NAMES, f"schedule.name={shown(self.name)}: use one of {SCHEDULE_NAMES}"
        )
        check(self.epochs >= 1, f"schedule.epochs={self.epochs} must be >= 1")
        check(self.warmup_epochs >= 0, "schedule.warmup_epochs must be >= 0")
        check(
            self.warmup_per in WARMUP_UNITS,
            f"schedule.warmup_per={shown(self.warmup_per)}: use one of {WARMUP_UNITS}",
        )
        check(
            self.warmup_per != "epoch" or float(self.warmup_epochs).is_integer(),
            f"schedule.warmup_epochs={self.warmup_epochs} is fractional; per-epoch warm-up "
            "needs whole epochs (or set schedule.warmup_per=iteration)",
        )
        check(self.warmup_step_offset >= 0,
              f"schedule.warmup_step_offset={self.warmup_step_offset} must be >= 0 (1: peak on the last warm-up step)")
        check(self.anneal_per in ANNEAL_UNITS,
              f"schedule.anneal_per={shown(self.anneal_per)}: use one of {ANNEAL_UNITS}")
        check(self.milestone_every >= 0,
              f"schedule.milestone_every={self.milestone_every} must be >= 0 epochs (0: none after the milestones)")
        if self.name in ("cosine", "linear"):
            check(
                self.epochs > self.warmup_epochs,
                f"schedule.epochs={self.epochs} must exceed warmup_epochs={self.warmup_epochs}",
            )
            check(self.end_lr >= 0, "schedule.end_lr must be >= 0")
        if self.name == "step":
            self._check_milestones()
        if self.name == "plateau":
            self._check_plateau()

    def _check_milestones(self) -> None:
        ms = self.milestones
        check(
            all(b > a for a, b in zip(ms, ms[1:], strict=False)),
            f"schedule.milestones={ms} must be strictly increasing",
        )
        check(
            not ms or ms[0] >= self.warmup_epochs,
            f"schedule.milestones={ms} start inside the warm-up; move them past epoch "
            f"{self.warmup_epochs}",
        )
        check(0 < self.gamma <= 1, f"schedule.gamma={self.gamma} must be in (0, 1]")

    def _check_plateau(self) -> None:
        check(0 < self.plateau_factor < 1, "schedule.plateau_factor must be in (0, 1)")
        check(self.plateau_patience >= 0, "schedule.plateau_patience must be >= 0")
        check(self.plateau_mode in ("min", "max"), "schedule.plateau_mode must be min or max")
        check(self.plateau_threshold >= 0, "schedule.plateau_threshold must be >= 0")


@dataclass(frozen=True, kw_only=True)
class StrategyConfig:
    dist_optimizer: str = "allreduce"
    """allreduce (DDP), gradient_allreduce, neighbor_allreduce or hierarchical_neighbor_allreduce."""
    topology: str = "exp2"
    """Graph of the decentralized strategies: exp2, ring, mesh, star or full."""
    atc_style: bool = False
    """Adapt-then-combine (step, then mix with neighbours); default adapt-with-combine (DGD)."""
    dynamic_topology: bool = True
    """One peer per step, rotating through the graph's out-neighbours (BlueFog's default)."""
    num_steps_per_communication: int = 1
    """Neighbour exchanges on every k-th step only (steps k-1, 2k-1, ...), BlueFog's optimizers."""
    dynamic_schedule: Literal["auto", "one_peer", "inner_outer_exp2", "inner_outer_ring"] = "auto"
    """Peers of the dynamic neighbor_allreduce. "one_peer": rotate through the graph's out-neighbours;
    "inner_outer_exp2" / "inner_outer_ring": per step one local rank of each node talks to another
    node, the others inside their node (needs equal nodes of more than 2 ranks); "auto": BlueFog's
    choice, inner_outer_exp2 on several nodes with the exp2 topology, one_peer otherwise."""
    global_average_every: int = 0
    """Average parameters over all ranks every N steps (0: never); a BlueFog accuracy trick."""
    wrap_single_rank: bool = False
    """allreduce only: wrap the model in DDP even when the job has one process (in a one-rank process group
    made for it: NCCL on a GPU, gloo on the CPU), to measure what the wrapper costs against the unwrapped
    step (`dlscale bench --wrap-single-rank`). Off: one process runs the bare model."""

    def __post_init__(self) -> None:
        # The names are checked against the registries (dlscale.strategies) when the strategy is built.
        check(not self.wrap_single_rank or self.dist_optimizer == "allreduce",
              f"strategy.wrap_single_rank wraps in DDP, which is the allreduce strategy; "
              f"drop it or use --dist-optimizer allreduce (got {shown(self.dist_optimizer)})")
        check(self.num_steps_per_communication >= 1,
              f"strategy.num_steps_per_communication={self.num_steps_per_communication} must be >= 1")
        check(self.global_average_every >= 0,
              f"strategy.global_average_every={self.global_average_every} must be >= 0 (0: never)")
        check(self.dynamic_schedule in DYNAMIC_SCHEDULES,
              f"strategy.dynamic_schedule={shown(self.dynamic_schedule)}: use one of {DYNAMIC_SCHEDULES}")


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    enabled: bool = True
    """Write checkpoints at all."""
    every_epochs: int = 1
    """Checkpoint at the end of every N-th epoch."""
    every_steps: int = 0
    """Also checkpoint every N optimizer steps inside an epoch (0: only at epoch ends)."""
    keep_last: int = 3
    """Checkpoints kept on disk; older ones are deleted."""

    def __post_init__(self) -> None:
        check(self.every_epochs >= 1, f"checkpoint.every_epochs={self.every_epochs} must be >= 1 "
              "(checkpoint.enabled=false turns checkpoints off)")
        check(self.every_steps >= 0, f"checkpoint.every_steps={self.every_steps} must be >= 0 (0: only at epoch ends)")
        check(self.keep_last >= 1, f"checkpoint.keep_last={self.keep_last}: keep at least 1 checkpoint")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    speed: SpeedOptions = field(default_factory=SpeedOptions)
    precision: PrecisionName = "fp32"
    """Numeric precision: one of PRECISIONS (see `dlscale bench --help`)."""
    batch_size: int | None = None
    """Images per rank per micro-step. Give this or global_batch_size."""
    global_batch_size: int | None = None
    """Images per optimizer step over all ranks (SC20's presets); split evenly over ranks."""
    val_batch_size: int | None = None
    """Images per rank per validation step (default: the training batch per rank)."""
    target_accuracy: float | None = None
    """Stop when validation top-1 (a fraction, 0.76) reaches this; records time to solution."""
    max_steps_per_epoch: int | None = None
    """Cut every epoch after this many steps (NVIDIA's --prof); for quick runs and tests."""
    log_every: int = 20
    """Optimizer steps between two metric records (the only steps that reduce across ranks)."""
    sync_batchnorm: bool = False
    """Convert BatchNorm to SyncBatchNorm (statistics over the global batch)."""
    seed: int = 0
    """Seed of weights, data order and augmentation."""
    deterministic: bool = False
    """torch.use_deterministic_algorithms and cuDNN's deterministic mode, autotuning off: repeatable runs,
    slower. On GPUs the few ops without a deterministic CUDA kernel warn instead of stopping the run."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: this rank's GPU when CUDA is visible, else the CPU."""
    pg_timeout_s: float = 600.0
    """Seconds before a collective that a peer never joins fails."""
    name: str | None = None
    """Run directory name under the output directory (default: the preset's name)."""
    price_per_device_hour: float | None = None
    """What one device costs for one hour (--price-per-device-hour): the summary then states the cost per
    epoch and per run (device-hours x price; no currency)."""

    def __post_init__(self) -> None:
        check(self.price_per_device_hour is None or self.price_per_device_hour > 0,
              f"price_per_device_hour={self.price_per_device_hour} must be > 0 (or unset)")
        for key, most in (("batch_size", BATCH_MAX), ("global_batch_size", GLOBAL_BATCH_MAX),
                          ("val_batch_size", BATCH_MAX), ("max_steps_per_epoch", 2**31)):
            value = getattr(self, key)
            check(value is None or 1 <= value <= most, f"{key}={value} must be >= 1 and at most {most:,} (or unset)")
        check(self.log_every >= 1, f"log_every={self.log_every} must be >= 1 optimizer steps")
        check(0 < self.pg_timeout_s <= TIMEOUT_MAX_S, f"pg_timeout_s={self.pg_timeout_s:g} (--pg-timeout) must be "
              f"positive seconds, at most {TIMEOUT_MAX_S:,} (a year)")
        check(0 <= self.seed <= SEED_MAX, f"seed={self.seed} must be 0 to {SEED_MAX:,} (numpy's generators take "
              "32-bit seeds)")
        check(self.target_accuracy is None or 0 < self.target_accuracy <= 1,
              f"target_accuracy={self.target_accuracy} (--target-accuracy) is a fraction of validation top-1 "
              "in (0, 1], e.g. 0.76")
        check(not self.speed.cuda_graphs, "speed.cuda_graphs is a `dlscale bench` option (training changes the "
              "learning rate every step and evaluates between epochs); use speed.compile_mode=reduce-overhead")


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    model: str = "resnet50"
    """Model name from `dlscale models`."""
    batch_size: int = 32
    """Images per rank per step."""
    num_warmup_batches: int = 10
    """Untimed steps first: cuDNN autotuning, allocator growth, compilation."""
    num_batches_per_iter: int = 10
    """Steps per timed iteration."""
    num_iters: int = 10
    """Timed iterations; the +- is over these."""
    num_classes: int = 1000
    """Classes of the random labels (the model's output width)."""
    image_size: int = 224
    """Square input size in pixels."""
    width: int = 64
    """Base channel count of the ResNet (64 is the standard model)."""
    precision: PrecisionName = "fp32"
    """One of PRECISIONS."""
    speed: SpeedOptions = SpeedOptions()
    """channels_last, cuDNN autotuning, fused SGD, torch.compile, CUDA graphs."""
    strategy: StrategyConfig = StrategyConfig()
    """How replicas synchronise: --dist-optimizer and its options."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: this rank's GPU when CUDA is visible, else the CPU."""
    pool_batches: int = 8
    """Distinct random batches generated on the device and cycled through."""
    lr: float = 0.01
    """SGD learning rate (momentum 0.9), as the reference benchmarks use."""
    seed: int = 0
    """Seed of the weights and of the synthetic batches (rank r uses seed + r)."""
    pg_timeout_s: float = 600.0
    """Seconds before a collective that a peer never joins fails."""
    price_per_device_hour: float | None = None
    """What one device costs for one hour: the summary then states the cost of an ImageNet epoch at the
    measured rate."""

    def __post_init__(self) -> None:
        if self.price_per_device_hour is not None and not self.price_per_device_hour > 0:
            raise ConfigError(f"--price-per-device-hour must be > 0, got {self.price_per_device_hour}")
        positive = ("batch_size", "num_batches_per_iter", "num_iters", "num_classes", "width", "pool_batches")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.num_warmup_batches < 0:
            raise ConfigError(f"--num-warmup-batches must be >= 0, got {self.num_warmup_batches}")
        if not IMAGE_SIDE_MIN <= self.image_size <= IMAGE_SIDE_MAX:
            raise ConfigError(f"--image-size must be {IMAGE_SIDE_MIN} to {IMAGE_SIDE_MAX:,} pixels, got "
                              f"{self.image_size}")
        for name, most in (("batch_size", BATCH_MAX), ("width", WIDTH_MAX), ("pool_batches", 1024)):
            if getattr(self, name) > most:
                raise ConfigError(f"--{name.replace('_', '-')} must be at most {most:,}, got {getattr(self, name)}")
        if not 0 <= self.seed <= SEED_MAX:
            raise ConfigError(f"--seed must be 0 to {SEED_MAX:,} (numpy's generators take 32-bit seeds)")
        if not 0 < self.pg_timeout_s <= TIMEOUT_MAX_S:
            raise ConfigError(f"--pg-timeout must be positive seconds, at most a year, got {self.pg_timeout_s}")
        if self.speed.cuda_graphs and self.precision == "amp_fp16" and self.speed.fused_optimizer is False:
            # GradScaler steps any other SGD only after reading the overflow flag on the host, which a
            # capture cannot hold; fused SGD skips an overflowed step on the device (dlscale.bench.cuda_graphs).
            raise ConfigError("--cuda-graphs with --precision amp_fp16 needs the fused optimizer: drop "
                              "--no-fused-optimizer")
