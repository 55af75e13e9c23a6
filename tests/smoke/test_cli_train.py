"""`dlscale train` and `dlscale config` as a user runs them."""

import json

import numpy as np
import pytest
from commands import dlscale_here
from PIL import Image


def _jpeg(path, seed):
    pixels = np.random.default_rng(seed).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)


@pytest.fixture
def imagefolder(tmp_path):
    """2 classes x 6 training images (one truncated, one garbage), 2 x 2 validation images."""
    root = tmp_path / "data"
    for split, count in (("train", 6), ("val", 2)):
        for label in ("cat", "dog"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                _jpeg(folder / f"{i}.JPEG", hash((split, label, i)) % 2**32)
    truncated = root / "train" / "cat" / "2.JPEG"
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    (root / "train" / "dog" / "4.JPEG").write_bytes(b"this is not a jpeg" * 10)
    return root


SMALL = ["--set", "model.name=resnet18", "--set", "model.width=8", "--set", "data.image_size=32",
         "--set", "batch_size=4", "--set", "schedule.epochs=1", "--set", "schedule.warmup_epochs=0",
         "--set", "precision=fp32", "--set", "data.num_workers=2"]


def test_imagefolder_with_bad_files_counts_the_skips(tmp_path, imagefolder):
    out = dlscale_here("train", "--config", "imagenet:hal-rn50", "--data", str(imagefolder), *SMALL,
                       "--output-dir", "runs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "imagenet-hal-rn50" / "summary.json").read_text())
    assert summary["steps"] == 3  # 12 training images, batch 4, one rank
    assert summary["skipped_samples"] == 2  # every file visited once: both bad ones replaced
    assert "skipped 2 unreadable sample(s)" in out.stdout
    assert summary["history"][0]["val_count"] == 4


def test_bad_sample_error_fails_at_once_with_one_line(tmp_path, imagefolder):
    out = dlscale_here("train", "--config", "imagenet:hal-rn50", "--data", str(imagefolder), *SMALL,
                       "--on-bad-sample", "error", "--output-dir", "runs", cwd=tmp_path)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "JPEG" in out.stderr


@pytest.mark.parametrize("args,message", [
    (["--config", "imagenet:hal-rn50", "--data", "/nonexistent/imagenet"], "train/<class>"),
    (["--config", "cifar100:bs128"], "cifar-100-python"),
    (["--config", "cpu:nope"], "known: default, digits, synthetic"),
    (["--config", "cpu:digits", "--set", "optim.lrr=1"], "unknown key optim.lrr"),
    (["--config", "cpu:digits", "--set", "global_batch_size=null"], "set batch_size (per rank) or global_batch_size"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    out = dlscale_here("train", *args, "--output-dir", "runs", cwd=tmp_path)
    assert out.returncode == 2, out.stdout[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr


def test_config_prints_derived_values(tmp_path):
    out = dlscale_here("config", "imagenet:hal-rn50", "--world-size", "64", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "global batch: 13312 images per optimizer step" in out.stdout
    assert "peak LR: 5.2 " in out.stdout
    assert "steps per epoch: 97" in out.stdout  # HAL's loader keeps the last partial batch: ceil(20019 / 208)
    assert "warm-up: 485 steps (5.0 epochs, per iteration)" in out.stdout


TINY = ["--config", "cpu:synthetic", "--set", "model.width=8", "--set", "max_steps_per_epoch=2",
        "--set", "schedule.warmup_epochs=0", "--output-dir", "runs"]


def _files(run_dir):
    """Every file of the run directory but its lock, with its bytes."""
    return {p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and not p.name.startswith(".lock")}


@pytest.mark.parametrize("how,said", [
    (["--epochs", "3", "--target-accuracy", "0.01"], "reached its target top-1 1.00% after"),  # 10 classes: ~10%
    (["--epochs", "1"], "trained all 1 of its epochs"),
])
def test_a_finished_run_run_again_says_so_and_changes_nothing(tmp_path, how, said):
    first = dlscale_here("train", *TINY, *how, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "runs" / "cpu-synthetic"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["epochs_completed"] == 1  # the target is reached at the first epoch
    before = _files(run_dir)
    again = dlscale_here("train", *TINY, *how, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip() == again.stdout.strip().splitlines()[0]  # one line
    assert again.stdout.startswith(f"runs/cpu-synthetic is a finished run: it {said}")
    assert "nothing was trained or written. To train again," in again.stdout and "--name NEW" in again.stdout
    assert _files(run_dir) == before  # summary, records, checkpoints, config: byte for byte
    refused = dlscale_here("train", *TINY, *how, "--resume", "none", cwd=tmp_path)
    assert refused.returncode == 2 and "--resume none: runs/cpu-synthetic is a finished run" in refused.stderr
    assert _files(run_dir) == before
