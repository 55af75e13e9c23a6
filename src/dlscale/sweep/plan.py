"""The plan of a scaling sweep: which points run, with which batch, from plain data.

One `dlscale bench` or `dlscale train` command runs at several world sizes (and strategies,
precisions). Weak scaling keeps the batch per rank; strong scaling keeps the global batch of the
smallest world size and splits it over the ranks. The plan takes resolved facts about the swept
command (`CommandFacts`, which `dlscale scale` reads from the command's own parser and
configuration) and never an argparse namespace.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from dlscale.errors import ConfigError, shown

MODES = ("weak", "strong")
SWEEPABLE_COMMANDS = ("bench", "train")
"""The dlscale commands a sweep runs at each point."""
OWNED_FLAGS = {"--output-dir": "the sweep names run directories; use `dlscale scale --output-dir/--name`",
               "--name": "the sweep names run directories; use `dlscale scale --output-dir/--name`",
               "--json": "each point's summary.json is in its run directory inside the sweep"}
SWEPT = {"dist_optimizers": ("dist_optimizer", "--dist-optimizer"), "precisions": ("precision", "--precision")}
"""SweepSpec field -> (the setting it sweeps, the swept command's flag for it)."""


@dataclass(frozen=True)
class SweepSpec:
    command: str
    """bench or train."""
    args: tuple[str, ...]
    """The command's own flags, as given after `--`."""
    nproc: tuple[int, ...]
    """Processes per node to sweep; world sizes for launchers that place ranks themselves (slurm)."""
    nnodes: tuple[int, ...] = (1,)
    """Nodes to sweep; more than one on this host starts one torchrun agent per node."""
    mode: str = "weak"
    dist_optimizers: tuple[str, ...] = ()
    """--dist-optimizer values to sweep; empty: whatever the command's flags say."""
    precisions: tuple[str, ...] = ()
    sets: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Training settings to sweep, each a config key and its values (`--set-sweep data.num_workers=0,2,4`): every
    point gets `--set KEY=VALUE` (Marconi100's epoch time against loader workers)."""
    launcher: str = "torchrun"
    """A name in dlscale.sweep.run.SWEEP_LAUNCHERS."""
    timeout_s: float = 3600.0
    """Seconds one point may run before it is stopped and recorded as a timeout."""
    launcher_options: dict = field(default_factory=dict)
    """Whatever a launcher needs beyond the point itself. slurm: gpus_per_node, wait (False: return
    once submitted), poll_s, job (SlurmJob fields: partition, time, request_gpus, ...)."""


@dataclass(frozen=True)
class CommandFacts:
    """What the swept command's flags resolve to, read by its own parser before anything starts."""

    batch_size: int | None = None
    """Images per rank (bench --batch-size, or train's batch_size)."""
    global_batch_size: int | None = None
    """train's global_batch_size."""
    accumulation_steps: int = 1
    """train's optim.accumulation_steps."""
    fixed: frozenset[str] = frozenset()
    """Settings the command's own flags fix (dist_optimizer, precision): the sweep may not vary them."""
    dist_optimizer: str = "allreduce"
    """The strategy the command's own flags (or its configuration) run where the sweep does not vary it."""


@dataclass
class Point:
    name: str
    nproc_per_node: int
    nnodes: int
    settings: dict
    """The swept settings of this point (dist_optimizer, precision, and each --set-sweep key)."""
    per_rank_batch: int | None
    global_batch: int | None
    series: str = ""
    """Human label of what this point shares with others of its curve."""
    group: str = ""
    """'<n>/node' when the sweep varies both nodes and processes per node: one curve per n."""
    argv: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    status: str = "pending"
    """pending, running, submitted (slurm), ok, failed, timeout or interrupted."""
    job_id: str = ""
    """The SLURM job running this point."""
    returncode: int | None = None
    error: str = ""
    error_tail: str = ""
    elapsed_s: float | None = None
    logs: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def run_dir(self) -> str:
        return self.name

    def record(self) -> dict:
        return {**asdict(self), "world_size": self.world_size, "run_dir": self.run_dir}


def given(args: tuple[str, ...] | list[str], flag: str) -> bool:
    """The flag is among args, as `--flag VALUE` or `--flag=VALUE`."""
    return any(a == flag or a.startswith(flag + "=") for a in args)


def check_spec(spec: SweepSpec) -> None:
    """What can be checked before the swept command's flags are parsed."""
    if spec.mode not in MODES:
        raise ConfigError(f"--mode {shown(spec.mode)}: choose weak or strong")
    if spec.command not in SWEEPABLE_COMMANDS:
        raise ConfigError(f"`dlscale scale -- {spec.command} ...`: the command to sweep must be bench or train")
    for flag, why in OWNED_FLAGS.items():
        if given(spec.args, flag):
            raise ConfigError(f"remove {flag} after --: {why}")
    if spec.sets and spec.command != "train":
        raise ConfigError("--set-sweep sweeps a training setting (`-- train ...`); bench takes its settings as flags")
    overridden = {a.partition("=")[0] for flag, a in zip(spec.args, spec.args[1:], strict=False) if flag == "--set"}
    overridden |= {a.removeprefix("--set=").partition("=")[0] for a in spec.args if a.startswith("--set=")}
    for key, _ in spec.sets:
        if key in overridden:
            raise ConfigError(f"{key} is swept by --set-sweep; remove --set {key}=... after --")


def check_swept(spec: SweepSpec, facts: CommandFacts) -> None:
    for attr, (setting, flag) in SWEPT.items():
        if getattr(spec, attr) and setting in facts.fixed:
            raise ConfigError(f"{flag} is swept by `dlscale scale {flag} ...`; remove it after --")


# ---------------------------------------------------------------------------------- batch sizes


BatchRule = Callable[[int], tuple[int | None, int | None, list[str]]]


def batch_rule(spec: SweepSpec, facts: CommandFacts) -> BatchRule:
    """world size -> (batch per rank, global batch, flags that set them) for the sweep's mode."""
    smallest = min(spec.nproc) * min(spec.nnodes)
    worlds = sorted({p * n for p in spec.nproc for n in spec.nnodes})
    if spec.command == "bench":
        return _bench_batches(spec.mode, facts.batch_size, smallest, worlds)
    return _train_batches(spec.mode, facts, smallest, worlds)


def _bench_batches(mode: str, batch: int | None, smallest: int, worlds: list[int]) -> BatchRule:
    if mode == "weak":
        return lambda world: (batch, batch * world if batch else None, [])
    if batch is None:
        raise ConfigError("--mode strong splits one global batch over the ranks: give --batch-size after -- "
                          f"(images per rank at the smallest world size, {smallest})")
    total = batch * smallest
    _check_divisible(total, worlds, 1, "--batch-size")
    return lambda world: (total // world, total, ["--batch-size", str(total // world)])


def _train_batches(mode: str, facts: CommandFacts, smallest: int, worlds: list[int]) -> BatchRule:
    accumulation = facts.accumulation_steps
    if facts.batch_size is None and facts.global_batch_size is None:
        raise ConfigError("the training config sets no batch: give --set batch_size=N (per rank) or "
                          "--set global_batch_size=N after --")
    if mode == "weak":
        per_rank = facts.batch_size
        if per_rank is None:
            if facts.global_batch_size % (smallest * accumulation):
                raise ConfigError(f"global_batch_size={facts.global_batch_size} does not split over {smallest} "
                                  "ranks; give --set batch_size=N (per rank) for weak scaling")
            per_rank = facts.global_batch_size // (smallest * accumulation)
        flags = ["--set", f"batch_size={per_rank}", "--set", "global_batch_size=null"]
        return lambda world: (per_rank, per_rank * world * accumulation, flags)
    total = facts.global_batch_size or facts.batch_size * smallest * accumulation
    _check_divisible(total, worlds, accumulation, "global_batch_size")
    flags = ["--set", f"global_batch_size={total}", "--set", "batch_size=null"]
    return lambda world: (total // (world * accumulation), total, flags)


def _check_divisible(total: int, worlds: list[int], accumulation: int, what: str) -> None:
    bad = [w for w in worlds if total % (w * accumulation)]
    if bad:
        raise ConfigError(f"strong scaling: the global batch {total} does not split evenly over {bad} ranks; "
                          f"change {what} or the world sizes")


# ----------------------------------------------------------------------------------- the points


def plan_points(spec: SweepSpec, facts: CommandFacts) -> list[Point]:
    check_spec(spec)
    check_swept(spec, facts)
    rule = batch_rule(spec, facts)
    both_vary = len(spec.nnodes) > 1 and len(spec.nproc) > 1
    swept = [[(key, value) for value in values] for key, values in spec.sets]
    points = []
    for dist, precision, *chosen, nnodes, nproc in itertools.product(
        spec.dist_optimizers or (None,), spec.precisions or (None,), *swept, sorted(spec.nnodes), sorted(spec.nproc)
    ):
        settings = {k: v for k, v in (("dist_optimizer", dist), ("precision", precision), *chosen) if v}
        group = f"{nproc}/node" if both_vary else ""
        world = nproc * nnodes
        per_rank, total, batch_flags = rule(world)
        words = [_word(key, value) for key, value in settings.items()]
        name = "-".join([f"world{world}", *([f"nodes{nnodes}"] if nnodes > 1 else []), *words])
        point = Point(name, nproc, nnodes, settings, per_rank, total,
                      series=" ".join([*words, group]).strip(), group=group)
        point.argv = [spec.command, *spec.args, *batch_flags, *_setting_flags(spec.command, settings)]
        points.append(point)
    check_layouts(spec, facts, points)
    return points


NODE_STRATEGIES = ("hierarchical_neighbor_allreduce",)
"""Strategies that average inside each node, then between nodes (strategies/neighbor_allreduce.py): on more
than one rank they need two or more nodes of two or more ranks."""


def check_layouts(spec: SweepSpec, facts: CommandFacts, points: list[Point]) -> None:
    """A point whose strategy cannot run on its nodes is refused before the sweep starts, not failed in it."""
    bad = []
    for point in points:
        strategy = point.settings.get("dist_optimizer") or facts.dist_optimizer
        nodes, per_node = node_layout(spec, point)
        if strategy in NODE_STRATEGIES and point.world_size > 1 and (nodes < 2 or per_node < 2):
            bad.append(f"{point.name} ({nodes} node(s) x {per_node} rank(s))")
    if bad:
        raise ConfigError(f"{NODE_STRATEGIES[0]} averages inside each node, then between nodes: it needs 2 or more "
                          f"nodes of 2 or more ranks, and these points have not: {', '.join(bad)}; sweep --nnodes "
                          "and --nproc of 2 or more (or --gpus of whole nodes, 2 or more), or another --dist-optimizer")


def node_layout(spec: SweepSpec, point: Point) -> tuple[int, int]:
    """(nodes, ranks per node) a point runs on: its own with torchrun; a SLURM sweep fills each node of
    launcher_options' gpus_per_node first (launch/slurm_jobs.py)."""
    per_node = spec.launcher_options.get("gpus_per_node")
    if per_node is None:
        return point.nnodes, point.nproc_per_node
    world = point.world_size
    return -(-world // per_node), min(world, per_node)


def _word(key: str, value: str) -> str:
    """A swept value in point names: the value of a strategy or precision, else the key's last part and the value
    (num_workers4)."""
    if key in ("dist_optimizer", "precision"):
        return value
    return re.sub(r"[^A-Za-z0-9_.]+", "_", key.rsplit(".", 1)[-1] + value)


def _setting_flags(command: str, settings: dict) -> list[str]:
    if command == "bench":
        return [x for k, v in settings.items() for x in (f"--{k.replace('_', '-')}", v)]
    keys = {"dist_optimizer": "strategy.dist_optimizer", "precision": "precision"}
    return [x for k, v in settings.items() for x in ("--set", f"{keys.get(k, k)}={v}")]
