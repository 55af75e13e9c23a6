"""`dlscale explain` as a user runs it: the seed's V100 case, a CPU bench against an AMP reference, a
training run starved by its loader, --against between two runs, and bad input in one line."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from commands import dlscale_here, run_process
from PIL import Image

import dlscale

SOURCES = str(Path(dlscale.__file__).resolve().parents[1])  # the package under test, in the children too

BENCH = ["bench", "--model", "resnet18", "--width", "8", "--image-size", "32", "--num-classes", "10",
         "--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "5", "--output-dir", "runs"]


def dlscale(args, cwd, *, ok=True):
    out = dlscale_here(*args, cwd=cwd)
    if ok:
        assert out.returncode == 0, out.stderr[-3000:]
    return out


def _write(directory, **files):
    directory.mkdir(parents=True)
    for name, data in files.items():
        (directory / f"{name}.json").write_text(json.dumps(data))


def _seed_run(run):
    _write(run,
           summary={"kind": "train", "model": "resnet50", "data": "imagefolder", "precision": "amp_fp16",
                    "world_size": 1, "num_nodes": 1, "device": "cuda", "device_name": "Tesla V100-SXM2-32GB",
                    "batch_size": 256, "global_batch_size": 256, "dist_optimizer": "allreduce",
                    "total_ips": 777.358, "train_time_s": 100.0, "history": []},
           config={"kind": "train", "preset": "imagenet:ngc-rn50-amp", "precision": "amp_fp16",
                   "speed": {"channels_last": False, "cudnn_benchmark": True, "fused_optimizer": False,
                             "compile": False},
                   "data": {"name": "imagefolder", "num_workers": 5, "decode": "fast", "image_size": 224}},
           env={"torch": "1.9.0a0+df837d0", "cuda": "11", "cudnn": 8001, "device_type": "cuda",
                "device_name": "Tesla V100-SXM2-32GB", "cpu_count": 80, "torch_threads": 1})
    # The log's own per-iteration rates after the first iteration: compute 791-794, total 787-791 img/s.
    windows = [{"record": "train", "epoch": 0, "step": i, "throughput_img_per_s": 788.0 + i % 3,
                "compute_img_per_s": 791.0 + i % 3, "window_s": 0.325} for i in range(1, 11)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))


def test_the_seed_case_names_channels_last_first_against_nvidias_figure(tmp_path):
    """PaddlePaddle Perf's single-V100 run of NVIDIA's ConvNets, as a run directory: NVIDIA's AMP recipe
    (batch 256, cudnn.benchmark) launched without --memory-format nhwc and with the default 5 workers, its
    log's rates (compute ~792, total ~789 img/s per iteration), 777 img/s as published (references/dlperf.json
    paddle_old; docs/references.md#paddle-launch-line). No V100 exists here, so this one run directory is
    written by hand."""
    run = tmp_path / "paddle-v100-amp"
    _seed_run(run)
    out = dlscale(["explain", run, "--json", "explained.json"], tmp_path)
    (explained,) = json.loads((tmp_path / "explained.json").read_text())
    assert explained["reference"] == "ngc:v100_32gb_amp" and explained["reference_img_per_s_per_device"] == 1156
    assert explained["gap"] == pytest.approx(1156 / 777.358)
    first = explained["findings"][0]
    assert "channels_last" in first["cause"] and first["change"] == "--set speed.channels_last=true"
    # SC20's + NHWC step with AMP on a V100: 1795 -> 2075-2250 img/s (middle 2162.5)
    assert first["effect"]["factor"] == pytest.approx(2162.5 / 1795) and "SC20" in first["effect"]["source"]
    causes = [f["cause"] for f in explained["findings"]]
    # 5 workers against NVIDIA's 8, but the run did not wait for data: not a cause here.
    assert not any("loader workers" in c for c in causes)
    assert any("loader workers per rank: 5 (the reference: 8" in r["evidence"] for r in explained["ruled_out"])
    # NVIDIA's README names only its container: no torch, CUDA, cuDNN or NCCL version to set against the run's,
    # so software is not a ranked cause; the container is named where it was checked.
    assert not any(f["category"] == "software" for f in explained["findings"])
    (software,) = [r["evidence"] for r in explained["ruled_out"] if r["category"] == "software"]
    assert "nvcr.io/nvidia/pytorch:21.03-py3" in software and "torch 1.9.0a0+df837d0" in software
    assert any(r["category"] == "input" and "data wait 0.4%" in r["evidence"] for r in explained["ruled_out"])
    assert explained["unexplained"] == pytest.approx(1156 / 777.358 / (2162.5 / 1795))
    assert " 1. [recipe] channels_last off (NCHW); the reference runs NHWC: effect 1.20x" in out.stdout
    assert "Measure next: `dlscale profile train --config imagenet:ngc-rn50-amp`" in out.stdout


def test_explain_starts_without_torch(tmp_path):
    _seed_run(tmp_path / "run")
    code = ("import sys; from dlscale.cli import main; code = main(['explain', sys.argv[1]]); "
            "print(code, 'torch' in sys.modules, 'matplotlib' in sys.modules)")
    out = run_process([sys.executable, "-c", code, tmp_path / "run"])  # a fresh interpreter: its imports
    assert out.stdout.splitlines()[-1] == "0 False False", out.stderr


def test_a_cpu_fp32_bench_against_an_amp_reference_names_the_device_and_not_amp(tmp_path):
    dlscale([*BENCH, "--batch-size", "8", "--name", "cpu"], tmp_path)
    dlscale(["explain", "runs/cpu", "--reference", "ngc:v100_16gb_amp", "--json", "e.json"], tmp_path)
    (explained,) = json.loads((tmp_path / "e.json").read_text())
    by_category = {f["category"]: f for f in explained["findings"]}
    assert "another device" in by_category["device"]["cause"] and "V100 16GB" in by_category["device"]["cause"]
    # NVIDIA's AMP / FP32 speed-up is a V100's: a CPU is not told to use AMP without a run that shows it faster.
    assert not [f for f in explained["findings"] if "precision" in f["cause"] or "--precision" in f["change"]]
    assert any(r["evidence"].startswith("precision: fp32 on a CPU") for r in explained["ruled_out"])


def test_a_run_no_reference_matches_is_explained_against_nothing(tmp_path):
    _write(tmp_path / "runs" / "r18", summary={"kind": "bench", "model": "resnet18", "precision": "fp32",
                                                "world_size": 1, "device": "cpu", "device_name": "x86_64",
                                                "batch_size": 32, "img_per_sec_total_mean": 10.0})
    out = dlscale(["explain", "runs/r18"], tmp_path)  # before: exit 2, "no published reference ran resnet18"
    assert out.stdout.startswith("Run: runs/r18") and out.stderr == ""
    assert "Reference: none: no published reference ran resnet18 in fp32 on x86_64, so the run is compared with " \
           "nothing" in out.stdout


def _big_jpegs(root):
    rng = np.random.default_rng(0)
    for split, count in (("train", 8), ("val", 1)):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (1536, 2048, 3), dtype=np.uint8)  # noise: a slow full-size decode
                Image.fromarray(pixels).save(folder / f"{i}.JPEG", quality=90)


def test_a_training_run_starved_by_its_loader_is_explained_as_input_bound(tmp_path):
    _big_jpegs(tmp_path / "data")
    dlscale(["train", "--config", "imagenet:default", "--data", tmp_path / "data", "--set", "model.name=resnet18",
             "--set", "model.width=8", "--set", "data.image_size=32", "--set", "batch_size=4",
             "--set", "schedule.epochs=2", "--set", "precision=fp32", "--set", "data.num_workers=1",
             "--set", "data.decode=plain", "--set", "log_every=1", "--set", "checkpoint.enabled=false",
             "--name", "starved", "--output-dir", "runs"], tmp_path)
    out = dlscale(["explain", "runs/starved", "--reference", "none", "--json", "e.json"], tmp_path)
    (explained,) = json.loads((tmp_path / "e.json").read_text())
    # The input cause comes first of the causes; a measurement caveat may rank above it: with 4 steps an
    # epoch, the loader's start-up in each epoch's first window took 49% of the time on a loaded machine; and so
    # may the host's load on a shared machine (load average 6 on 2 cores when this was written). The waiting
    # share shrinks when the load slows the model too: with 1024 x 768 images it was 1.49x in CI at load 2.2;
    # with 2048 x 1536 ones 18.7x on a quiet machine and 15.6x beside three busy processes on 2 cores.
    first = next(f for f in explained["findings"] if f["category"] not in ("measurement", "host"))
    assert first["category"] == "input" and first["effect"]["factor"] > 1.2, out.stdout
    # data.workers_kind=auto on a CPU device: a worker process (threads are taken on CUDA)
    assert "1 loader worker process per rank deliver" in first["evidence"] and "files/s" in first["evidence"]
    assert "--set data.decode=fast" in first["change"]


def test_against_names_the_setting_that_differs(tmp_path):
    dlscale([*BENCH, "--batch-size", "8", "--name", "b8"], tmp_path)
    dlscale([*BENCH, "--batch-size", "16", "--name", "b16"], tmp_path)
    out = dlscale(["explain", "runs/b8", "--against", "runs/b16"], tmp_path).stdout
    assert "Settings (config.json): 1 differ\n  batch_size: 8 -> 16\n" in out
    assert "global_batch_size: 8 -> 16" in out
    assert "Packages" not in out  # the same installation


@pytest.mark.parametrize("case,message", [
    ("not-a-run", "holds no summary.json"),
    ("corrupt", "summary.json: cannot be read as JSON"),
    ("missing", "no such directory"),
    ("bad-world-size", "world_size 'two' is not a positive whole number"),
])
def test_bad_input_gets_one_line(tmp_path, case, message):
    path = tmp_path / "runs" / case
    if case == "not-a-run":
        path.mkdir(parents=True)
    elif case == "corrupt":
        path.mkdir(parents=True)
        (path / "summary.json").write_text('{"kind": "bench", "world_')
    elif case == "bad-world-size":
        _write(path, summary={"kind": "bench", "model": "resnet50", "precision": "fp32", "world_size": "two",
                              "device": "cpu", "device_name": "x86_64", "batch_size": 32,
                              "img_per_sec_total_mean": 10.0})
    out = dlscale(["explain", path], tmp_path, ok=False)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr
