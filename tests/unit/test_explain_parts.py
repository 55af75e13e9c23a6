"""dlscale explain's parts: which published figure a run is compared with, how findings rank, the scaling
loss against dlscale predict's expected communication, and what --against compares."""

import json

import pytest

from dlscale.explain import text
from dlscale.explain.against import differences
from dlscale.explain.build import explain, explain_run
from dlscale.explain.findings import Effect, Explanation, Finding
from dlscale.explain.target import choose, device_score
from dlscale.predict.platforms import platform
from dlscale.rundir import Run


def _run(tmp_path, name="r", **summary):
    base = {"kind": "bench", "model": "resnet50", "precision": "amp_fp16", "world_size": 1, "device": "cuda",
            "device_name": "Tesla V100-SXM2-16GB", "batch_size": 256, "img_per_sec_total_mean": 1000.0,
            "image_size": 224, "num_classes": 1000, "width": 64, "num_batches_per_iter": 10, "num_iters": 10,
            "img_per_sec_total_ci95": 5.0, "compute_ips": 1000.0}
    return Run(tmp_path / name, {**base, **summary})


def test_the_matching_reference_is_the_fastest_published_figure_of_that_device_and_precision(tmp_path):
    assert choose(_run(tmp_path), None).spec == "ngc:v100_16gb_amp"  # 1,200 over DLPerf's 802.9 and 20.06's 856.5
    tf32 = _run(tmp_path, precision="tf32", device_name="NVIDIA A100-SXM4-80GB")
    assert choose(tf32, None).spec == "ngc:a100_80gb_tf32"
    assert choose(_run(tmp_path), "none") is None
    assert choose(_run(tmp_path, world_size=8), None).devices == 8  # the published 8-GPU point
    assert device_score("Tesla V100-SXM2-32GB", "V100 32GB") == 2
    assert device_score("Tesla V100-SXM2-16GB", "V100 32GB") == 1 and device_score("x86_64", "V100 32GB") == 0


def test_known_effects_rank_first_and_the_rest_is_unexplained():
    finding = lambda cause, factor: Finding("recipe", cause, "", Effect(factor, "s"), "")  # noqa: E731
    e = Explanation("r", "run", 100.0, "x:y", "ref", 150.0,
                    findings=[finding("a", None), finding("b", 1.1), finding("c", 1.25)])
    assert [f.cause for f in e.ranked()] == ["c", "b", "a"]
    assert e.gap == pytest.approx(1.5) and e.unexplained == pytest.approx(1.5 / 1.375)


def test_a_run_faster_than_its_reference_is_not_called_below_it(tmp_path):
    fast = _run(tmp_path, img_per_sec_total_mean=1500.0, compute_ips=1500.0)  # NGC's V100 AMP figure is 1,200
    (e,) = explain(_written(fast), None)
    assert e.gap < 1 and e.next_step == ""
    printed = "\n".join(text.lines(e))
    assert f"Gap: none: this run reaches {100 / e.gap:.0f}% of the reference" in printed
    assert "Causes, largest" not in printed and "Explained:" not in printed
    assert "not below it" in text.markdown(e)[0]


def _written(run):
    run.path.mkdir(parents=True)
    (run.path / "summary.json").write_text(json.dumps(run.summary))
    return run.path


def _write_bench(path, world, per_device):
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "kind": "bench", "model": "resnet50", "precision": "amp_fp16", "world_size": world, "num_nodes": 1,
        "device": "cuda", "device_name": "Tesla V100-SXM2-16GB", "batch_size": 256, "image_size": 224,
        "num_classes": 1000, "width": 64, "img_per_sec_total_mean": per_device * world,
        "img_per_sec_total_ci95": 1.0, "compute_ips": per_device * world, "num_iters": 10,
        "num_batches_per_iter": 10, "num_warmup_batches": 10, "dist_optimizer": "allreduce",
        "iterations_per_rank": [[per_device] * 10] * world}))


def test_the_scaling_loss_is_set_against_predicts_expected_communication(tmp_path):
    _write_bench(tmp_path / "one", 1, 1200.0)
    _write_bench(tmp_path / "eight", 8, 1000.0)
    (e,) = explain(tmp_path / "eight", "none", baseline=tmp_path / "one", network=platform("dgx1-v100").network())
    comm = next(f for f in e.findings if f.category == "communication")
    assert "1.20x measured" in comm.cause and "dlscale predict's model" in comm.effect.source
    assert 1.0 <= comm.effect.factor < 1.05  # DDP over NVLink hides nearly all of it (docs/prediction.md)
    (plain,) = explain(tmp_path / "eight", "none", baseline=tmp_path / "one")
    loss = next(f for f in plain.findings if f.category == "communication")
    assert loss.effect.factor == pytest.approx(1.2) and loss.effect.bound


def test_against_ignores_names_and_paths_and_dedups_summary_settings(tmp_path):
    a = Run(tmp_path / "a", {"kind": "bench", "batch_size": 8, "channels_last": False},
                 {"batch_size": 8, "speed": {"channels_last": False}, "name": "a"}, {"command": "x a", "torch": "1"})
    b = Run(tmp_path / "b", {"kind": "bench", "batch_size": 8, "channels_last": True},
                 {"batch_size": 8, "speed": {"channels_last": True}, "name": "b"}, {"command": "x b", "torch": "2"})
    found = differences(a, b)
    assert found["config"] == [("speed.channels_last", False, True)]
    assert found["environment"] == [("torch", "1", "2")]


def test_a_run_without_any_reference_still_reports_its_own_measurements(tmp_path):
    e = explain_run(_run(tmp_path, compute_ips=2000.0), "none")
    assert e.reference is None and e.findings[0].category == "input"  # waits for data half of each step
    assert e.findings[0].effect.factor == pytest.approx(2.0)


def _with_env(run, **env):
    return Run(run.path, run.summary, run.config, env, run.windows)


def test_software_compares_only_the_versions_both_sides_record(tmp_path):
    # HAL's wiki states torch 1.2.0, apex 0.1.0 and CUDA 10.1 (references/hal.json); the run records torch, CUDA,
    # cuDNN and NCCL, so torch and CUDA are compared and apex is not.
    run = _with_env(_run(tmp_path), torch="2.3.1", cuda="10.1.243", cudnn=8902, nccl="2.18.1")
    (found,) = [f for f in explain_run(run, "hal").findings if f.category == "software"]
    assert found.cause == "other software than the reference's (torch)"  # CUDA 10.1.243 is a 10.1
    assert "torch 1.2.0, cuda 10.1" in found.evidence and "apex" not in found.evidence
    same = _with_env(run, torch="1.2.0", cuda="10.1.243")
    assert not [f for f in explain_run(same, "hal").findings if f.category == "software"]
    # NVIDIA's README names only its container: nothing to compare, the container named, no finding.
    e = explain_run(run, "ngc:v100_16gb_amp")
    assert not [f for f in e.findings if f.category == "software"]
    (checked,) = [r.evidence for r in e.ruled_out if r.category == "software"]
    assert "NGC PyTorch 21.03" in checked and "torch 2.3.1" in checked


def test_a_gap_that_nothing_checked_explains_says_so_and_what_to_measure_next(tmp_path):
    # NVIDIA's recipe on its own device (NHWC, cudnn.benchmark, batch 256, AMP), a tight interval, no data wait,
    # two ranks on one node sending nothing measured: every cause is checked and none applies, yet the run
    # makes 800 img/s per GPU of NVIDIA's 1,200 (references/ngc.json v100_16gb_amp, one GPU).
    run = _run(tmp_path, world_size=2, img_per_sec_total_mean=1600.0, compute_ips=1600.0, channels_last=True,
               cudnn_benchmark=True, stragglers={"pattern": "even", "slowest_rank": 1, "slowest_windows": 5,
                                                 "windows": 10, "median_excess_pct": 1.0})
    e = explain_run(run)
    assert e.reference == "ngc:v100_16gb_amp" and e.findings == [], [f.cause for f in e.findings]
    assert e.next_step == ("Nothing checked explains the 1.50x gap. Measure next: `torchrun --nproc_per_node 2 -m "
                           "dlscale profile bench --model resnet50 --batch-size 256 --precision amp_fp16 --image-size "
                           "224 --channels-last --cudnn-benchmark` (each part of the step on every rank; "
                           "docs/profiling.md)")
    # With nothing to compare with and nothing found, the same step: nothing stands out.
    alone = explain_run(run, "none")
    assert alone.findings == [] and alone.next_step.startswith("Nothing checked stands out. Measure next: `torchrun")


def _write_train(path, summary, windows):
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "metrics.jsonl").write_text("".join(json.dumps({"record": "train", **w}) + "\n" for w in windows))


def test_a_train_runs_communication_per_step_is_read_from_its_log_windows(tmp_path):
    # 640 img/s over 2 ranks at 32 per rank: 100 ms steps. The strategy's timer logged 50 ms in the epoch's
    # first window (loader start-up: left out), then 20 and 30: 25 ms, so the step without it is 75 ms.
    summary = {"kind": "train", "model": "resnet18", "precision": "fp32", "world_size": 2, "device": "cpu",
               "device_name": "x86_64", "batch_size": 32, "dist_optimizer": "neighbor_allreduce",
               "total_ips": 640.0}
    windows = [{"epoch": 0, "step": s, "comm_time_ms_per_step": t, "comm_bytes_per_step": 4e6,
                "throughput_img_per_s": 640.0, "compute_img_per_s": 640.0, "window_s": 1.0}
               for s, t in ((1, 50.0), (2, 20.0), (3, 30.0))]
    _write_train(tmp_path / "old", summary, windows)  # a summary from before it held the mean
    (e,) = explain(tmp_path / "old", "none")
    found = next(f for f in e.findings if f.category == "communication")
    assert found.cause == "25.0 ms of communication per step (neighbor_allreduce)"
    assert found.effect.factor == pytest.approx(100 / 75)
    assert "rank 0, mean of 2 log windows in metrics.jsonl" in found.evidence and "4.0 MB sent" in found.evidence
    # train's summary.json now holds the mean itself, which explain takes first.
    _write_train(tmp_path / "new", {**summary, "comm_time_ms_per_step": 40.0, "comm_bytes_per_step": 4e6}, windows)
    (e,) = explain(tmp_path / "new", "none")
    found = next(f for f in e.findings if f.category == "communication")
    assert found.effect.factor == pytest.approx(100 / 60) and "rank 0, mean of its log windows" in found.evidence
