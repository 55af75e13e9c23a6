"""Running a sweep's points through a registry of launchers; sweep.json follows every point.

    runs/sweep-<time>/sweep.json            the plan and each point's status (rewritten as points change)
    runs/sweep-<time>/<point>/              the point's run directory (summary.json, ...)
    runs/sweep-<time>/logs/<point>.log      everything the point printed

A launcher runs the planned points and records how each ended: `PointByPoint` runs them one
after another on this host through a function (spec, point, sweep_dir) -> Outcome (torchrun);
`SlurmJobs` submits every point as its own SLURM job first (they run side by side on a
cluster), then waits for all. A point that fails is recorded and the sweep goes on. Adding a
launcher is one class and one line in SWEEP_LAUNCHERS.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from dlscale.errors import ConfigError, shown
from dlscale.launch import local, slurm_jobs
from dlscale.launch.errors import tail_text
from dlscale.metrics.progress import ProgressDisplay
from dlscale.rundir import RunDir, check_output_dir, is_run
from dlscale.sweep.plan import Point, SweepSpec, given

Say = Callable[[str], None]
Save = Callable[[], None]


@dataclass
class Outcome:
    """How a launched point ended."""

    returncode: int | None
    timed_out: bool = False
    error: str = ""
    """The launcher's own explanation (a SLURM job state); empty: read the error from the logs."""
    logs: list[Path] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)


class Launcher(Protocol):
    def prepare(self, spec: SweepSpec, points: list[Point], sweep_dir: Path) -> None:
        """Adjust the planned points (a node layout) before anything is written; refuses what cannot run."""

    def header(self, spec: SweepSpec) -> dict:
        """The launcher's own fields of sweep.json's header."""

    def run(self, spec: SweepSpec, points: list[Point], sweep_dir: Path, save: Save, out: Say) -> None:
        """Run (or submit) the points, setting each one's status; save() rewrites sweep.json."""


# ------------------------------------------------------------------------- point by point


def program(point: Point, sweep_dir: Path) -> list[str]:
    """The point's dlscale command for `python`, writing its run directory inside the sweep."""
    return ["-m", "dlscale", *point.argv, "--output-dir", str(sweep_dir), "--name", point.name]


def run_here(commands: list[list[str]], point: Point, sweep_dir: Path, timeout_s: float) -> Outcome:
    """Start the commands together on this host, one log each: logs/<point>.log, .node1.log, ..."""
    logs = [sweep_dir / "logs" / (f"{point.name}.log" if i == 0 else f"{point.name}.node{i}.log")
            for i in range(len(commands))]
    code, timed_out = local.run_commands(commands, logs, timeout_s)
    return Outcome(code, timed_out, logs=logs, commands=commands)


def launch_torchrun(spec: SweepSpec, point: Point, sweep_dir: Path) -> Outcome:
    commands = local.torchrun_commands(point.nproc_per_node, point.nnodes, program(point, sweep_dir))
    return run_here(commands, point, sweep_dir, spec.timeout_s)


class PointByPoint:
    """One point at a time on this host, each through launch(spec, point, sweep_dir) -> Outcome."""

    def __init__(self, launch: Callable[[SweepSpec, Point, Path], Outcome]) -> None:
        self.launch = launch

    def prepare(self, spec: SweepSpec, points: list[Point], sweep_dir: Path) -> None:
        """Every point's ranks (its emulated nodes' together) must fit this host's memory."""
        for point in points:
            nodes = f" --nnodes {point.nnodes}" if point.nnodes > 1 else ""
            local.check_local_ranks(point.nproc_per_node * point.nnodes, f"--nproc {point.nproc_per_node}{nodes}")

    def header(self, spec: SweepSpec) -> dict:
        return {}

    def run(self, spec: SweepSpec, points: list[Point], sweep_dir: Path, save: Save, out: Say) -> None:
        for i, point in enumerate(points, 1):
            out(f"[{i}/{len(points)}] world size {point.world_size}" + (f" ({point.series})" if point.series else "")
                + f": {point.name}")
            point.status = "running"
            save()  # sweep.json and the progress display name the running point
            try:
                self._run_point(spec, point, sweep_dir)
            except KeyboardInterrupt:
                point.status, point.error = "interrupted", "stopped by Ctrl-C"
                save()
                raise
            save()
            detail = f" (rc {point.returncode}): {point.error}" if point.status != "ok" else ""
            out(f"    {point.status} in {point.elapsed_s:.1f} s{detail}")

    def _run_point(self, spec: SweepSpec, point: Point, sweep_dir: Path) -> None:
        start = time.monotonic()
        outcome = self.launch(spec, point, sweep_dir)
        point.elapsed_s = time.monotonic() - start
        point.returncode, point.commands = outcome.returncode, outcome.commands
        point.logs = [os.path.relpath(p, sweep_dir) for p in outcome.logs]
        text = "\n".join(map(tail_text, outcome.logs))  # each log's end: the error is there
        if outcome.timed_out:
            point.status, point.error = "timeout", outcome.error or f"stopped after {spec.timeout_s:g} s (--timeout)"
        elif outcome.returncode != 0:
            point.status, point.error = "failed", outcome.error or error_summary(text)
        elif not is_run(sweep_dir / point.name):
            point.status, point.error = "failed", "exited 0 but wrote no summary.json"
        else:
            point.status = "ok"
        if point.status != "ok":
            point.error_tail = "\n".join(text.splitlines()[-20:])


ERROR_LINE = re.compile(r"dlscale \w+: error: .*")


def error_summary(text: str) -> str:
    """The line that says what went wrong: our one-line error, else the last exception line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    ours = [m.group(0) for line in lines if (m := ERROR_LINE.search(line))]
    if ours:
        return ours[0][:300]
    raised = [line for line in lines if re.match(r"^\w+(\.\w+)*(Error|Exception)\b", line)]
    return (raised or lines or ["no output"])[-1][:300]


# ------------------------------------------------------------------------------ SLURM jobs


class SlurmJobs:
    """One SLURM job per point (an sbatch script whose run directory is the point's directory in the
    sweep), all submitted first, then (unless the options say wait=False) waited for. A job that
    ends FAILED, CANCELLED, NODE_FAIL or OUT_OF_MEMORY, or COMPLETED without a summary, is a failed
    point, as a failed local point is. Ctrl-C, an error or --timeout cancels the jobs not ended."""

    def prepare(self, spec: SweepSpec, points: list[Point], sweep_dir: Path) -> None:
        """World size -> nodes x GPUs per node, filling a node first; refuses partial nodes, and every job whose
        script could not be written (a control character in a flag, a time SLURM does not read), up front."""
        options = spec.launcher_options
        for point in points:
            point.nnodes, point.nproc_per_node = slurm_jobs.node_layout(point.world_size, options["gpus_per_node"])
            slurm_jobs.point_job(point.name, _resumable(point.argv), point.world_size, options["gpus_per_node"],
                                 sweep_dir, **options["job"]).check()

    def header(self, spec: SweepSpec) -> dict:
        return {"gpus": list(spec.nproc), "gpus_per_node": spec.launcher_options["gpus_per_node"]}

    def run(self, spec: SweepSpec, points: list[Point], sweep_dir: Path, save: Save, out: Say) -> None:
        options = spec.launcher_options
        started = time.monotonic()
        try:
            for i, point in enumerate(points, 1):
                point.job_id = slurm_jobs.submit_point(point.name, _resumable(point.argv), point.world_size,
                                                       options["gpus_per_node"], sweep_dir, **options["job"])
                point.status, point.logs = "submitted", [f"logs/{point.name}.log"]
                point.commands = [["sbatch", f"jobs/{point.name}.sbatch"]]
                save()
                out(f"[{i}/{len(points)}] world size {point.world_size} ({point.nnodes} node(s) x "
                    f"{point.nproc_per_node})" + (f" ({point.series})" if point.series else "")
                    + f": {point.name}, SLURM job {point.job_id}")
            if not options.get("wait", True):
                return
            ids = {p.job_id: p for p in points}
            states = slurm_jobs.wait(ids, poll_s=options.get("poll_s", 10.0), timeout_s=spec.timeout_s,
                                     on_change=lambda job, state: _on_change(ids[job], state, started, save, out))
        except BaseException:
            unfinished = [p for p in points if p.status in ("pending", "submitted", "running")]
            slurm_jobs.cancel(p.job_id for p in unfinished if p.job_id)
            for p in unfinished:
                p.status, p.error = "interrupted", "stopped by Ctrl-C or an error; its SLURM job was cancelled"
            save()
            raise
        for point in points:
            _slurm_outcome(spec, point, states[point.job_id], sweep_dir)
        slurm_jobs.cancel(p.job_id for p in points if p.status == "timeout" and states[p.job_id] != "TIMEOUT")
        save()


def _resumable(argv: list[str]) -> list[str]:
    """A requeued training job continues from the run's checkpoints."""
    if argv[0] == "train" and not given(argv, "--resume"):
        return [*argv, "--resume", "auto"]
    return argv


def _on_change(point: Point, state: str, started: float, save: Save, out: Say) -> None:
    point.status = "running" if state == "RUNNING" else point.status
    if state in slurm_jobs.TERMINAL_STATES:
        point.elapsed_s = time.monotonic() - started
    out(f"    job {point.job_id} ({point.name}): {state}")
    save()  # sweep.json follows the jobs while the sweep waits


def _slurm_outcome(spec: SweepSpec, point: Point, state: str, sweep_dir: Path) -> None:
    if state in slurm_jobs.TERMINAL_STATES or state == "UNKNOWN":
        point.status, point.error = slurm_jobs.point_outcome(point.job_id, state, sweep_dir / point.name)
    else:
        point.status = "timeout"
        point.error = (f"SLURM job {point.job_id} still {state or 'unanswered'} after {spec.timeout_s:g} s "
                       "(--timeout); cancelled")
    if point.status != "ok":
        log = sweep_dir / "logs" / f"{point.name}.log"
        point.error_tail = "\n".join(tail_text(log).splitlines()[-20:])


# ------------------------------------------------------------------------------- the sweep

SWEEP_LAUNCHERS: dict[str, Launcher] = {"torchrun": PointByPoint(launch_torchrun), "slurm": SlurmJobs()}


def run_sweep(spec: SweepSpec, points: list[Point], sweep_dir: Path, out: Say = print) -> list[Point]:
    """Run planned points (dlscale.sweep.plan.plan_points) into sweep_dir; returns them with their
    status. Points still 'submitted' afterwards run on without the sweep (slurm, wait=False)."""
    if spec.launcher not in SWEEP_LAUNCHERS:
        raise ConfigError(f"--launcher {shown(spec.launcher)}: choose one of {', '.join(SWEEP_LAUNCHERS)}")
    launcher = SWEEP_LAUNCHERS[spec.launcher]
    launcher.prepare(spec, points, sweep_dir)
    record = RunDir(sweep_dir).claim("sweep", name_flag="--name")  # a new folder: never another sweep's or run's
    check_output_dir(sweep_dir / "logs", "--output-dir", "the sweep's log folder")
    header = {**_header(spec), **launcher.header(spec)}
    # The sweep only waits for its points: the bar may redraw itself (live) without disturbing them.
    with record, ProgressDisplay(live=True) as bar:

        def save() -> None:
            record.write_sweep({**header, "points": [p.record() for p in points]})
            bar.update(sum(p.status in ENDED for p in points), status=_tally(points), redraw=True)

        bar.start(f"scale: dlscale {spec.command}", len(points), unit="points")
        save()
        out(f"Sweep directory: {sweep_dir} ({spec.mode} scaling, dlscale {spec.command}, {len(points)} points, "
            f"launcher {spec.launcher})")
        launcher.run(spec, points, sweep_dir, save, out)
    return points


ENDED = ("ok", "failed", "timeout", "interrupted")
"""Point states that count as done in the progress display."""


def _tally(points: list[Point]) -> str:
    """`1 ok, 1 failed, running world4`: what the progress display says beside the count."""
    counts = {state: sum(p.status == state for p in points) for state in ENDED}
    parts = [f"{n} {state}" for state, n in counts.items() if n]
    running = [p.name for p in points if p.status == "running"]
    submitted = sum(p.status == "submitted" for p in points)
    if submitted:
        parts.append(f"{submitted} submitted")
    if running:
        parts.append("running " + ", ".join(running))
    return ", ".join(parts)


def _header(spec: SweepSpec) -> dict:
    return {
        "kind": "sweep", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": spec.command, "args": list(spec.args), "mode": spec.mode, "launcher": spec.launcher,
        "nproc": list(spec.nproc), "nnodes": list(spec.nnodes), "dist_optimizers": list(spec.dist_optimizers),
        "precisions": list(spec.precisions), "sets": {key: list(values) for key, values in spec.sets},
        "timeout_s": spec.timeout_s,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
