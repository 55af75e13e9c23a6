"""`dlscale bench` on the GPU: it reports MFU from counted FLOPs and the datasheet peak of the
precision it ran (bf16 or TF32 tensor cores), and it runs under torchrun as one rank."""

import json
import subprocess
import sys

import pytest
import torch
from gpu_helpers import ROOT, subprocess_env

from dlscale import cli
from dlscale.metrics.hardware import peak_flops

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]

SHORT = ["--num-warmup-batches", "3", "--num-batches-per-iter", "3", "--num-iters", "2"]


@pytest.mark.parametrize("precision,dtype", [("amp_bf16", "bf16"), ("tf32", "tf32")])
def test_bench_reports_mfu_against_the_peak_of_its_precision(precision, dtype, tmp_path, capsys):
    name = torch.cuda.get_device_name(0)
    out = tmp_path / "summary.json"
    assert cli.main(["bench", "--model", "resnet50", "--batch-size", "32", "--image-size", "112",
                     "--precision", precision, "--channels-last", *SHORT, "--json", str(out),
                     "--output-dir", str(tmp_path)]) == 0
    summary = json.loads(out.read_text())
    assert summary["device"] == "cuda" and summary["device_name"] == name
    peak = peak_flops(name, dtype)
    if peak is None:
        assert summary["mfu"] is None
        pytest.skip(f"no datasheet peak for {name}: MFU is not reported, as documented")
    assert summary["peak_tflops"] == pytest.approx(peak / 1e12)
    achieved = summary["img_per_sec_total_mean"] * summary["train_gflops_per_image"] * 1e9
    assert 0 < summary["mfu"] < 1 and summary["mfu"] == pytest.approx(achieved / peak, rel=1e-6)
    assert f"MFU: {100 * summary['mfu']:.1f}%" in capsys.readouterr().out


def test_bench_under_torchrun_as_one_rank(tmp_path):
    out = tmp_path / "summary.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
               "-m", "dlscale", "bench", "--model", "resnet18", "--width", "16", "--image-size", "32",
               "--batch-size", "16", *SHORT, "--json", str(out), "--output-dir", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240, env=subprocess_env())
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert (summary["device"], summary["world_size"], summary["launcher"]) == ("cuda", 1, "torchrun")
    assert "Total img/sec on 1 GPU(s)" in done.stdout


def test_one_rank_nccl_group(tmp_path):
    """One GPU allows one NCCL rank (NCCL refuses two ranks on one device). dlscale joins no group for
    one process, so the script joins a one-rank NCCL group itself and runs dlscale's collectives on
    it: the bench with every strategy (its rate gather, comm and memory reductions) and the
    decentralized ops (allreduce, broadcast, neighbor_allreduce) on CUDA tensors."""
    out = tmp_path / "nccl.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
               str(ROOT / "tests" / "gpu" / "nccl_one_rank.py"), str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240, env=subprocess_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["backend"] == "nccl" and result["world_size"] == 1
    for strategy, summary in result["bench"].items():
        assert summary["img_per_sec_total_mean"] > 0 and summary["world_size"] == 1, strategy
        assert summary["peak_memory_kind"] == "cuda_max_allocated", strategy
    assert result["ops"] == {"allreduce": True, "broadcast": True, "neighbor_allreduce": True}
