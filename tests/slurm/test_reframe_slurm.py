"""dlscale's ReFrame test library against the one-node SLURM cluster (see conftest.py): ReFrame
submits the bench (2 ranks started by srun) and the scaling sweep as sbatch jobs, follows them
with squeue, and passes them on the figures they printed, which its perflog keeps."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("reframe")
from reframe_run import TINY, perf, perflog, run_reframe  # noqa: E402 - after the skip

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(480)]


def test_bench_and_sweep_as_slurm_jobs(slurm_cluster, tmp_path):
    out, cases, prefix = run_reframe(tmp_path / "rfm", "dlscale-ci:slurm", "-n", "^dlscale_(bench|scale)$", *TINY,
                                     "-S", "dlscale_bench.devices_per_node=2", "-S", "dlscale_scale.devices_per_node=2",
                                     "-r")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    bench, scale = cases["dlscale_bench"], cases["dlscale_scale"]
    assert bench["result"] == scale["result"] == "pass"
    assert bench["scheduler"] == "squeue" and re.fullmatch(r"\d+", str(bench["jobid"]))

    output = prefix / "output" / "dlscale-ci" / "slurm" / "builtin"
    script = (output / "dlscale_bench" / "rfm_job.sh").read_text()
    assert "#SBATCH --ntasks=2" in script and re.search(r"^srun \S+ -m dlscale bench ", script, re.M)
    printed = (output / "dlscale_bench" / "rfm_job.out").read_text()
    total = float(re.search(r"^Total img/sec on 2 CPU\(s\): (\S+) \+-", printed, re.M).group(1))
    summary = json.loads((output / "dlscale_bench" / "runs" / "bench" / "summary.json").read_text())
    assert summary["launcher"] == "slurm" and summary["world_size"] == 2  # the ranks srun started
    assert perf(bench, "throughput_total")[0] == total
    assert f"throughput_total={total} img/s" in perflog(prefix, "slurm", "dlscale_bench")[-1]

    sweep = output / "dlscale_scale" / "runs" / "sweep"
    rates = {n: json.loads((sweep / f"world{n}" / "summary.json").read_text())["img_per_sec_total_mean"]
             for n in (1, 2)}
    efficiency = perf(scale, "efficiency_w2")[0]
    assert efficiency == pytest.approx(100 * (rates[2] / 2) / rates[1], abs=0.051)
    assert f"efficiency_w2={efficiency} %" in perflog(prefix, "slurm", "dlscale_scale")[-1]
