"""dlscale predict's step as a function of the batch per device (predict/compute.py), its use in strong
scaling, the validation's rule that no point feeds its own prediction, and the same-host slowdown."""

import functools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dlscale.errors import ConfigError
from dlscale.predict import cases, compute, inputs, sweeps, validate
from dlscale.predict.ceilings import Ceilings, EpochStart, NodeLoader
from dlscale.predict.compute import Fixed, fit_fixed_per_image, from_one_point, from_points
from dlscale.predict.model import (
    Strategy,
    expected_max_standard_normal,
    predict,
    predict_point,
    waited_on,
    workload_for_model,
)
from dlscale.predict.network import Level, Network
from dlscale.predict.platforms import platform
from dlscale.report import references

MS = 1e-3

ROOT = Path(__file__).resolve().parents[2]


def test_fit_of_points_on_a_line_is_the_line():
    # 6 ms + b x 0.25 ms at 16, 32, 64: the fit gives both parameters back.
    t0, t1 = fit_fixed_per_image([(16, 10 * MS), (32, 14 * MS), (64, 22 * MS)])
    assert t0 == pytest.approx(6 * MS) and t1 == pytest.approx(0.25 * MS)


def test_fit_clamps_a_negative_fixed_part_to_zero():
    # Through (10, 1 s) and (20, 3 s) the line has t0 = -1 s: refitted through the origin with weights 1/t^2:
    # t1 = sum(w b t) / sum(w b^2) = (10 + 20 x 3 / 9) / (100 + 400 / 9).
    t0, t1 = fit_fixed_per_image([(10, 1.0), (20, 3.0)])
    assert t0 == 0.0 and t1 == pytest.approx((10 + 60 / 9) / (100 + 400 / 9))


def test_interpolation_between_points_and_the_fit_beyond():
    step = from_points([(16, 10 * MS), (32, 13 * MS), (64, 22 * MS)], "made up")
    assert step.at(16) == pytest.approx(10 * MS) and step.at(64) == pytest.approx(22 * MS)
    assert step.at(48) == pytest.approx(13 * MS + 9 * MS * 16 / 32)  # on the segment 32-64
    assert step.at(24) == pytest.approx(11.5 * MS)
    assert step.at(256) == pytest.approx(step.fixed_s + 256 * step.per_image_s)  # beyond: the fit
    assert step.at(8) == pytest.approx(step.fixed_s + 8 * step.per_image_s)
    assert step.fixed_known and "fitted to the 3 measured batch sizes" in step.fixed_source


def test_one_point_with_a_fixed_part():
    step = from_one_point(256, 0.2, Fixed(0.02, "given"))
    assert step.per_image_s == pytest.approx(0.18 / 256)
    assert step.at(128) == pytest.approx(0.02 + 0.09) and step.fixed_share(128) == pytest.approx(0.02 / 0.11)
    unknown = from_one_point(256, 0.2)
    assert not unknown.fixed_known and unknown.at(128) == pytest.approx(0.1)
    assert any("UNKNOWN, TAKEN AS ZERO" in line for line in unknown.describe())


@pytest.mark.parametrize("points,message", [
    ([(16, 0.1)], "needs steps measured at two batch sizes"),
    ([(16, 0.1), (16, 0.2)], "needs steps measured at two batch sizes"),
    ([(16, 0.2), (32, 0.1)], "do not grow with the batch"),
])
def test_a_curve_that_cannot_be_fitted_is_one_line(points, message):
    with pytest.raises(ConfigError, match=message):
        fit_fixed_per_image(points)


def test_fixed_part_larger_than_the_step_is_refused():
    with pytest.raises(ConfigError, match="must be >= 0 and below the step"):
        from_one_point(16, 0.01, Fixed(0.02, "given"))


def _net() -> Network:
    return Network("test", 8, Level(100.0, 3.0), Level(10.0, 10.0), base_us=5.0)


def test_strong_scaling_uses_t_of_b_at_each_device_count():
    # t(b) = 3 ms + b x 0.1 ms: 8 devices at 400 each, 64 at 50 each.
    step = from_points([(50, 8 * MS), (400, 43 * MS)], "made up")
    work = workload_for_model("resnet50", batch_per_device=400, step_time=step)
    fast = Network("fast", 8, Level(10_000.0, 0.0), Level(10_000.0, 0.0))  # communication ~0: compute decides
    points = predict([8, 64], work, Strategy("gradient_allreduce"), fast, global_batch=3200)
    assert [p.batch_per_device for p in points] == [400, 50]
    assert points[0].compute_ms == pytest.approx(43.0) and points[1].compute_ms == pytest.approx(8.0)
    assert points[1].fixed_share == pytest.approx(3 / 8)
    assert points[1].limit == "small batch per device"
    # The same batch per device with a zero fixed part: per-image compute only.
    linear = workload_for_model("resnet50", batch_per_device=400, step_s=43 * MS)
    assert predict([64], linear, Strategy("gradient_allreduce"), _net(), global_batch=3200)[0].compute_ms == \
        pytest.approx(43.0 / 8)


def test_waited_on_is_all_devices_for_allreduce_and_one_peer_for_a_dynamic_exchange():
    net = platform("aws-p3.16xlarge").network()
    assert waited_on(128, Strategy("allreduce"), net) == 128
    assert waited_on(128, Strategy("neighbor_allreduce", schedule="inner_outer"), net) == 2
    assert waited_on(1, Strategy("allreduce"), net) == 1


def test_stragglers_wait_for_the_devices_a_step_synchronises_with():
    work = workload_for_model("resnet50", batch_per_device=64, step_s=0.2)
    ceilings = Ceilings(step_cv=0.1)
    point = predict_point(128, work, Strategy("allreduce"), _net(), ceilings)
    assert point.stragglers_ms == pytest.approx(0.1 * 200 * expected_max_standard_normal(128))


def test_node_loader_and_epoch_start_by_hand():
    loader = NodeLoader(worker_img_per_s=40.0, node_img_per_s=600.0, workers_per_device=16)
    assert loader.per_device(1) == pytest.approx(600.0) and loader.per_device(4) == pytest.approx(150.0)
    assert NodeLoader(40.0, 600.0, 2).per_device(2) == pytest.approx(80.0)  # 4 workers do not fill the node
    # 1,000 images over 4 devices at 25 per step: 10 steps, one window of 10; the first batch waits 25 / 50 s.
    start = EpochStart(worker_img_per_s=50.0, epoch_images=1000, window_steps=10)
    assert start.per_step_s(4, 25) == pytest.approx(0.5 / 10)
    # 1,000 over 3: 334 each (padded), 14 steps of 25, one whole window of 10 (the last 4 dropped).
    assert start.per_step_s(3, 25) == pytest.approx(0.5 / 10)


def test_shipped_device_curve_gives_the_fixed_part(monkeypatch):
    # the range an unknown fixed part is said to lie in, read from this test's curve, is not kept past it
    monkeypatch.setattr(compute, "known_range_ms", functools.cache(compute.known_range_ms.__wrapped__))
    monkeypatch.setattr(compute, "_device_steps", lambda: {"devices": {"H100": {
        "batch_curve": [{"batch_size": 16, "step_time_ms": 5.0}, {"batch_size": 32, "step_time_ms": 7.0}],
        "command": "dlscale bench ...", "date": "today", "machine": "one H100"}}})
    fixed = compute.fixed_for_device("H100-SXM5-80GB")
    assert fixed.known and fixed.seconds == pytest.approx(3 * MS)
    assert not compute.fixed_for_device("V100 16GB").known
    # --peak-tflops H100 takes it: t(b) = 3 ms + b x t1 through the FLOPs figure at its batch.
    work = inputs.workload_from_flops("resnet50", batch=256, peak_tflops="H100", mfu=0.5)
    full = work.compute_s(256)
    assert work.step_time.fixed_s == pytest.approx(3 * MS)
    assert work.compute_s(128) == pytest.approx(3 * MS + (full - 3 * MS) / 2)


@pytest.mark.parametrize("device,dtype,tflops", [("H100", "bf16", 989.4), ("V100-SXM2", "fp16", 125.0),
                                                 ("T4", "fp16", 65.0), ("P40", "fp32", 12.0)])
def test_a_device_name_takes_the_fastest_peak_it_has(device, dtype, tflops):
    """--peak-tflops DEVICE: BF16 where the device has it, else FP16 (Volta, Turing), else FP32 (the P40):
    the same step as the datasheet's number given as such (docs/references.md#nvidia-peak-tflops)."""
    none = compute.Fixed(0.0, "none", kind="given")
    named = inputs.workload_from_flops("resnet50", batch=64, peak_tflops=device, mfu=0.4, fixed=none)
    number = inputs.workload_from_flops("resnet50", batch=64, peak_tflops=tflops, mfu=0.4, fixed=none)
    assert inputs.device_peak_dtype(device) == dtype
    assert named.compute_s(64) == pytest.approx(number.compute_s(64))
    assert f"{device}'s {dtype} peak" in named.source


def test_an_unmeasured_device_is_unknown_and_says_so():
    fixed = compute.fixed_for_device("V100 16GB")  # no curve of a V100 ships
    assert not fixed.known and fixed.seconds == 0.0 and "device_steps.json" in fixed.source


def test_the_shipped_h100_curve_gives_its_fitted_fixed_part():
    """The H100 curve measured by the GPU campaign (2026-11-27): t0 is the intercept of the straight line
    through its points, fitted on relative errors (numpy's weighted polyfit, weights 1/t)."""
    entry = json.loads((ROOT / "src/dlscale/references/device_steps.json").read_text())["devices"]["H100"]
    b = np.array([p["batch_size"] for p in entry["batch_curve"]], dtype=float)
    t = np.array([p["step_time_ms"] for p in entry["batch_curve"]], dtype=float) / 1000
    slope, intercept = np.polyfit(b, t, 1, w=1 / t)
    fixed = compute.fixed_for_device("NVIDIA H100 80GB HBM3")
    assert fixed.known and fixed.seconds == pytest.approx(intercept, rel=1e-6)
    assert 1e-3 < fixed.seconds < 5e-3 and entry["date"] == "2026-11-27" and "pending" not in entry


def test_a_reference_with_two_batches_per_device_gives_the_fit():
    work, spread = inputs.workload_from_reference("mlperf:h100_strong")
    assert spread is None and len(work.step_time.points) == 2
    # 8 GPUs at 400 each: 3200 / 57,288 s per step; 64 at 50 each: 3200 / 314,118.
    assert work.compute_s(400) == pytest.approx(3200 / 57288) and work.compute_s(50) == pytest.approx(3200 / 314118)
    assert work.batch_per_device == 400


# ----------------------------------------------------------------------------- validation never fits its point


def test_no_validation_row_is_fed_by_its_own_point():
    rows, _ = validate.validate_references()
    assert len(rows) >= 43
    for row in rows:
        assert row.fed_by, row.point_id
        assert row.point_id not in row.fed_points, f"{row.point_id} fed its own prediction"


def _perturbed(name: str, series_id: str, devices: int):
    """load_reference with one published point's figures x 1.5."""
    original = references.load_reference

    def load(ref_name: str):
        ref = original(ref_name)
        if ref_name != name:
            return ref
        series = []
        for s in ref.series:
            if s.id == series_id:
                points = tuple({k: (v * 1.5 if k in ("img_per_s", "epoch_time_s", "speedup", "efficiency") else v)
                                for k, v in p.items()} if p.get("devices") == devices else p for p in s.points)
                s = replace(s, points=points)
            series.append(s)
        return replace(ref, series=tuple(series))
    return load


def test_changing_a_published_point_does_not_change_its_own_prediction(monkeypatch):
    rows, _ = validate.validate_references()
    for row in rows:
        # every reference the validation reads goes through cases._reference
        monkeypatch.setattr(cases, "_reference", _perturbed(row.case.reference, row.case.series, row.devices))
        again, _ = validate.run_case(row.case)
        monkeypatch.undo()
        same = next(r for r in again if r.devices == row.devices)
        assert same.predicted == pytest.approx(row.predicted), f"{row.point_id} depends on its own figure"
    # The perturbation reaches the validation: changing a case's compute input changes its predictions.
    row = next(r for r in rows if r.case.reference == "mlperf_scale" and r.case.series == "dgxa100_v20")
    monkeypatch.setattr(cases, "_reference", _perturbed("mlperf_scale", "dgxa100_v20", 8))
    again, _ = validate.run_case(row.case)
    assert next(r for r in again if r.devices == row.devices).predicted != pytest.approx(row.predicted)


def test_the_fit_would_use_the_other_batch_of_the_series():
    # MLPerf's 64-GPU point is never in its own fit, so its compute comes from the 8-GPU point alone.
    case = next(c for c in validate.CASES if c.reference == "mlperf")
    work, fed, _ = validate.case_workload(case, validate.Terms(), predicted="mlperf:h100_strong@64")
    assert fed == ["mlperf:h100_strong@8"] and len(work.step_time.points) == 1
    work, fed, _ = validate.case_workload(case, validate.Terms())
    assert sorted(fed) == ["mlperf:h100_strong@64", "mlperf:h100_strong@8"] and len(work.step_time.points) == 2


def test_a_point_is_fitted_only_over_its_own_program():
    # MLPerf v0.7's DGX A100: 8 and 16 GPUs ran resnet-v1b-stats-fl, 768 GPUs resnet-v1b-fl (their config_*.sh).
    # The 768-GPU point's compute is the 8-GPU figure with the A100's modelled fixed part, not a fit through the
    # 16-GPU run, whose configuration differs from both; taken across programs the fit put the fixed part at 29 ms.
    case = next(c for c in validate.CASES if c.series == "dgxa100_v07")
    terms = validate.case_terms(case)
    work, fed, fixed_fed = validate.case_workload(case, terms, predicted="mlperf_scale:dgxa100_v07@768",
                                                  program="resnet-v1b-fl")
    assert fed == ["mlperf_scale:dgxa100_v07@8"] and fixed_fed == ["predict/fixed.py's floor"]
    assert work.step_time.fixed_kind == "modelled" and work.step_time.fixed_s < 0.005
    across, fed, _ = validate.case_workload(case, terms, predicted="mlperf_scale:dgxa100_v07@768")
    assert fed == ["mlperf_scale:dgxa100_v07@8", "mlperf_scale:dgxa100_v07@16"] and across.step_time.fixed_s > 0.025
    _, fed, _ = validate.case_workload(case, terms, predicted="mlperf_scale:dgxa100_v07@16",
                                       program="resnet-v1b-stats-fl")
    assert fed == ["mlperf_scale:dgxa100_v07@8"]
    # v2.0: the smallest point (the compute figure) and the other multi-node points of the 64-GPU point's program
    case = next(c for c in validate.CASES if c.series == "dgxa100_v20")
    _, fed, _ = validate.case_workload(case, validate.case_terms(case), predicted="mlperf_scale:dgxa100_v20@64",
                                       program="resnet-v1b-fl")
    assert sorted(fed) == ["mlperf_scale:dgxa100_v20@1024", "mlperf_scale:dgxa100_v20@4216",
                           "mlperf_scale:dgxa100_v20@8"]
    # every row says what fed its fixed part, a published point or not
    rows, _ = validate.validate_references()
    for row in rows:
        step_from_fit = len([pid for parameter, pid in row.fed_by if parameter == "compute"]) >= 2
        assert step_from_fit or any(parameter == "fixed part" for parameter, _ in row.fed_by), row.point_id


def test_a_reference_files_programs_are_kept_apart_as_the_shipped_ones(tmp_path):
    # MLPerf v4.0's H100 steps at 400 and 50 per GPU and a made-up 16-GPU point at 200 of the 8-GPU run's program:
    # the 64-GPU point, of another program, is predicted from the 8-GPU point and the H100's measured fixed part.
    points = [{"devices": 8, "nodes": 1, "batch_per_device": 400, "img_per_s": 57288, "program": "big"},
              {"devices": 16, "nodes": 2, "batch_per_device": 200, "img_per_s": 100000, "program": "big"},
              {"devices": 64, "nodes": 8, "batch_per_device": 50, "img_per_s": 314118, "program": "small"}]
    data = {"name": "mine", "title": "three points, two programs", "hardware": {"device": "H100"},
            "sources": [{"id": "s", "where": "here", "what": "made up"}],
            "series": [{"id": "h100", "label": "H100", "kind": "scaling", "device": "H100-SXM5-80GB",
                        "precision": "fp16", "platform": "dgx-h100", "source": ["s"], "points": points}]}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    (case,) = cases.file_cases(str(path))
    rows = {r.devices: r for r in validate.run_case(case)[0]}
    assert rows[64].fed_by == (("compute", "mine:h100@8"), ("fixed part", "references/device_steps.json"),
                               ("stragglers", "pytorch:ddp_benchmark@1"))
    assert ("compute", "mine:h100@64") not in rows[16].fed_by and ("compute", "mine:h100@8") in rows[16].fed_by
    for point in points:
        point.pop("program")
    path.write_text(json.dumps(data))
    cases._reference.cache_clear()
    (case,) = cases.file_cases(str(path))
    rows = {r.devices: r for r in validate.run_case(case)[0]}
    assert ("compute", "mine:h100@16") in rows[64].fed_by  # without programs, every other point fits it


# ----------------------------------------------------------------------------- same-host slowdown


def _bench_summary(world: int, rate: float, forward_ms: float) -> dict:
    return {"kind": "bench", "model": "resnet18", "batch_size": 16, "image_size": 64, "num_classes": 1000,
            "width": 64, "world_size": world, "device": "cpu", "img_per_sec_total_mean": rate,
            "dist_optimizer": "allreduce", "num_batches_per_iter": 1,
            "iterations_per_rank": [[rate / world] * 4] * world, "rank_forward_ms": [[forward_ms] * 4] * world}


def _sweep_and_comm(tmp_path, points, *, env: dict | None = None):
    """A sweep of bench runs at world sizes 1 and 2 (points: (world, img/s, forward ms)) and a comm run of two
    gloo ranks whose allreduce fit is 2 ms + bytes at 1 GB/s."""
    sweep = tmp_path / "sweep"
    for world, rate, forward in points:
        run = sweep / f"world{world}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps(_bench_summary(world, rate, forward)))
        if env is not None:
            (run / "env.json").write_text(json.dumps(env))
    (sweep / "sweep.json").write_text(json.dumps({"kind": "sweep", "points": [
        {"run_dir": f"world{w}", "world_size": w, "nnodes": 1, "status": "ok", "series": "s"} for w, _, _ in points]}))
    comm = tmp_path / "comm"
    comm.mkdir()
    fit = {"latency_us": 2000.0, "busbw_gbs": 1.0, "points": 10, "rms_relative_error": 0.1}
    (comm / "summary.json").write_text(json.dumps({"kind": "comm", "world_size": 2, "local_world_size": 2,
                                                   "backend": "gloo", "results": {"world": {"all_reduce": {
                                                       "ranks": 2, "fit": {"in-place": fit}}}}}))
    return sweep, comm


def test_sweep_prediction_uses_the_measured_same_host_slowdown(tmp_path):
    sweep, comm = _sweep_and_comm(tmp_path, ((1, 100.0, 50.0), (2, 150.0, 75.0)),
                                  env={"torch_threads": 1, "cpu_count": 2})
    (row,) = sweeps.validate_sweep(sweep, comm)
    assert row.slowdown == pytest.approx(1.5)
    # The compute of each rank is 1.5 x the 1-rank step (0.16 s); 2 ranks fill 2 cores, so the allreduce
    # of ResNet-18's fp32 gradients runs after backward: step = 0.24 s + t(allreduce).
    work, _ = inputs.workload_from_run(sweep / "world1")
    net = inputs.network_from_comm_run(comm)
    expected = predict_point(2, replace(work, host_slowdown=1.5), Strategy(), net)
    assert expected.compute_ms == pytest.approx(240.0)
    assert row.predicted == pytest.approx(expected.img_per_s_total)
    assert row.predicted < predict_point(2, work, Strategy(), net).img_per_s_total


def test_a_slowdown_measured_otherwise_replaces_the_forward_times(tmp_path):
    sweep, comm = _sweep_and_comm(tmp_path, ((1, 100.0, 50.0), (2, 200.0, 75.0)))
    (row,) = sweeps.validate_sweep(sweep, comm, {2: 2.0})
    assert row.slowdown == 2.0 and "given: single-rank runs at once" in row.inputs


def test_slowdown_needs_both_forward_times():
    assert sweeps.host_slowdown({"rank_forward_ms": None}, {"rank_forward_ms": [[1.0]]}) is None
    assert sweeps.host_slowdown({"rank_forward_ms": [[2.0]]}, {"rank_forward_ms": [[3.0, 5.0]]}) == pytest.approx(2.0)
