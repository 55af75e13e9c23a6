"""benchmarks/cpu_jpeg.py on a tiny tree: each setting measured with each decoder in every round, the ratios taken
within rounds, its JSON; no speed is asserted (the script measures, docs/profiling.md records)."""

import json
import statistics
import sys
from pathlib import Path

import pytest
from commands import run_process

from tests.unit.test_input_threads_bench import tiny_tree

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("simplejpeg", reason="simplejpeg (a dependency of dlscale) is not installed")


@pytest.mark.slow
def test_it_measures_both_decoders_in_every_setting_and_takes_their_ratios_within_rounds(tmp_path):
    out = run_process([sys.executable, "benchmarks/cpu_jpeg.py", "--data", str(tiny_tree(tmp_path)), "--rounds", "3",
                       "--batches", "3", "--batch-size", "8", "--crop", "64", "--json", str(tmp_path / "c.json")],
                      ROOT)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "c.json").read_text())
    assert len(result["rounds"]) == 3
    for figures in result["rounds"]:
        assert set(figures) == {f"{s}, {d}" for s in ("one thread", "threads", "processes")
                                for d in ("pillow", "simplejpeg")}
        assert all(f["images_per_cpu_s"] > 0 and f["images_per_s"] > 0 for f in figures.values())
    within = [r["threads, simplejpeg"]["images_per_s"] / r["threads, pillow"]["images_per_s"] for r in result["rounds"]]
    assert result["ratios"]["threads: simplejpeg / pillow, img/s"] == pytest.approx(statistics.median(within))
    assert "one thread: simplejpeg / pillow, img per CPU-s" in out.stdout
    assert {"simplejpeg", "tree", "cpu"} <= set(result["setup"]) and result["setup"]["tree"]["files"] == 64


@pytest.mark.slow
def test_its_train_runs_alternate_the_decoders_and_take_their_ratio(tmp_path):
    out = run_process([sys.executable, "benchmarks/cpu_jpeg.py", "--data", str(tiny_tree(tmp_path, train=320)),
                       "--rounds", "1",
                       "--batches", "2", "--batch-size", "8", "--crop", "32", "--train-rounds", "1", "--train-size",
                       "32", "--train-steps", "10", "--json", str(tmp_path / "c.json")], ROOT)
    assert out.returncode == 0, out.stderr
    train = json.loads((tmp_path / "c.json").read_text())["train"]
    assert set(train) == {"runs", "simplejpeg / pillow, img/s"}  # as docs/results/cpu-jpeg-*.json hold it
    assert list(train["runs"]) == ["pillow", "simplejpeg"] and all(len(r) == 1 for r in train["runs"].values())
    assert train["simplejpeg / pillow, img/s"] == pytest.approx(train["runs"]["simplejpeg"][0]["img_per_s"]
                                                                / train["runs"]["pillow"][0]["img_per_s"])
