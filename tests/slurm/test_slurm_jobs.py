"""Generated job scripts on a real one-node SLURM cluster (see conftest.py).

Kept in one module because a requeue costs the cluster's credential lifetime before the job
may start again (cred_expire, 10 s on the test cluster, 120 s on a default one).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch

from dlscale.cli import main
from dlscale.launch import slurm_jobs as jobs

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

BENCH = ["bench", "--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4",
         "--num-iters", "3", "--num-batches-per-iter", "2", "--num-warmup-batches", "1", "--num-classes", "10"]
# Eight short epochs (22 steps each, 2 ranks): long enough to signal in the first epochs, short
# enough that each run takes well under a minute on 2 cores.
TRAIN = ["train", "--config", "cpu:digits", "--set", "model.width=8", "--set", "schedule.epochs=8",
         "--set", "log_every=2", "--pg-timeout", "60"]
JOB_TIMEOUT_S = 300


def _submit(capsys, *argv: str) -> str:
    assert main(["slurm", "--cpu-only", "--submit", *argv]) == 0
    out = capsys.readouterr().out
    requeued = "train" in argv  # the script is printed before it is submitted; only train is requeued
    assert ("#SBATCH --requeue" in out) == requeued and ("#SBATCH --no-requeue" in out) == (not requeued)
    return re.search(r"Submitted batch job (\d+)", out).group(1)


def _log(run_dir: Path, job_id: str) -> str:
    """The job's log, or what SLURM says about a job that never started."""
    path = run_dir / f"slurm-{job_id}.log"
    if path.exists():
        return path.read_text()
    sinfo = subprocess.run(["sinfo", "-N", "-l"], capture_output=True, text=True).stdout
    return f"(no log) {_show(job_id)}\n{sinfo}"


def _show(job_id: str) -> str:
    return subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout


def test_generated_bench_scripts_complete_with_a_summary(slurm_cluster, tmp_path, capsys):
    torchrun = _submit(capsys, "--gpus-per-node", "2", *BENCH, "--output-dir", str(tmp_path), "--name", "agent")
    srun = _submit(capsys, "--gpus-per-node", "2", "--launcher", "srun", *BENCH, "--output-dir", str(tmp_path),
                   "--name", "tasks")
    states = jobs.wait([torchrun, srun], poll_s=1, timeout_s=JOB_TIMEOUT_S)
    for job_id, name, launcher in ((torchrun, "agent", "torchrun"), (srun, "tasks", "slurm")):
        log = _log(tmp_path / name, job_id)
        assert states[job_id] == "COMPLETED", log
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["world_size"] == 2 and summary["launcher"] == launcher, summary
        assert "Total img/sec on 2 CPU(s)" in log
        assert jobs.point_outcome(job_id, states[job_id], tmp_path / name) == ("ok", "")


def test_two_point_sweep_through_slurm_reports_failed_and_cancelled_points(slurm_cluster, tmp_path):
    from dlscale.report.load import load

    sweep = tmp_path / "sweep"
    points = {name: jobs.submit_point(name, BENCH, world, 2, sweep, request_gpus=False)
              for name, world in (("world1", 1), ("world2", 2))}
    points["broken"] = jobs.submit_point("broken", [*BENCH[:2], "no_such_model", *BENCH[3:]], 1, 2, sweep,
                                           request_gpus=False)
    points["cancelled"] = jobs.submit_point("cancelled", BENCH, 2, 2, sweep, request_gpus=False)
    jobs.cancel([points["cancelled"]])
    states = jobs.wait(points.values(), poll_s=1, timeout_s=JOB_TIMEOUT_S)
    outcome = {name: jobs.point_outcome(job, states[job], sweep / name) for name, job in points.items()}
    logs = {name: (sweep / "logs" / f"{name}.log") for name in points}
    assert outcome["world1"] == ("ok", "") and outcome["world2"] == ("ok", ""), {n: p.read_text() for n, p in
                                                                                 logs.items() if p.exists()}
    assert states[points["broken"]] == "FAILED" and outcome["broken"][0] == "failed"
    assert states[points["cancelled"]] == "CANCELLED" and outcome["cancelled"][0] == "failed"
    assert (sweep / "jobs" / "world2.sbatch").read_text().count("--nproc-per-node=2") == 1
    # As `dlscale scale --launcher slurm` records it: the report reads it like a local sweep.
    records = [{"name": name, "run_dir": name, "world_size": {"world1": 1}.get(name, 2), "nnodes": 1,
                "status": status, "error": error, "job_id": points[name]} for name, (status, error) in outcome.items()]
    (sweep / "sweep.json").write_text(json.dumps({"kind": "sweep", "launcher": "slurm", "points": records}))
    found = load([sweep])
    assert sorted(r.world_size for r in found.runs) == [1, 2]
    assert sorted(f.name for f in found.failed) == ["broken", "cancelled"]


def _weights(run_dir: Path) -> dict:
    from dlscale.train.checkpoint import CheckpointManager

    return CheckpointManager(run_dir / "checkpoints").load_latest()["model"]


def _wait_for(predicate, what: str, timeout_s: float = JOB_TIMEOUT_S, job_id: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {_show(job_id)}"
        time.sleep(0.2)


def test_usr1_checkpoints_requeues_and_resumes_to_the_uninterrupted_weights(slurm_cluster, tmp_path, capsys):
    cut = tmp_path / "cut"
    job = _submit(capsys, "--gpus-per-node", "2", *TRAIN, "--output-dir", str(tmp_path), "--name", "cut")
    # Signal once training has logged its first steps, as the scheduler would near the time limit.
    _wait_for(lambda: (cut / "metrics.jsonl").is_file() and (cut / "metrics.jsonl").stat().st_size > 0,
              "the first training log record", job_id=job)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True)
    _wait_for(lambda: "Restarts=1" in _show(job), "the requeue", job_id=job)
    # The uninterrupted run goes while the requeued job waits to become eligible again.
    clean = _submit(capsys, "--gpus-per-node", "2", *TRAIN, "--output-dir", str(tmp_path), "--name", "clean")
    states = jobs.wait([job, clean], poll_s=1, timeout_s=JOB_TIMEOUT_S)
    log = _log(cut, job)
    assert states == {job: "COMPLETED", clean: "COMPLETED"}, log + _log(tmp_path / "clean", clean)

    assert "USR1: asking the workers to checkpoint" in log
    stopped = re.search(r"stopped by SIGUSR1 at epoch (\d+) step (\d+)", log)
    assert stopped, log
    step = int(stopped.group(2))
    assert f"checkpoint (preemption): {cut / 'checkpoints'}" in log
    assert "(restart 1)" in log and f"resumed at epoch {stopped.group(1)} step {step} from {cut / 'checkpoints'}" in log
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["steps"] == 8 * 22 > step and summary["epochs_completed"] == 8 and not summary["preempted"]
    expected, actual = _weights(tmp_path / "clean"), _weights(cut)
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key
