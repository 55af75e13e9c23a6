"""`dlscale bench --wrap-single-rank` as a user runs it: DDP around one process's model, started plainly
and under torchrun as one rank (on the CPU: a one-rank gloo group; on a GPU NCCL, tests/gpu)."""

import json

import pytest
from commands import DLSCALE, dlscale_here, run_process, torchrun

TINY = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4", "--num-classes", "10",
        "--num-warmup-batches", "2", "--num-batches-per-iter", "2", "--num-iters", "2"]


@pytest.mark.parametrize("launcher", ["single", "torchrun"])
def test_bench_wraps_one_rank(launcher, tmp_path):
    args = ["bench", *TINY, "--wrap-single-rank", "--json", "result.json", "--output-dir", "runs"]
    if launcher == "single":  # started plainly: in this process
        out = dlscale_here(*args, cwd=tmp_path)
    else:
        out = run_process([*torchrun(1), *DLSCALE[1:], *args], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "DDP wraps the model on this one rank (--wrap-single-rank; a one-rank gloo group)" in out.stdout
    assert "Total img/sec on 1 CPU(s)" in out.stdout
    summary = json.loads((tmp_path / "result.json").read_text())
    assert (summary["world_size"], summary["wrap_single_rank"], summary["launcher"]) == (1, True, launcher)
    assert summary["compile_facts"] is None  # an eager run
