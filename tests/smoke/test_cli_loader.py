"""`dlscale loader` on an ImageFolder tree the test writes: rates, and bytes and file counts equal
to what was written; the run directory a report reads; one-line errors."""

import csv
import io
import json
import re

import numpy as np
import pytest
import torch
from commands import dlscale_here, dlscale_process
from PIL import Image

from dlscale import cli
from dlscale.bench import loader as loader_bench
from dlscale.config import DataConfig
from dlscale.data import build_loaders, cpu_jpeg
from dlscale.data import transforms as T


def _tree(root, *, classes=2, per_class=8, size=(96, 72)):
    """root/{train,val}/c<k>/<n>.JPEG; returns (files, bytes) under train/."""
    rng = np.random.default_rng(0)
    files = total = 0
    for split in ("train", "val"):
        for k in range(classes):
            folder = root / split / f"c{k}"
            folder.mkdir(parents=True)
            for n in range(per_class if split == "train" else 1):
                buffer = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(buffer, "JPEG")
                (folder / f"{n}.JPEG").write_bytes(buffer.getvalue())
                if split == "train":
                    files, total = files + 1, total + len(buffer.getvalue())
    return files, total


def test_sweep_reports_rates_bytes_and_files_that_match_the_tree(tmp_path):
    files, size = _tree(tmp_path / "data")
    # One epoch exactly (16 images, batches of 4) and no warm-up: every file is read once.
    # A process of its own: the sweep reads its own /proc counters (CPU time, reads), which in the test's
    # process would hold the test runner's too and miss the start-up a user's command pays.
    out = dlscale_process("loader", "--data", "data", "--workers", "0,2", "--batch-size", "4", "--batches", "4",
                          "--warmup-batches", "0", "--image-size", "32", "--out", "runs/sweep", cwd=tmp_path,
                          env={"DLSCALE_PROGRESS_EVERY": "0"})
    assert out.returncode == 0, out.stderr
    # In a pipe, progress is plain lines (here after every setting, DLSCALE_PROGRESS_EVERY=0).
    assert re.search(r"^progress: loader 3/3 settings, 2 worker processes: [\d.]+ img/s, ", out.stdout, re.M)
    assert "workers as threads and processes, decode fast" in out.stdout
    assert re.search(r"^2 workers: threads ([\d.]+x the processes' images per CPU-second|too little CPU time to "
                     r"compare per CPU-second), [\d.]+x their images per second$", out.stdout, re.M)
    # 2 workers hold up to 2 x 2 batches in flight: 4 timed batches are fewer than 4 x 4
    assert "note: 2 workers hold up to 4 batches in flight" in out.stdout and "--batches 16 or more" in out.stdout
    run = tmp_path / "runs" / "sweep"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["kind"] == "loader" and summary["workers"] == [0, 2, 2]
    assert summary["workers_kinds"] == ["thread", "process"]
    rows = summary["settings"]
    assert [(row["workers"], row["workers_kind"]) for row in rows] == [(0, "main"), (2, "thread"), (2, "process")]
    assert {row["cpu_decoder"] for row in rows} == {cpu_jpeg.name("auto")}  # data.cpu_decoder as it ran
    assert summary["cpu_decoder"] == "auto"  # as asked
    assert rows[0]["speedup"] == 1.0
    for row in rows:
        assert row["images"] == files and row["files_opened"] == files and row["file_bytes"] == size
        assert row["images_per_s"] == pytest.approx(files / row["seconds"])
        assert row["files_per_s"] == pytest.approx(files / row["seconds"])
        assert row["file_read_gb_per_s"] == pytest.approx(size / row["seconds"] / 1e9)
        assert row["rchar_bytes"] >= size  # every read, the files' bytes among them
        assert row["read_calls"] >= files and row["cpu_s"] > 0
        assert row["processes"] == 1 + (row["workers"] if row["workers_kind"] == "process" else 0)
    assert rows[1]["speedup"] == pytest.approx(rows[1]["images_per_s"] / rows[0]["images_per_s"])
    table = (run / "loader.txt").read_text().splitlines()
    assert table[0].split()[:4] == ["workers", "kind", "img/s", "speedup"] and len(table) == 4
    assert (run / "loader.png").stat().st_size > 0
    assert json.loads((run / "config.json").read_text())["kind"] == "loader"
    assert "Run directory:" in out.stdout and table[1] in out.stdout

    # `dlscale report` understands the run directory: the workers table and the speedup plot.
    report = dlscale_here("report", "runs/sweep", "-o", "report", "--reference", "marconi100", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    with open(tmp_path / "report" / "loader.csv") as f:
        table_rows = list(csv.DictReader(f))
    assert [float(r["speedup"]) for r in table_rows] == pytest.approx([row["speedup"] for row in rows])
    assert [r["workers_kind"] for r in table_rows] == ["main", "thread", "process"]
    assert [float(r["images_per_s"]) for r in table_rows] == pytest.approx([row["images_per_s"] for row in rows])
    assert Image.open(tmp_path / "report" / "loader_workers.png").size == (800, 500)
    assert "## Input pipeline (dlscale loader)" in (tmp_path / "report" / "report.md").read_text()


def test_plain_decode_and_copy_to_device_in_process(tmp_path):
    files, size = _tree(tmp_path)
    cfg = DataConfig(name="imagefolder", path=str(tmp_path), image_size=32, decode="plain", num_workers=0)
    loader, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4)
    assert type(loader.dataset.transform.transforms[0]) is T.RandomResizedCrop  # not the fast crop
    assert loader.dataset.source.draft_min_side is None  # every file decoded while loading
    row = loader_bench.measure_setting(cfg, batch_size=4, batches=4, warmup=0, device=torch.device("cpu"))
    assert (row["files_opened"], row["file_bytes"], row["images"]) == (files, size, files)


def test_a_cpu_decoder_that_does_not_import_is_refused_naming_the_flag(tmp_path, monkeypatch, capsys):
    _tree(tmp_path / "data")
    monkeypatch.setattr(cpu_jpeg, "simplejpeg", None)
    code = cli.main(["loader", "--data", str(tmp_path / "data"), "--workers", "0", "--cpu-decoder", "simplejpeg",
                     "--out", str(tmp_path / "run")])
    stderr = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(stderr) == 1, stderr
    assert "--cpu-decoder simplejpeg: simplejpeg does not import here" in stderr[0]
    assert not (tmp_path / "run").exists()  # refused before the run directory is made


@pytest.mark.parametrize("args,message", [
    (["--data", "x", "--workers", "0,two"], "argument --workers: '0,two': give whole numbers from 0 to 1,024"),
    (["--data", "x", "--batches", "0"], "argument --batches: '0': give a whole number from 1"),
    (["--data", "missing", "--workers", "0"], "missing/train is not a folder"),
    (["--data", "x", "--cpu-decoder", "libjpeg"], "argument --cpu-decoder: invalid choice: 'libjpeg'"),
])
def test_bad_input_is_one_line(tmp_path, args, message, capsys):
    code = cli.main(["loader", *args, "--out", str(tmp_path / "run")])
    assert code == 2
    stderr = capsys.readouterr().err
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert message in stderr
