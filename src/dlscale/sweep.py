"""Scaling sweeps: one `dlscale bench` or `dlscale train` command at several world sizes.

Each point is launched by torchrun on this host and writes its own run directory inside the
sweep directory; sweep.json lists every point with what it varied, how it ended and why:

    runs/sweep-<time>/sweep.json            the plan and each point's status (rewritten after each point)
    runs/sweep-<time>/<point>/              the point's run directory (summary.json, ...)
    runs/sweep-<time>/logs/<point>.log      everything the point printed

Weak scaling keeps the batch per rank; strong scaling keeps the global batch of the smallest
world size and splits it over the ranks. A point that fails is recorded and the sweep goes on.
Launching is one function per launcher in LAUNCHERS, (spec, point, sweep_dir) -> Outcome: it
starts the point's dlscale command (`program`) with point.world_size ranks, waits at most
spec.timeout_s, and says how it ended. SLURM is different (`dlscale.sweep_slurm.run_on_slurm`): every point is
submitted as its own job first (they run side by side on a cluster), then all are waited for.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.metrics.run import RunDir

MODES = ("weak", "strong")
SLURM = "slurm"
"""The launcher that submits one SLURM job per point (dlscale.sweep_slurm)."""
COMMANDS = ("bench", "train")
OWNED_FLAGS = {"--output-dir": "the sweep names run directories; use `dlscale scale --output-dir/--name`",
               "--name": "the sweep names run directories; use `dlscale scale --output-dir/--name`",
               "--json": "each point's summary.json is in its run directory inside the sweep"}
TERM_GRACE_S = 20.0
"""After SIGTERM, how long a timed-out point may take to stop before it is killed."""


@dataclass(frozen=True)
class SweepSpec:
    command: str
    """bench or train."""
    args: tuple[str, ...]
    """The command's own flags, as given after `--`."""
    nproc: tuple[int, ...]
    """Processes per node to sweep."""
    nnodes: tuple[int, ...] = (1,)
    """Nodes to sweep; more than one on this host starts one torchrun agent per node."""
    mode: str = "weak"
    dist_optimizers: tuple[str, ...] = ()
    """--dist-optimizer values to sweep; empty: whatever the command's flags say."""
    precisions: tuple[str, ...] = ()
    launcher: str = "torchrun"
    """A name in LAUNCHERS, or SLURM (one job per point; nproc then lists world sizes, --gpus)."""
    timeout_s: float = 3600.0
    """Seconds one point may run before it is stopped and recorded as a timeout."""
    launcher_options: dict = field(default_factory=dict)
    """Whatever a launcher needs beyond the point itself. SLURM: gpus_per_node, wait (False: return
    once submitted), poll_s, job (SlurmJob fields: partition, time, request_gpus, ...)."""


@dataclass
class Point:
    name: str
    nproc_per_node: int
    nnodes: int
    settings: dict
    """The swept settings of this point (dist_optimizer, precision)."""
    per_rank_batch: int | None
    global_batch: int | None
    series: str = ""
    """Human label of what this point shares with others of its curve."""
    group: str = ""
    """'<n>/node' when the sweep varies both nodes and processes per node: one curve per n."""
    argv: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    status: str = "pending"
    """pending, running, submitted (SLURM), ok, failed, timeout or interrupted."""
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


# ------------------------------------------------------------------------------ parsing the plan


def parse_ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{flag} {text!r} must be whole numbers separated by commas, e.g. {flag} 1,2,4") from None
    if not values or any(v < 1 for v in values):
        raise ConfigError(f"{flag} {text!r} must list positive numbers, e.g. {flag} 1,2,4")
    return tuple(dict.fromkeys(values))


def parse_names(text: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v.strip() for v in (text or "").split(",") if v.strip()))


def split_command(rest: list[str]) -> tuple[str, tuple[str, ...]]:
    """`bench --model resnet18 ...` -> ('bench', (...)); flags alone mean bench."""
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest or rest[0].startswith("-"):
        return "bench", tuple(rest)
    if rest[0] not in COMMANDS:
        raise ConfigError(f"`dlscale scale -- {rest[0]} ...`: the command to sweep must be bench or train")
    return rest[0], tuple(rest[1:])


class _ArgumentError(Exception):
    pass


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _ArgumentError(message)


def parse_command_args(command: str, args: tuple[str, ...]) -> argparse.Namespace:
    """The swept command's flags, checked by that command's own parser before anything starts."""
    from dlscale.cli import COMMANDS as CLI

    parser = _RaisingParser(prog="dlscale")
    sub = parser.add_subparsers(dest="command", parser_class=_RaisingParser)
    importlib.import_module(CLI[command]).add_parser(sub)
    try:
        return parser.parse_args([command, *args])
    except _ArgumentError as error:
        raise ConfigError(f"the arguments after -- are not valid for dlscale {command}: {error}") from None


def _given(args: tuple[str, ...], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _set_keys(ns: argparse.Namespace) -> set[str]:
    return {o.partition("=")[0].strip() for o in getattr(ns, "overrides", [])}


def check_spec(spec: SweepSpec) -> argparse.Namespace:
    if spec.mode not in MODES:
        raise ConfigError(f"--mode {spec.mode!r}: choose weak or strong")
    if spec.launcher not in (*LAUNCHERS, SLURM):
        raise ConfigError(f"--launcher {spec.launcher!r}: choose one of {', '.join((*LAUNCHERS, SLURM))}")
    for flag, why in OWNED_FLAGS.items():
        if _given(spec.args, flag):
            raise ConfigError(f"remove {flag} after --: {why}")
    ns = parse_command_args(spec.command, spec.args)
    keys = _set_keys(ns)
    swept = {"dist_optimizers": ("--dist-optimizer", "strategy.dist_optimizer"), "precisions": ("--precision", "precision")}
    for attr, (flag, key) in swept.items():
        if getattr(spec, attr) and (_given(spec.args, flag) or key in keys):
            raise ConfigError(f"{flag} is swept by `dlscale scale {flag} ...`; remove it after --")
    return ns


# ---------------------------------------------------------------------------------- batch sizes


def batch_rule(spec: SweepSpec, ns: argparse.Namespace) -> Callable[[int], tuple[int | None, int | None, list[str]]]:
    """world size -> (batch per rank, global batch, flags that set them) for the sweep's mode."""
    smallest = min(spec.nproc) * min(spec.nnodes)
    worlds = sorted({p * n for p in spec.nproc for n in spec.nnodes})
    if spec.command == "bench":
        return _bench_batches(spec.mode, ns.batch_size, smallest, worlds)
    return _train_batches(spec.mode, ns, smallest, worlds)


def _bench_batches(mode: str, batch: int | None, smallest: int, worlds: list[int]):
    if mode == "weak":
        return lambda world: (batch, batch * world if batch else None, [])
    if batch is None:
        raise ConfigError("--mode strong splits one global batch over the ranks: give --batch-size after -- "
                          f"(images per rank at the smallest world size, {smallest})")
    total = batch * smallest
    _check_divisible(total, worlds, 1, "--batch-size")
    return lambda world: (total // world, total, ["--batch-size", str(total // world)])


def _train_batches(mode: str, ns: argparse.Namespace, smallest: int, worlds: list[int]):
    from dlscale.cli.common import resolve_config

    cfg, _ = resolve_config(ns)
    accumulation = cfg.optim.accumulation_steps
    if cfg.batch_size is None and cfg.global_batch_size is None:
        raise ConfigError("the training config sets no batch: give --set batch_size=N (per rank) or "
                          "--set global_batch_size=N after --")
    if mode == "weak":
        per_rank = cfg.batch_size
        if per_rank is None:
            if cfg.global_batch_size % (smallest * accumulation):
                raise ConfigError(f"global_batch_size={cfg.global_batch_size} does not split over {smallest} ranks; "
                                  "give --set batch_size=N (per rank) for weak scaling")
            per_rank = cfg.global_batch_size // (smallest * accumulation)
        flags = ["--set", f"batch_size={per_rank}", "--set", "global_batch_size=null"]
        return lambda world: (per_rank, per_rank * world * accumulation, flags)
    total = cfg.global_batch_size or cfg.batch_size * smallest * accumulation
    _check_divisible(total, worlds, accumulation, "global_batch_size")
    flags = ["--set", f"global_batch_size={total}", "--set", "batch_size=null"]
    return lambda world: (total // (world * accumulation), total, flags)


def _check_divisible(total: int, worlds: list[int], accumulation: int, what: str) -> None:
    bad = [w for w in worlds if total % (w * accumulation)]
    if bad:
        raise ConfigError(f"strong scaling: the global batch {total} does not split evenly over {bad} ranks; "
                          f"change {what} or the world sizes")


# ----------------------------------------------------------------------------------- the points


def plan_points(spec: SweepSpec, ns: argparse.Namespace) -> list[Point]:
    rule = batch_rule(spec, ns)
    both_vary = len(spec.nnodes) > 1 and len(spec.nproc) > 1
    points = []
    for dist, precision, nnodes, nproc in itertools.product(
        spec.dist_optimizers or (None,), spec.precisions or (None,), sorted(spec.nnodes), sorted(spec.nproc)
    ):
        settings = {k: v for k, v in (("dist_optimizer", dist), ("precision", precision)) if v}
        group = f"{nproc}/node" if both_vary else ""
        world = nproc * nnodes
        per_rank, total, batch_flags = rule(world)
        name = "-".join([f"world{world}", *([f"nodes{nnodes}"] if nnodes > 1 else []), *settings.values()])
        point = Point(name, nproc, nnodes, settings, per_rank, total,
                      series=" ".join([*settings.values(), group]).strip(), group=group)
        point.argv = [spec.command, *spec.args, *batch_flags, *_setting_flags(spec.command, settings)]
        points.append(point)
    return points


def _setting_flags(command: str, settings: dict) -> list[str]:
    if command == "bench":
        return [x for k, v in settings.items() for x in (f"--{k.replace('_', '-')}", v)]
    keys = {"dist_optimizer": "strategy.dist_optimizer", "precision": "precision"}
    return [x for k, v in settings.items() for x in ("--set", f"{keys[k]}={v}")]


# ------------------------------------------------------------------------------------ launching


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_commands(nproc_per_node: int, nnodes: int, program: list[str]) -> list[list[str]]:
    """torchrun on this host: --standalone for one node; for several, one agent per emulated node
    meeting at a c10d rendezvous on a free local port."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc_per_node)]
    if nnodes == 1:
        return [[*torchrun, "--standalone", *program]]
    endpoint, run_id = f"127.0.0.1:{free_port()}", uuid.uuid4().hex[:12]
    agent = [*torchrun, "--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
             "--rdzv-id", run_id, "--local-addr", "127.0.0.1", "--max-restarts", "0", *program]
    return [list(agent) for _ in range(nnodes)]


@dataclass
class Outcome:
    """How a launched point ended."""

    returncode: int | None
    timed_out: bool = False
    error: str = ""
    """The launcher's own explanation (a SLURM job state); empty: read the error from the logs."""
    logs: list[Path] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)


def program(point: Point, sweep_dir: Path) -> list[str]:
    """The point's dlscale command for `python`, writing its run directory inside the sweep."""
    return ["-m", "dlscale", *point.argv, "--output-dir", str(sweep_dir), "--name", point.name]


def run_here(commands: list[list[str]], point: Point, sweep_dir: Path, timeout_s: float) -> Outcome:
    """Start the commands together on this host, one log each: logs/<point>.log, .node1.log, ..."""
    logs = [sweep_dir / "logs" / (f"{point.name}.log" if i == 0 else f"{point.name}.node{i}.log")
            for i in range(len(commands))]
    code, timed_out = run_commands(commands, logs, timeout_s)
    return Outcome(code, timed_out, logs=logs, commands=commands)


def launch_torchrun(spec: SweepSpec, point: Point, sweep_dir: Path) -> Outcome:
    commands = torchrun_commands(point.nproc_per_node, point.nnodes, program(point, sweep_dir))
    return run_here(commands, point, sweep_dir, spec.timeout_s)


LAUNCHERS: dict[str, Callable[[SweepSpec, Point, Path], Outcome]] = {"torchrun": launch_torchrun}


def run_commands(commands: list[list[str]], logs: list[Path], timeout_s: float) -> tuple[int | None, bool]:
    """Start every command at once (each its own session), wait for all; (first non-zero exit
    code or 0, timed out). A timeout stops them: SIGTERM, then SIGKILL of what is left."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = []
    try:
        for command, log in zip(commands, logs, strict=True):
            with open(log, "wb") as out:
                procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                              start_new_session=True))
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _stop(procs)
        return None, True
    except BaseException:
        _stop(procs)
        raise
    codes = [p.returncode for p in procs]
    return next((c for c in codes if c), 0), False


def _stop(procs: list[subprocess.Popen]) -> None:
    """torchrun forwards SIGTERM to its workers (which run in sessions of their own)."""
    family = {p.pid: _descendants(p.pid) for p in procs if p.poll() is None}
    for pid in family:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for pid, children in family.items():
        for child in [pid, *children]:
            _signal(child, signal.SIGKILL)
    for p in procs:
        p.wait()


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _descendants(pid: int) -> list[int]:
    """Every process below pid, from /proc (Linux); empty where /proc cannot be read."""
    parents: dict[int, int] = {}
    entries = os.listdir("/proc") if os.path.isdir("/proc") else []
    for entry in filter(str.isdigit, entries):
        # A process may end meanwhile: then it has no children to find.
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{entry}/stat") as f:
            parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [c for c, p in parents.items() if p in frontier]
        found += children
        frontier = children
    return found


ERROR_LINE = re.compile(r"dlscale \w+: error: .*")


def error_summary(text: str) -> str:
    """The line that says what went wrong: our one-line error, else the last exception line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    ours = [m.group(0) for line in lines if (m := ERROR_LINE.search(line))]
    if ours:
        return ours[0][:300]
    raised = [line for line in lines if re.match(r"^\w+(\.\w+)*(Error|Exception)\b", line)]
    return (raised or lines or ["no output"])[-1][:300]


# ------------------------------------------------------------------------------------ the sweep


def run_sweep(spec: SweepSpec, sweep_dir: Path, out: Callable[[str], None] = print) -> list[Point]:
    ns = check_spec(spec)
    points = plan_points(spec, ns)
    if spec.launcher == SLURM:
        from dlscale.sweep_slurm import lay_out_on_nodes, run_on_slurm  # it imports this module

        lay_out_on_nodes(points, spec.launcher_options["gpus_per_node"])
    if (sweep_dir / "sweep.json").exists():
        raise ConfigError(f"{sweep_dir} already holds a sweep; pick another --name")
    (sweep_dir / "logs").mkdir(parents=True, exist_ok=True)
    record = RunDir(sweep_dir)
    header = _header(spec)
    record.write_json("sweep.json", {**header, "points": [p.record() for p in points]})
    out(f"Sweep directory: {sweep_dir} ({spec.mode} scaling, dlscale {spec.command}, {len(points)} points, "
        f"launcher {spec.launcher})")
    if spec.launcher == SLURM:
        run_on_slurm(spec, points, sweep_dir, lambda: record.write_json("sweep.json", {**header, "points": [
            p.record() for p in points]}), out)
        return points
    for i, point in enumerate(points, 1):
        out(f"[{i}/{len(points)}] world size {point.world_size}" + (f" ({point.series})" if point.series else "")
            + f": {point.name}")
        try:
            _run_point(spec, point, sweep_dir)
        except KeyboardInterrupt:
            point.status, point.error = "interrupted", "stopped by Ctrl-C"
            record.write_json("sweep.json", {**header, "points": [p.record() for p in points]})
            raise
        record.write_json("sweep.json", {**header, "points": [p.record() for p in points]})
        detail = f" (rc {point.returncode}): {point.error}" if point.status != "ok" else ""
        out(f"    {point.status} in {point.elapsed_s:.1f} s{detail}")
    return points


def _header(spec: SweepSpec) -> dict:
    return {
        "kind": "sweep", "format": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": spec.command, "args": list(spec.args), "mode": spec.mode, "launcher": spec.launcher,
        "nproc": list(spec.nproc), "nnodes": list(spec.nnodes), "dist_optimizers": list(spec.dist_optimizers),
        "precisions": list(spec.precisions), "timeout_s": spec.timeout_s,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        **({"gpus": list(spec.nproc), "gpus_per_node": spec.launcher_options["gpus_per_node"]}
           if spec.launcher == SLURM else {}),
    }


def _run_point(spec: SweepSpec, point: Point, sweep_dir: Path) -> None:
    point.status = "running"
    start = time.monotonic()
    outcome = LAUNCHERS[spec.launcher](spec, point, sweep_dir)
    point.elapsed_s = time.monotonic() - start
    point.returncode, point.commands = outcome.returncode, outcome.commands
    point.logs = [os.path.relpath(p, sweep_dir) for p in outcome.logs]
    text = "\n".join(Path(p).read_text(errors="replace") for p in outcome.logs if Path(p).exists())
    if outcome.timed_out:
        point.status, point.error = "timeout", outcome.error or f"stopped after {spec.timeout_s:g} s (--timeout)"
    elif outcome.returncode != 0:
        point.status, point.error = "failed", outcome.error or error_summary(text)
    elif not (sweep_dir / point.name / "summary.json").is_file():
        point.status, point.error = "failed", "exited 0 but wrote no summary.json"
    else:
        point.status = "ok"
    if point.status != "ok":
        point.error_tail = "\n".join(text.splitlines()[-20:])
