"""benchmarks/input_threads.py on a tiny tree: every setting measured in each round, the ratios taken within
rounds, its JSON; no speed is asserted (the script measures, docs/profiling.md records)."""

import json
import multiprocessing
import sys
import time
from pathlib import Path

import pytest
from commands import run_process

ROOT = Path(__file__).resolve().parents[2]


def tiny_tree(root: Path, train: int = 64) -> Path:
    """dlscale data make-jpegs' tree at `train` files of 96 x 72 (64: a benchmark's run in seconds; a train run's
    epoch needs more)."""
    made = run_process([sys.executable, "-m", "dlscale", "data", "make-jpegs", str(root / "jpegs"), "--train",
                        str(train), "--val", "4", "--classes", "2", "--unique", "4", "--size", "96x72", "--processes",
                        "1"], ROOT)
    assert made.returncode == 0, made.stderr
    return root / "jpegs"


@pytest.mark.slow
def test_it_measures_threads_processes_and_one_thread_and_takes_their_ratios_within_rounds(tmp_path):
    tiny_tree(tmp_path)
    out = run_process([sys.executable, "benchmarks/input_threads.py", "--data", str(tmp_path / "jpegs"), "--rounds",
                       "2", "--batches", "3", "--batch-size", "8", "--crop", "32", "--json", str(tmp_path / "t.json")],
                      ROOT)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "t.json").read_text())
    assert len(result["rounds"]) == 2
    for figures in result["rounds"]:
        assert {"one thread", "threads", "processes", "1 thread", "plain threads", "separate processes"} <= set(figures)
        assert all(f["images_per_cpu_s"] > 0 and f["images_per_s"] > 0 for f in figures.values())
    first = result["rounds"][0]
    within = [r["threads"]["images_per_cpu_s"] / r["processes"]["images_per_cpu_s"] for r in result["rounds"]]
    assert result["ratios"]["threads / processes, img per CPU-s"] == pytest.approx(sorted(within)[0] / 2
                                                                                 + sorted(within)[1] / 2)
    assert first["threads"]["images_per_s"] > 0 and "threads / one thread, img per CPU-s" in out.stdout
    pipeline = result["ratios"]["1 thread / one thread, img per CPU-s"]
    assert isinstance(pipeline, float) and pipeline > 0
    assert {"simplejpeg", "tree", "cpu", "cpu_decoder"} <= set(result["setup"])
    assert result["setup"]["tree"]["files"] == 64 and result["setup"]["tree"]["first_size"] == [96, 72]
    assert result["git_sha"] is None or len(result["git_sha"].removesuffix("-dirty")) == 7


@pytest.mark.slow
def test_its_train_runs_take_a_tree_named_relative_to_where_it_was_started(tmp_path):
    """dlscale train runs in a scratch folder: a --data given relative to the caller's folder still names the tree."""
    tiny_tree(tmp_path, train=320)
    out = run_process([sys.executable, ROOT / "benchmarks/input_threads.py", "--data", "jpegs", "--rounds", "1",
                       "--batches", "2", "--batch-size", "8", "--crop", "32", "--train-rounds", "1", "--json",
                       "t.json"], tmp_path)
    assert out.returncode == 0, out.stderr
    train = json.loads((tmp_path / "t.json").read_text())["train"]
    assert len(train["runs"]["thread"]) == len(train["runs"]["process"]) == 1
    assert set(train) == {"runs", "threads / processes, img/s"}  # as docs/results/input-threads-*.json hold it


def test_a_separate_process_that_fails_ends_the_setting_at_once_and_leaves_no_process(tmp_path, monkeypatch):
    """One separate process raising while it warms: the others stop waiting at the barrier, the setting says which
    exit code, and no process is left (a broken barrier, not the 30-minute timeout)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import input_threads

    from dlscale.config import DataConfig

    real = input_threads._share

    def share(dataset, keys, barrier, results):
        # the share of sample 0 fails while it warms (None has no [:8]); the other waits at the barrier
        real(dataset, None if keys[0] == (0, 0) else keys, barrier, results)

    monkeypatch.setattr(input_threads, "_share", share)
    tree = tiny_tree(tmp_path)
    cfg = DataConfig(name="imagefolder", path=str(tree), image_size=32, decode="fast")
    started = time.monotonic()
    with pytest.raises(SystemExit, match="separate processes: a process exited with 1"):
        input_threads.separate_processes(cfg, images=16, workers=2, seed=0)
    assert time.monotonic() - started < 120
    assert multiprocessing.active_children() == []
