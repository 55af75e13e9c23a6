"""Cost at a price per device-hour in bench, train, predict and report; energy is null without NVML;
env.json is a full reproducibility record."""

import csv
import json
import subprocess
from pathlib import Path

import pytest
from commands import dlscale_here


def _run(args, cwd):
    out = dlscale_here(*args, cwd=cwd, env={"OMP_NUM_THREADS": "1", "NCCL_DEBUG": "WARN"})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _git_state():
    """(sha, local changes to tracked files) of the checkout dlscale's source lives in, as git itself says;
    (None, None) where it is not in one."""
    import dlscale

    def git(*args):
        out = subprocess.run(["git", *args], cwd=Path(dlscale.__file__).parent, capture_output=True, text=True)
        return out.stdout if out.returncode == 0 else None

    sha, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    return (sha.strip() if sha else None), (None if status is None else status.strip() != "")


def test_costs_in_every_command_and_a_full_environment_record(tmp_path):
    out = _run(["bench", "--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "8",
                "--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "3",
                "--price-per-device-hour", "2", "--name", "bench", "--output-dir", "runs"], tmp_path)
    bench = json.loads((tmp_path / "runs/bench/summary.json").read_text())
    assert bench["cost_per_imagenet_epoch"] == pytest.approx(1_281_167 / bench["total_ips"] / 3600 * 2)
    assert f"Cost: {bench['cost_per_imagenet_epoch']:.2f} per ImageNet epoch" in out
    assert bench["energy_j"] is None and bench["joules_per_image"] is None  # a CPU: no NVML figures
    env = json.loads((tmp_path / "runs/bench/env.json").read_text())
    assert env["argv"][1:3] == ["bench", "--model"] and "bench --model resnet18" in env["command"]
    assert env["cpu_model"] and env["cpu_count"] >= 1 and env["env_vars"]["OMP_NUM_THREADS"] == "1"
    assert env["env_vars"]["NCCL_DEBUG"] == "WARN" and "PATH" not in env["env_vars"]
    assert "torch" in env["packages"] and env["launcher"] == "single"
    assert (env["git_sha"], env["git_dirty"]) == _git_state()
    assert {"torch", "torchvision", "cuda", "cudnn", "nccl", "torch_threads"} <= set(env)

    out = _run(["train", "--config", "cpu:digits", "--set", "schedule.epochs=1", "--set", "schedule.warmup_epochs=0",
                "--price-per-device-hour", "4",
                "--name", "train", "--output-dir", "runs"], tmp_path)
    train = json.loads((tmp_path / "runs/train/summary.json").read_text())
    assert train["cost_per_run"] == pytest.approx(train["train_time_s"] / 3600 * 4)
    assert train["cost_per_epoch"] == pytest.approx(train["cost_per_run"])  # one epoch
    assert f"cost: {train['cost_per_epoch']:.2f} per epoch" in out
    assert json.loads((tmp_path / "runs/train/config.json").read_text())["price_per_device_hour"] == 4.0

    _run(["report", "runs", "-o", "report", "--price-per-device-hour", "1"], tmp_path)
    rows = {row["run"]: row for row in csv.DictReader((tmp_path / "report/runs.csv").open())}
    assert float(rows["bench"]["cost_per_epoch"]) == pytest.approx(bench["cost_per_imagenet_epoch"])  # its own price
    assert float(rows["train"]["cost_per_epoch"]) == pytest.approx(train["cost_per_epoch"])

    out = _run(["predict", "--gpus", "1,8", "--from-reference", "ngc:v100_16gb_amp", "--platform", "dgx1-v100",
                "--price-per-device-hour", "3", "--name", "predict", "--output-dir", "runs"], tmp_path)
    assert "cost/ImageNet epoch" in out
    points = json.loads((tmp_path / "runs/predict/summary.json").read_text())["points"]
    expected = 1_281_167 / points[1]["img_per_s_total"] / 3600 * 8 * 3
    assert points[1]["cost_per_imagenet_epoch"] == pytest.approx(expected)
