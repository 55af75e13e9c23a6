"""`dlscale scale --launcher slurm`: one SLURM job per point, submitted together, then waited for.

Each point becomes an sbatch script (dlscale.dist.launch) whose run directory is the point's
directory in the sweep; a job that ends FAILED, CANCELLED, NODE_FAIL or OUT_OF_MEMORY, or
COMPLETED without a summary, is a failed point, as a failed local point is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from dlscale.sweep import Point, SweepSpec, _given


def lay_out_on_nodes(points: list[Point], gpus_per_node: int) -> None:
    """World size -> nodes x GPUs per node, filling a node first; refuses partial nodes up front."""
    from dlscale.dist.launch import node_layout

    for point in points:
        point.nnodes, point.nproc_per_node = node_layout(point.world_size, gpus_per_node)


def run_on_slurm(spec: SweepSpec, points: list[Point], sweep_dir: Path, save: Callable[[], None],
                 out: Callable[[str], None]) -> None:
    """Submit every point, then (unless options say wait=False) wait for all and record how each
    ended. Ctrl-C, an error or --timeout cancels the jobs that have not ended."""
    from dlscale.dist import launch

    options = spec.launcher_options
    started = time.monotonic()
    try:
        for i, point in enumerate(points, 1):
            point.job_id = launch.submit_point(point.name, _resumable(point.argv), point.world_size,
                                               options["gpus_per_node"], sweep_dir, **options["job"])
            point.status, point.logs = "submitted", [f"logs/{point.name}.log"]
            point.commands = [["sbatch", f"jobs/{point.name}.sbatch"]]
            save()
            out(f"[{i}/{len(points)}] world size {point.world_size} ({point.nnodes} node(s) x {point.nproc_per_node})"
                + (f" ({point.series})" if point.series else "") + f": {point.name}, SLURM job {point.job_id}")
        if not options.get("wait", True):
            return
        ids = {p.job_id: p for p in points}
        states = launch.wait(ids, poll_s=options.get("poll_s", 10.0), timeout_s=spec.timeout_s,
                             on_change=lambda job, state: _on_change(ids[job], state, started, save, out))
    except BaseException:
        unfinished = [p for p in points if p.status in ("pending", "submitted", "running")]
        launch.cancel(p.job_id for p in unfinished if p.job_id)
        for p in unfinished:
            p.status, p.error = "interrupted", "stopped by Ctrl-C or an error; its SLURM job was cancelled"
        save()
        raise
    for point in points:
        _slurm_outcome(spec, point, states[point.job_id], sweep_dir)
    launch.cancel(p.job_id for p in points if p.status == "timeout" and states[p.job_id] != "TIMEOUT")
    save()


def _resumable(argv: list[str]) -> list[str]:
    """A requeued training job continues from the run's checkpoints."""
    if argv[0] == "train" and not _given(tuple(argv), "--resume"):
        return [*argv, "--resume", "auto"]
    return argv


def _on_change(point: Point, state: str, started: float, save: Callable[[], None],
               out: Callable[[str], None]) -> None:
    from dlscale.dist.launch import TERMINAL_STATES

    point.status = "running" if state == "RUNNING" else point.status
    if state in TERMINAL_STATES:
        point.elapsed_s = time.monotonic() - started
    out(f"    job {point.job_id} ({point.name}): {state}")
    save()  # sweep.json follows the jobs while the sweep waits


def _slurm_outcome(spec: SweepSpec, point: Point, state: str, sweep_dir: Path) -> None:
    from dlscale.dist.launch import TERMINAL_STATES, point_outcome

    if state in TERMINAL_STATES or state == "UNKNOWN":
        point.status, point.error = point_outcome(point.job_id, state, sweep_dir / point.name)
    else:
        point.status = "timeout"
        point.error = f"SLURM job {point.job_id} still {state or 'unanswered'} after {spec.timeout_s:g} s " \
                      "(--timeout); cancelled"
    if point.status != "ok":
        log = sweep_dir / "logs" / f"{point.name}.log"
        point.error_tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.is_file() else ""
