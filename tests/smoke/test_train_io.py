"""`dlscale train` records what its input pipeline read in every log window: the data set's files and
bytes, and the kernel's counters of the main process and its loader workers."""

import csv
import json

import numpy as np
import pytest
from commands import dlscale_here
from PIL import Image


def _tree(root, train_per_class=8):
    """2 classes x 8 training JPEGs of different sizes, 2 x 2 validation JPEGs; returns the training
    files' total size in bytes."""
    rng = np.random.default_rng(0)
    total = 0
    for split, count in (("train", train_per_class), ("val", 2)):
        for label in ("cat", "dog"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                path = folder / f"{i}.JPEG"
                Image.fromarray(rng.integers(0, 256, (64 + 8 * i, 80, 3), dtype=np.uint8)).save(path, quality=90)
                total += path.stat().st_size if split == "train" else 0
    return total


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent-workers", "workers-restarted-each-epoch"])
def test_log_windows_add_up_to_the_files_each_epoch_read(tmp_path, persistent):
    train_bytes = _tree(tmp_path / "data")
    args = ["train", "--config", "imagenet:default", "--data", str(tmp_path / "data"),
            "--set", "model.name=resnet18", "--set", "model.width=8", "--set", "data.image_size=32",
            "--set", "batch_size=4", "--set", "schedule.epochs=2", "--set", "precision=fp32",
            "--set", "data.num_workers=2", "--set", f"data.persistent_workers={str(persistent).lower()}",
            "--set", "log_every=1", "--set", "checkpoint.enabled=false", "--name", "io", "--output-dir", "runs"]
    out = dlscale_here(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "runs" / "io"
    windows = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["record"] == "train"]
    for epoch in (0, 1):
        mine = [w for w in windows if w["epoch"] == epoch]
        assert len(mine) == 4  # 16 images, batch 4, one window per step
        # Every training file once per epoch (16 files, 4 whole batches): the windows add up to the tree.
        assert sum(w["io_files"] for w in mine) == 16
        assert sum(w["io_file_bytes"] for w in mine) == train_bytes
        # The kernel's counters of the main process and its workers: every byte of every file was read
        # (plus module files and the worker pipes), in at least one read() per file.
        assert sum(w["io_read_bytes"] for w in mine) >= train_bytes
        assert sum(w["io_read_calls"] for w in mine) >= 16
        for w in mine:
            assert w["io_read_gb_per_s"] == pytest.approx(w["io_read_bytes"] / w["window_s"] / 1e9)
            assert w["io_read_ops_per_s"] == pytest.approx(w["io_read_calls"] / w["window_s"])
            # One rank: its per-rank entries are the window's own step and data wait, and it exceeds no other.
            assert len(w["rank_step_ms"]) == len(w["rank_data_ms"]) == len(w["rank_forward_ms"]) == 1
            assert w["rank_step_ms"][0] == pytest.approx(w["step_time_ms"])
            assert w["rank_data_ms"][0] == pytest.approx(w["data_time_ms"])
            assert 0 < w["rank_forward_ms"][0] < w["rank_step_ms"][0] and w["slowest_excess_pct"] == 0

    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    events = EventAccumulator(str(run / "tb"), size_guidance={SCALARS: 0})
    events.Reload()
    assert {"io/read_gb_per_s", "io/read_ops_per_s", "io/files_per_s"} <= set(events.Tags()["scalars"])
    assert len(events.Scalars("io/read_ops_per_s")) == 8

    # dlscale report: the reads over time on twin axes, averaged over the epochs asked for (HAL's 10:60).
    out = dlscale_here("report", "runs", "-o", "report", "--io-epochs", "1:1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (row,) = csv.DictReader((tmp_path / "report" / "io.csv").open())
    second = [w for w in windows if w["epoch"] == 1]
    seconds = sum(w["window_s"] for w in second)
    assert (row["first_epoch"], row["last_epoch"], row["windows"]) == ("1", "1", "4")
    assert float(row["files_per_s"]) == pytest.approx(16 / seconds)
    assert float(row["read_gb_per_s"]) == pytest.approx(sum(w["io_read_bytes"] for w in second) / seconds / 1e9)
    assert (tmp_path / "report" / "io_over_time.png").stat().st_size > 0
    assert "## Why below the reference (dlscale explain)\n" in (tmp_path / "report" / "report.md").read_text()
