"""`dlscale scale --launcher slurm`: one job per point on the one-node cluster (see conftest.py),
waited for or not, and `dlscale report` reading the sweep as it reads a local one."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest

from dlscale.cli import main
from dlscale.launch import slurm_jobs as jobs

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

BENCH = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4", "--num-iters", "2",
         "--num-batches-per-iter", "2", "--num-warmup-batches", "1", "--num-classes", "10"]
JOB_TIMEOUT_S = 240


def _scale(sweep: Path, *flags: str) -> int:
    return main(["scale", "--launcher", "slurm", "--gpus", "1,2", "--gpus-per-node", "2", "--cpu-only",
                 "--poll", "1", "--timeout", str(JOB_TIMEOUT_S), "--output-dir", str(sweep.parent),
                 "--name", sweep.name, *flags, "--", *BENCH])


def _points(sweep: Path) -> list[dict]:
    return json.loads((sweep / "sweep.json").read_text())["points"]


def _logs(sweep: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted((sweep / "logs").glob("*.log")))


def _report_worlds(sweep: Path) -> list[int]:
    assert main(["report", str(sweep), "-o", str(sweep / "report")]) == 0
    with open(sweep / "report" / "scaling.csv") as f:
        return sorted(int(row["world_size"]) for row in csv.DictReader(f))


def test_scale_waits_for_one_job_per_point_and_reports_them(slurm_cluster, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    code = _scale(sweep)
    out = capsys.readouterr().out
    points = _points(sweep)
    assert code == 0, out + _logs(sweep)
    assert [(p["world_size"], p["status"]) for p in points] == [(1, "ok"), (2, "ok")], points
    assert all(p["job_id"] and (sweep / p["name"] / "summary.json").is_file() for p in points)
    assert (sweep / "jobs" / "world2.sbatch").read_text().count("--nproc-per-node=2") == 1
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert [line.split("|")[2].strip() for line in table[2:]] == ["1", "2"], out  # world size column
    assert _report_worlds(sweep) == [1, 2]


def test_no_wait_returns_once_submitted_and_report_reads_the_finished_jobs(slurm_cluster, tmp_path, capsys):
    sweep = tmp_path / "later"
    start = time.monotonic()
    assert _scale(sweep, "--no-wait") == 0
    returned_s = time.monotonic() - start
    out = capsys.readouterr().out
    points = _points(sweep)
    assert [p["status"] for p in points] == ["submitted", "submitted"], points
    ids = [p["job_id"] for p in points]
    assert f"squeue -j {','.join(ids)}" in out and f"dlscale report {sweep}" in out
    assert returned_s < 15, returned_s  # the jobs (about 10 s each here) were not waited for
    states = jobs.wait(ids, poll_s=1, timeout_s=JOB_TIMEOUT_S)
    assert set(states.values()) == {"COMPLETED"}, (states, _logs(sweep))
    assert _report_worlds(sweep) == [1, 2]
