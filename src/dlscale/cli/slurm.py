"""`dlscale slurm --nodes N --gpus-per-node G [--submit] bench|train|scale ARGS`: an sbatch script.

The script is printed, written into the run directory (or --script) and, with --submit, handed
to sbatch. The job flags may come before or after the command for bench and train; for scale they
come before it (scale has flags of its own).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from dlscale.cli import DefaultsHelpFormatter, OneLineErrorParser, numbers, paths
from dlscale.cli.common import parse_command_flags, resolve_config
from dlscale.errors import ConfigError
from dlscale.launch.local import without_option
from dlscale.launch.slurm import JOB_COMMANDS, JOB_LAUNCHERS, SlurmJob, sbatch_script, write_script
from dlscale.launch.slurm_jobs import submit
from dlscale.rundir import RunDir, check_output_file, run_path

RUN_FLAGS = ("--output-dir", "--name")


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    """The SLURM flags that do not depend on the layout; `dlscale scale --launcher slurm` shares them."""
    p.add_argument("--partition", default=None, help="SLURM partition (sbatch --partition)")
    p.add_argument("--time", default=None, help="time limit: minutes, HH:MM:SS or D-HH:MM:SS (sbatch --time)")
    p.add_argument("--account", default=None, help="account to charge (sbatch --account)")
    p.add_argument("--cpus-per-task", type=numbers.CPUS, default=None,
                   help="CPUs per task (sbatch --cpus-per-task); default: each rank's loader workers + 1")
    p.add_argument("--cpus-per-node", type=numbers.CPUS, default=None,
                   help="the cores a node has: the default --cpus-per-task stays within it")
    p.add_argument("--mem", default=None, help="memory per node, e.g. 200G (sbatch --mem); default: the site's")
    p.add_argument("--mem-per-gpu", default=None, help="memory per GPU, e.g. 32G (sbatch --mem-per-gpu)")
    p.add_argument("--cpu-only", action="store_true",
                   help="the nodes have no GPUs: request none; --gpus-per-node then counts CPU ranks (gloo)")
    p.add_argument("--signal-seconds", type=numbers.SIGNAL_S, default=120,
                   help="train: USR1 this many seconds before the time limit; the run checkpoints and requeues")
    p.add_argument("--max-restarts", type=numbers.RESTARTS, default=0,
                   help="torchrun --max-restarts: failed workers restart from the last checkpoint")
    p.add_argument("--sbatch-option", action="append", default=[], metavar="OPTION",
                   help="one more #SBATCH directive, e.g. --sbatch-option=--qos=high (repeatable)")
    p.add_argument("--python", default=sys.executable, help="the Python (with dlscale) on the compute nodes")


def job_options(args: argparse.Namespace) -> dict:
    """SlurmJob fields from the flags of add_job_arguments."""
    return {"partition": args.partition, "time": args.time, "account": args.account,
            "cpus_per_task": args.cpus_per_task, "cpus_per_node": args.cpus_per_node, "mem": args.mem,
            "mem_per_gpu": args.mem_per_gpu, "request_gpus": not args.cpu_only, "signal_s": args.signal_seconds,
            "max_restarts": args.max_restarts, "sbatch_options": tuple(args.sbatch_option), "python": args.python}


def _layout_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=numbers.NODES, default=1, help="nodes to allocate")
    p.add_argument("--gpus-per-node", type=numbers.PER_NODE, default=None, help="GPUs (ranks) per node; required")
    p.add_argument("--launcher", choices=JOB_LAUNCHERS, default="torchrun",
                   help="torchrun: one task per node running torchrun; srun: one task per GPU, no torchrun")
    p.add_argument("--job-name", default=None, help="SLURM job name (default: dlscale-<run name>)")
    p.add_argument("--script", type=paths.PATH, default=None,
                   help="where to write the script (default: in the run directory)")
    p.add_argument("--submit", action="store_true", help="submit the script with sbatch after printing it")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "slurm", help="write an sbatch script for bench, train or a one-node sweep (and submit it)",
        description="Write a readable sbatch script that runs a dlscale command on N nodes x G GPUs "
        "(torchrun per node with a c10d rendezvous on the first host, or one srun task per GPU), with "
        "USR1 preemption handling and requeue for train. Example: dlscale slurm --nodes 2 --gpus-per-node 4 "
        "--time 04:00:00 --submit train --config imagenet:hal-rn50 --data /shared/imagenet",
        allow_abbrev=False, formatter_class=DefaultsHelpFormatter,
    )
    _layout_arguments(p)
    add_job_arguments(p)
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="bench|train|scale ARGS",
                   help="the dlscale command to run in the job, with its flags")
    p.set_defaults(run=run)


class _RaisingParser(OneLineErrorParser):
    def error(self, message: str):
        raise ConfigError(f"{self.prog}: {message}")


def _split(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The command and its flags; job flags given after a bench or train command are taken out."""
    rest = list(args.rest)
    if not rest or rest[0] not in JOB_COMMANDS:
        raise ConfigError(f"name the command to run: dlscale slurm --nodes N --gpus-per-node G "
                          f"{'|'.join(JOB_COMMANDS)} ARGS (got {' '.join(rest[:1]) or 'nothing'})")
    command, extra = rest[0], rest[1:]
    if command != "scale":
        late = _RaisingParser(prog="job flags", allow_abbrev=False, add_help=False)
        _layout_arguments(late)
        add_job_arguments(late)
        # Parsing into args keeps what was given before the command (argparse sets defaults
        # only for attributes the namespace lacks) and appends to --sbatch-option.
        _, extra = late.parse_known_args(extra, namespace=args)
    if args.gpus_per_node is None:
        raise ConfigError("give --gpus-per-node G (ranks per node; with --cpu-only, CPU ranks)")
    return command, extra


def _parse_command(command: str, extra: list[str]) -> argparse.Namespace:
    """The command's flags, checked by its own parser before anything is written."""
    ns = parse_command_flags(command, extra, where="the arguments of the job's command")
    if command == "train":  # a preset or --set that does not resolve fails here, not in the queue
        resolve_config(ns)
    return ns


def loader_workers(command: str, args: list[str] | tuple[str, ...], *, where: str) -> int:
    """Loader worker processes per rank of `dlscale COMMAND ARGS`: train's data.num_workers; bench feeds
    synthetic batches from the device (none); a sweep's, those of the command it sweeps (after --)."""
    if command == "scale":
        cut = args.index("--") if "--" in args else len(args)
        swept = list(args[cut + 1:])
        if swept and swept[0] in ("bench", "train"):
            return loader_workers(swept[0], swept[1:], where=where)
        return 0
    if command != "train":
        return 0
    cfg, _ = resolve_config(parse_command_flags(command, list(args), where=where))
    return cfg.data.num_workers


def build_job(args: argparse.Namespace) -> tuple[SlurmJob, Path]:
    """The job the flags describe, and where its script goes."""
    command, extra = _split(args)
    ns = _parse_command(command, extra)
    name = ns.name or f"{command}-{args.nodes}x{args.gpus_per_node}"
    root = Path(ns.output_dir).resolve()
    run_path(root, name)  # a name, not a path
    run_flags = ["--output-dir", str(root), "--name", name]
    if command == "scale":  # the sweep's own flags go before the swept command
        cut = extra.index("--") if "--" in extra else len(extra)
        program = [command, *run_flags, *without_option(extra[:cut], *RUN_FLAGS), *extra[cut:]]
    else:
        program = [command, *without_option(extra, *RUN_FLAGS), *run_flags]
    if command == "train" and not any(w == "--resume" or w.startswith("--resume=") for w in extra):
        program += ["--resume", "auto"]  # a requeued job continues from the run's checkpoints
    workers = loader_workers(command, extra, where="the arguments of the job's command")
    job = SlurmJob(program=tuple(program), run_dir=root / name, log=root / name / "slurm-%j.log",
                   nodes=args.nodes, procs_per_node=args.gpus_per_node, launcher=args.launcher,
                   job_name=args.job_name or f"dlscale-{name}", loader_workers=workers, **job_options(args))
    job.check()
    return job, (args.script or root / name / "job.sbatch").resolve()


def _written_by(job: SlurmJob) -> list[str]:
    """The `dlscale slurm` command that writes this script again."""
    flags = ["--nodes", str(job.nodes), "--gpus-per-node", str(job.procs_per_node)]
    optional = [("--launcher", job.launcher, "torchrun"), ("--partition", job.partition, None),
                ("--time", job.time, None), ("--account", job.account, None),
                ("--cpus-per-task", job.cpus_per_task, None), ("--cpus-per-node", job.cpus_per_node, None),
                ("--mem", job.mem, None), ("--mem-per-gpu", job.mem_per_gpu, None),
                ("--max-restarts", job.max_restarts, 0),
                ("--signal-seconds", job.signal_s, 120), ("--python", job.python, sys.executable)]
    flags += [x for flag, value, default in optional if value != default for x in (flag, str(value))]
    flags += ["--cpu-only"] if not job.request_gpus else []
    flags += [f"--sbatch-option={option}" for option in job.sbatch_options]
    return ["dlscale", "slurm", *flags, *job.program]


JOB_KINDS = {"bench": "bench", "train": "train", "scale": "sweep"}
"""The kind of run directory each job command makes."""


def run(args: argparse.Namespace) -> int:
    job, script = build_job(args)
    text = sbatch_script(job, written_by=_written_by(job))  # every value checked before anything is written
    # Both outputs checked before anything is printed: sbatch does not create the log's folder. The run directory
    # is made for the job's command (its script and SLURM's log go there first): never another run's.
    check_output_file(script, "--script")
    RunDir.prepare(job.run_dir, JOB_KINDS[job.command], shlex.join(_written_by(job)),
                   reuse=job.command == "train")  # a training job resumes in its own run directory
    print(text, end="", flush=True)
    write_script(script, text)
    print(f"\nWrote {script}", flush=True)
    if not args.submit:
        print(f"Submit it with: sbatch {shlex.quote(str(script))}")
        return 0
    job_id = submit(script)
    log = str(job.log).replace("%j", job_id)
    print(f"Submitted batch job {job_id}; log: {log}")
    print(f"Follow it with: squeue -j {job_id}; tail -f {shlex.quote(log)}")
    return 0
