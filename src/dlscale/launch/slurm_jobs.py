"""Submitting and waiting on SLURM jobs: `submit`, `job_state`, `wait`, `cancel`, `point_outcome` and
`submit_point` shell out to sbatch, scontrol, sacct and scancel, and are what `dlscale scale --launcher
slurm` calls for one job per point (the scripts themselves: slurm.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.launch.slurm import SlurmJob, sbatch_script, write_script
from dlscale.rundir import check_output_dir, is_run

OK_STATES = frozenset({"COMPLETED"})
FAILED_STATES = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                           "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"})
"""States a job does not leave. A preempted job with --requeue goes back to PENDING instead."""
TERMINAL_STATES = OK_STATES | FAILED_STATES


def _slurm_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ConfigError(f"{name} is not on PATH: run this on a SLURM login node (or drop --submit)")
    return path


def submit(script: Path) -> str:
    """`sbatch --parsable SCRIPT` -> the job id."""
    out = subprocess.run([_slurm_tool("sbatch"), "--parsable", str(script)], capture_output=True, text=True)
    if out.returncode != 0:
        message = (out.stderr.strip().splitlines() or ["no message"])[-1]
        if "node configuration is not available" in message:
            message += ("; no node has what the script asks: its header says how many CPUs per task and why, "
                        "and --cpus-per-node C keeps them within the C cores a node has")
        raise ConfigError(f"sbatch refused {script}: {message}")
    return out.stdout.strip().split(";")[0]


def job_state(job_id: str) -> str:
    """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...; UNKNOWN when SLURM has no
    record of the job; '' when the controller could not be asked (busy, restarting): ask again."""
    out = subprocess.run([_slurm_tool("scontrol"), "show", "job", "-o", job_id], capture_output=True, text=True)
    match = re.search(r"\bJobState=(\S+)", out.stdout)
    if out.returncode == 0 and match:
        return match.group(1)
    if "invalid job id" not in out.stderr.lower():
        return ""
    # Purged from the controller (MinJobAge): ask the accounting database, where there is one.
    if shutil.which("sacct"):
        acct = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"],
                              capture_output=True, text=True)
        words = acct.stdout.split()
        if acct.returncode == 0 and words:
            return words[0]
    return "UNKNOWN"


def wait(job_ids: Iterable[str], poll_s: float = 10.0, timeout_s: float | None = None,
         on_change: Callable[[str, str], None] | None = None) -> dict[str, str]:
    """Poll until every job has ended (or timeout_s passed); {job id: last state seen}.

    A requeued job goes back to PENDING and is waited for again. UNKNOWN is treated as ended:
    a job SLURM no longer knows will not finish later.
    """
    states = {job_id: "" for job_id in job_ids}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        for job_id, old in states.items():
            if old in TERMINAL_STATES or old == "UNKNOWN":
                continue
            new = job_state(job_id)
            if new and new != old:
                states[job_id] = new
                if on_change:
                    on_change(job_id, new)
        done = all(s in TERMINAL_STATES or s == "UNKNOWN" for s in states.values())
        if done or (deadline is not None and time.monotonic() >= deadline):
            return states
        time.sleep(poll_s)


def cancel(job_ids: Iterable[str]) -> None:
    ids = list(job_ids)
    if ids:
        subprocess.run([_slurm_tool("scancel"), *ids], capture_output=True, text=True)


def point_outcome(job_id: str, state: str, run_dir: Path) -> tuple[str, str]:
    """A finished job as a sweep point: ('ok' | 'failed' | 'timeout', why)."""
    if state in OK_STATES:
        if is_run(run_dir):
            return "ok", ""
        return "failed", f"SLURM job {job_id} COMPLETED but wrote no {run_dir / 'summary.json'}"
    if state == "TIMEOUT":
        return "timeout", f"SLURM job {job_id} reached its time limit (--time)"
    return "failed", f"SLURM job {job_id} ended {state or 'UNKNOWN'}; see its log"


def node_layout(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) for a world size, filling one node before using the next."""
    if gpus < 1 or gpus_per_node < 1:
        raise ConfigError("--gpus and --gpus-per-node must be positive")
    if gpus <= gpus_per_node:
        return 1, gpus
    if gpus % gpus_per_node:
        raise ConfigError(
            f"{gpus} GPUs do not fill whole nodes of {gpus_per_node}; use multiples of {gpus_per_node} above one node"
        )
    return gpus // gpus_per_node, gpus_per_node


def point_job(name: str, argv: Sequence[str], world_size: int, gpus_per_node: int, sweep_dir: Path,
              **options) -> SlurmJob:
    """The job of one sweep point (submit_point's), checked by the sweep before it starts."""
    sweep_dir = Path(sweep_dir).resolve()
    nodes, per_node = node_layout(world_size, gpus_per_node)
    options = dict(options)
    return SlurmJob(program=(*argv, "--output-dir", str(sweep_dir), "--name", name), run_dir=sweep_dir / name,
                    log=sweep_dir / "logs" / f"{name}.log", nodes=nodes, procs_per_node=per_node,
                    job_name=options.pop("job_name", f"dlscale-{name}"), **options)


def submit_point(name: str, argv: Sequence[str], world_size: int, gpus_per_node: int, sweep_dir: Path,
                 **options) -> str:
    """One sweep point as one SLURM job: writes SWEEP/jobs/NAME.sbatch, submits it, returns the id.

    argv is the point's dlscale command ('bench' or 'train' and its flags) without --output-dir
    and --name; the run directory is SWEEP/NAME and the log SWEEP/logs/NAME.log (appended to
    across requeues). options are further SlurmJob fields (partition, time, account, request_gpus, ...).
    """
    job = point_job(name, argv, world_size, gpus_per_node, sweep_dir, **options)
    script = job.run_dir.parent / "jobs" / f"{name}.sbatch"
    write_script(script, sbatch_script(job))
    check_output_dir(job.log.parent, "--output-dir", "the sweep's log folder")
    return submit(script)
