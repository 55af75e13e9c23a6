"""`dlscale bench` as a user runs it: one process, and two ranks under the real torchrun."""

import json
import re

import pytest
from commands import dlscale_here, run_process, torchrun

TINY = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4",
        "--num-classes", "10", "--num-warmup-batches", "2", "--num-batches-per-iter", "2", "--num-iters", "3"]

SUMMARY_KEYS = {
    "kind", "model", "precision", "batch_size", "image_size", "world_size", "device",
    "img_per_sec_total_mean", "img_per_sec_total_ci95", "img_per_sec_per_rank_mean",
    "img_per_sec_per_rank_ci95", "compute_ips", "total_ips", "iterations",
}


def _check_output(stdout, world, iters=3):
    lines = stdout.splitlines()
    header = ["Model: resnet18", "Batch size: 4", f"Number of CPUs: {world}", "Running warmup...",
              "Running benchmark..."]
    start = lines.index("Model: resnet18")
    assert lines[start:start + 5] == header
    for i in range(iters):
        assert re.fullmatch(rf"Iter #{i}: \d+\.\d img/sec per CPU", lines[start + 5 + i])
    assert re.fullmatch(r"Img/sec per CPU: \d+\.\d \+-\d+\.\d", lines[start + 5 + iters])
    assert re.fullmatch(rf"Total img/sec on {world} CPU\(s\): \d+\.\d \+-\d+\.\d", lines[start + 6 + iters])


def test_single_process(tmp_path):
    out = dlscale_here("bench", *TINY, "--json", "result.json", "--output-dir", "runs", "--name", "one", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    _check_output(out.stdout, 1)
    summary = json.loads((tmp_path / "result.json").read_text())
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["kind"] == "bench" and summary["world_size"] == 1 and len(summary["iterations"]) == 3
    run = tmp_path / "runs" / "one"
    assert json.loads((run / "summary.json").read_text()) == summary
    env = json.loads((run / "env.json").read_text())
    assert env["torch"] and env["world_size"] == 1 and "git_sha" in env
    assert json.loads((run / "config.json").read_text())["model"] == "resnet18"
    printed = float(re.search(r"Total img/sec on 1 CPU\(s\): (\S+)", out.stdout).group(1))
    assert printed == pytest.approx(summary["img_per_sec_total_mean"], abs=0.06)


@pytest.mark.distributed
def test_two_ranks_under_torchrun(tmp_path):
    out = run_process([*torchrun(2), "-m", "dlscale", "bench", *TINY, "--json", "result.json", "--output-dir", "runs",
                       "--pg-timeout", "60"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    _check_output(out.stdout, 2)
    assert out.stdout.count("Running benchmark...") == 1  # rank 0 prints, rank 1 does not
    summary = json.loads((tmp_path / "result.json").read_text())
    assert summary["world_size"] == 2 and summary["launcher"] == "torchrun"
    per_rank = summary["iterations_per_rank"]
    assert len(per_rank) == 2
    # The total is the measured per-iteration sum over both ranks.
    for i, total in enumerate(summary["iterations"]):
        assert total == pytest.approx(per_rank[0][i] + per_rank[1][i])


@pytest.mark.parametrize("args,message", [
    (["--model", "resnet51"], "unknown model 'resnet51'"),
    (["--model", "resnet18", "--batch-size", "0"], "argument --batch-size: '0': give whole numbers from 1"),
    (["--model", "resnet18", "--precision", "fp8"], "invalid choice: 'fp8'"),
    (["--model", "resnet18", "--precision", "tf32", "--device", "cpu"], "use fp32"),
    (["--model", "resnet18", "--image-size", "-3"], "--image-size"),
    (["--model", "resnet18", "--cuda-graphs", "--device", "cpu"], "--cuda-graphs needs a CUDA device"),
    (["--model", "resnet18", "--cuda-graphs", "--compile"], "--cuda-graphs and --compile do not combine"),
    (["--model", "resnet18", "--cuda-graphs", "--precision", "amp_fp16", "--no-fused-optimizer"],
     "needs the fused optimizer"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    out = dlscale_here("bench", *args, "--output-dir", "runs", cwd=tmp_path)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr


@pytest.mark.distributed
def test_neighbor_allreduce_reports_communication(tmp_path):
    out = run_process([*torchrun(2), "-m", "dlscale", "bench", *TINY, "--dist-optimizer", "neighbor_allreduce",
                       "--json", "result.json", "--output-dir", "runs", "--pg-timeout", "60"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"Communication \(neighbor_allreduce\): \d+\.\d\d ms per step \(slowest rank\), "
                     r"\d+\.\d\d MB sent per rank per step", out.stdout)
    summary = json.loads((tmp_path / "result.json").read_text())
    assert summary["dist_optimizer"] == "neighbor_allreduce" and summary["topology"] == "exp2"
    assert summary["comm_bytes_per_step"] > 0 and summary["comm_time_ms_per_step"] > 0


def test_batch_list_writes_a_curve(tmp_path):
    args = [a for a in TINY if a not in ("--batch-size", "4")]
    out = dlscale_here("bench", *args, "--batch-size", "4,2", "--json", "result.json", "--output-dir", "runs",
                       "--name", "curve", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("Running warmup...") == 2  # each batch size has its own warm-up
    assert out.stdout.index("Batch size: 4") < out.stdout.index("Batch size: 2")  # in the order given
    summary = json.loads((tmp_path / "runs" / "curve" / "summary.json").read_text())
    curve = summary["batch_curve"]
    assert [c["batch_size"] for c in curve] == [2, 4]
    for c in curve:
        assert c["step_time_ms"] == pytest.approx(1000.0 * c["batch_size"] / c["img_per_sec"])
        assert c["ci95"] >= 0
    # The top level is the largest batch's own benchmark.
    assert summary["batch_size"] == 4 and summary["img_per_sec_total_mean"] == curve[1]["img_per_sec"]
    assert json.loads((tmp_path / "runs" / "curve" / "config.json").read_text())["batch_size"] == 4
    assert "Batch curve" in out.stdout


@pytest.mark.distributed
def test_batch_list_on_two_ranks(tmp_path):
    args = [a for a in TINY if a not in ("--batch-size", "4")]
    out = run_process([*torchrun(2), "-m", "dlscale", "bench", *args, "--batch-size", "2,4", "--json", "result.json",
                       "--output-dir", "runs", "--pg-timeout", "60"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "result.json").read_text())
    assert summary["world_size"] == 2 and [c["batch_size"] for c in summary["batch_curve"]] == [2, 4]
    # Totals over both ranks: a step of the global batch, batch x 2 images.
    for c in summary["batch_curve"]:
        assert c["step_time_ms"] == pytest.approx(1000.0 * 2 * c["batch_size"] / c["img_per_sec"])


def test_one_batch_size_writes_no_curve(tmp_path):
    out = dlscale_here("bench", *TINY, "--json", "result.json", "--output-dir", "runs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "batch_curve" not in json.loads((tmp_path / "result.json").read_text())
    assert "Batch curve" not in out.stdout


@pytest.mark.parametrize("sizes,message", [
    ("16,32,16", "names 16 more than once"),
    ("16,0,32", "argument --batch-size: '16,0,32': give whole numbers from 1 to 65,536 separated by commas"),
    ("16,-8", "argument --batch-size: '16,-8': give whole numbers from 1"),
    ("16,x", "argument --batch-size: '16,x': give whole numbers from 1"),
])
def test_bad_batch_list_is_one_line(tmp_path, sizes, message):
    out = dlscale_here("bench", "--model", "resnet18", "--batch-size", sizes, "--output-dir", "runs", cwd=tmp_path)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr


def test_a_sweep_takes_one_batch_size(tmp_path):
    out = dlscale_here("scale", "--nproc", "1,2", "--output-dir", "runs", "--", "bench", "--model", "resnet18",
                       "--batch-size", "16,32", cwd=tmp_path)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "give one batch size here" in out.stderr
