"""`dlscale bench --wrap-single-rank` as a user runs it: DDP around one process's model, started plainly
and under torchrun as one rank (on the CPU: a one-rank gloo group; on a GPU NCCL, tests/gpu)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
TINY = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4", "--num-classes", "10",
        "--num-warmup-batches", "2", "--num-batches-per-iter", "2", "--num-iters", "2"]
LAUNCHERS = {
    "single": [sys.executable, "-m", "dlscale"],
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
                 "-m", "dlscale"],
}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_bench_wraps_one_rank(launcher, tmp_path):
    env = {"OMP_NUM_THREADS": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(SRC)}
    out = subprocess.run([*LAUNCHERS[launcher], "bench", *TINY, "--wrap-single-rank", "--json", "result.json",
                          "--output-dir", "runs"], cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "DDP wraps the model on this one rank (--wrap-single-rank; a one-rank gloo group)" in out.stdout
    assert "Total img/sec on 1 CPU(s)" in out.stdout
    summary = json.loads((tmp_path / "result.json").read_text())
    assert (summary["world_size"], summary["wrap_single_rank"], summary["launcher"]) == (1, True, launcher)
    assert summary["compile_facts"] is None  # an eager run
