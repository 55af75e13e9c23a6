"""What a job asks SLURM for besides nodes and GPUs: CPUs per task and memory, each with how it was
derived, which the script's header prints.

CPUs: unless a site sets DefCpuPerGPU, a task gets one CPU, and a torchrun task runs every rank of its
node and their loader workers. So each rank gets its loader workers + 1 (the rank itself), capped by
what a node has when the user says (--cpus-per-node). Since Slurm 22.05 srun no longer inherits
--cpus-per-task from the job: the script exports SRUN_CPUS_PER_TASK and passes --cpus-per-task to srun
(docs/references.md#slurm-cpus-per-task).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlscale.errors import ConfigError

MEMORY = re.compile(r"[1-9][0-9]*[KMGT]?")
"""sbatch's memory sizes: megabytes, or a number with K, M, G or T (ASCII digits, matched whole)."""


@dataclass(frozen=True)
class CpuRequest:
    per_task: int
    """--cpus-per-task."""
    derivation: str
    """How per_task was reached, for the script's header."""


def cpu_request(*, given: int | None, ranks_per_task: int, tasks_per_node: int, loader_workers: int,
                cpus_per_node: int | None) -> CpuRequest:
    """CPUs per task: `given` (--cpus-per-task) as it is, else loader workers + 1 per rank, capped by
    cpus_per_node shared among the node's tasks."""
    if cpus_per_node is not None and cpus_per_node < tasks_per_node:
        raise ConfigError(f"--cpus-per-node {cpus_per_node} is fewer than the {tasks_per_node} tasks a node runs; "
                          "give the cores a node has")
    if given is not None:
        if given < 1:
            raise ConfigError(f"--cpus-per-task {given}: give at least 1")
        if cpus_per_node is not None and given * tasks_per_node > cpus_per_node:
            raise ConfigError(f"--cpus-per-task {given} x {tasks_per_node} task(s) per node is more than "
                              f"--cpus-per-node {cpus_per_node}: no node could run the job")
        return CpuRequest(given, f"{given}, as given (--cpus-per-task)")
    wanted = ranks_per_task * (loader_workers + 1)
    why = f"{ranks_per_task} rank(s) per task x ({loader_workers} loader worker(s) + 1 for the rank) = {wanted}"
    if cpus_per_node is None:
        return CpuRequest(wanted, f"{why}; --cpus-per-node caps it at what a node has")
    cap = cpus_per_node // tasks_per_node
    shared = f" / {tasks_per_node} tasks per node" if tasks_per_node > 1 else ""
    if wanted <= cap:
        return CpuRequest(wanted, f"{why}, within --cpus-per-node {cpus_per_node}{shared}")
    return CpuRequest(cap, f"{why}, capped at {cap} by --cpus-per-node {cpus_per_node}{shared}")


def memory_directive(*, mem: str | None, mem_per_gpu: str | None, request_gpus: bool) -> str | None:
    """`--mem=...` or `--mem-per-gpu=...` as the user gave it, checked; None for the site's default."""
    if mem is not None and mem_per_gpu is not None:
        raise ConfigError("give --mem or --mem-per-gpu, not both (sbatch refuses the pair)")
    if mem_per_gpu is not None and not request_gpus:
        raise ConfigError("--mem-per-gpu with --cpu-only: the job asks for no GPUs; give --mem (per node)")
    for flag, size in (("--mem", mem), ("--mem-per-gpu", mem_per_gpu)):
        if size is not None:
            if not MEMORY.fullmatch(size):  # the whole text: `$` would let a final newline through
                raise ConfigError(f"{flag} {size!r}: give a size as sbatch takes it: megabytes, or a number "
                                  "with K, M, G or T (e.g. 200G)")
            return f"{flag}={size}"
    return None


def header(cpus: CpuRequest, memory: str | None) -> list[str]:
    """The script's comment lines on CPUs and memory."""
    return [
        f"# CPUs per task: {cpus.derivation}.",
        "# Each rank's intra-op threads (OMP_NUM_THREADS): its share of the task's CPUs less its loader workers,",
        "# at least 1 (a loader worker is a process of its own, one thread).",
        f"# Memory: {memory}, as given." if memory else
        "# Memory: the site's default (DefMemPerCPU, DefMemPerGPU or DefMemPerNode); --mem or --mem-per-gpu asks.",
    ]


def cpu_lines(ranks_per_task: int, loader_workers: int) -> list[str]:
    """The script lines that pass the job's CPUs on to srun and set each rank's threads."""
    threads = (f"rank_cpus > {loader_workers + 1} ? rank_cpus - {loader_workers} : 1" if loader_workers
               else "rank_cpus > 1 ? rank_cpus : 1")
    return [
        "# srun no longer inherits --cpus-per-task from the job (Slurm 22.05): pass it on to every srun.",
        "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK",
        f"rank_cpus=$(( SLURM_CPUS_PER_TASK / {ranks_per_task} ))",
        f"export OMP_NUM_THREADS=$(( {threads} ))",
    ]
