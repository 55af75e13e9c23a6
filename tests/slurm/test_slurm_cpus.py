"""The CPUs a generated script asks for reach the ranks, on the one-node cluster (see conftest.py; its slurmd
binds each task to its CPUs, TaskPlugin=task/affinity): every rank's len(os.sched_getaffinity(0)) is the CPUs
per task the script's header derived, fewer than the node has, and its OMP_NUM_THREADS is its share less its
loader workers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.cli import main
from dlscale.launch import slurm_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

TINY_TRAIN = ["train", "--config", "cpu:digits", "--set", "model.width=8", "--set", "schedule.epochs=1",
              "--set", "schedule.warmup_epochs=0", "--set", "max_steps_per_epoch=2", "--set", "log_every=1"]
JOB_TIMEOUT_S = 300
AFFINITY = re.compile(r"^affinity step=(\S+) rank=(\S+) cores=(\d+) threads=(\S+)$", re.MULTILINE)


def _node_cpus() -> int:
    out = subprocess.run(["sinfo", "--noheader", "-o", "%c"], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0].rstrip("+"))


def _reporting_python(tmp_path: Path) -> Path:
    """The job's --python: each srun task says which cores it may run on (to stderr, which the job's log
    holds, so that the script's own `$("$PYTHON" -c ...)` reads only Python's answer), then becomes Python."""
    wrapper = tmp_path / "python"
    cores = f'{sys.executable} -c "import os; print(len(os.sched_getaffinity(0)))"'
    wrapper.write_text("#!/bin/sh\n"
                       f'echo "affinity step=${{SLURM_STEP_ID:-none}} rank=${{SLURM_PROCID:-none}} cores=$({cores}) '
                       'threads=${OMP_NUM_THREADS:-unset}" >&2\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def _submit(capsys, *argv: str) -> tuple[str, str]:
    assert main(["slurm", "--cpu-only", "--submit", *argv]) == 0
    out = capsys.readouterr().out
    return re.search(r"Submitted batch job (\d+)", out).group(1), out


def _step_lines(log: str) -> list[tuple[str, int, str]]:
    """(rank, cores, threads) of each srun task's report; the batch script's own calls are left out."""
    return [(rank, int(cores), threads) for step, rank, cores, threads in AFFINITY.findall(log) if step != "none"]


def test_each_rank_runs_on_the_cores_the_script_asked_for(slurm_cluster, tmp_path, capsys):
    node = _node_cpus()
    if node < 2:
        pytest.skip(f"the test node has {node} CPU: asking for fewer than it has needs 2")
    python = _reporting_python(tmp_path)
    # One rank, one loader worker: 1 x (1 + 1) = 2 CPUs per task, in each layout; a bench rank has no
    # workers: 1 CPU. SLURM's default without the request would be 1 CPU per task.
    jobs = {
        "srun2": ["--gpus-per-node", "1", "--launcher", "srun", *TINY_TRAIN, "--set", "data.num_workers=1"],
        "agent2": ["--gpus-per-node", "1", *TINY_TRAIN, "--set", "data.num_workers=1"],
        "srun1": ["--gpus-per-node", "1", "--launcher", "srun", "bench", "--model", "resnet18", "--width", "8",
                  "--image-size", "32", "--batch-size", "2", "--num-iters", "1", "--num-batches-per-iter", "1",
                  "--num-warmup-batches", "1", "--num-classes", "10"],
    }
    submitted = {}
    for name, argv in jobs.items():
        job_id, script = _submit(capsys, "--python", str(python), "--cpus-per-node", str(node), *argv,
                                 "--output-dir", str(tmp_path), "--name", name)
        submitted[name] = job_id
        asked = int(re.search(r"#SBATCH --cpus-per-task=(\d+)", script).group(1))
        assert asked == (1 if name == "srun1" else 2), script
    states = slurm_jobs.wait(submitted.values(), poll_s=1, timeout_s=JOB_TIMEOUT_S)
    logs = {name: (tmp_path / name / f"slurm-{job}.log").read_text() for name, job in submitted.items()}
    assert all(state == "COMPLETED" for state in states.values()), logs

    assert _step_lines(logs["srun2"]) == [("0", 2, "1")], logs["srun2"]  # 2 cores: 1 loader worker + the rank
    assert _step_lines(logs["srun1"]) == [("0", 1, "1")], logs["srun1"]
    assert _step_lines(logs["agent2"]) == [("0", 2, "1")], logs["agent2"]  # the agent's task: its workers' too
    env = json.loads((tmp_path / "agent2" / "env.json").read_text())  # what rank 0 itself recorded
    assert env["cpu_available"] == 2 and env["env_vars"]["OMP_NUM_THREADS"] == "1", env
    assert "2 CPUs per task, OMP_NUM_THREADS=1" in logs["agent2"]
