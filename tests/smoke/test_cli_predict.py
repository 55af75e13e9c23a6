"""`dlscale comm` and `dlscale predict` as a user runs them: the run directories, the validation
against every shipped published scaling point, the gloo-sweep check, one-line errors."""

import json
import re
import time

import pytest
from commands import dlscale_here, run_process, torchrun

from dlscale.report.references import load_reference

SMALL = ["-b", "8", "-e", "4M", "-f", "8", "-w", "1", "-n", "3", "--pg-timeout", "60"]


def test_predict_writes_a_run_directory(tmp_path):
    start = time.perf_counter()
    out = dlscale_here("predict", "--gpus", "1,8,64,512,4096", "--from-reference", "ngc:v100_16gb_amp",
                       "--platform", "dgx1-v100", "--no-run-dir", cwd=tmp_path)
    elapsed = time.perf_counter() - start
    assert out.returncode == 0, out.stderr
    assert "4096" in out.stdout and "img/s total" in out.stdout
    print(f"dlscale predict, 5 device counts up to 4096: {elapsed:.2f} s")  # goal < 1 s: reported, not asserted
    out = dlscale_here("predict", "--gpus", "1,2,4", "--from-reference", "hal:feb", "--platform", "hal-ac922",
                       "--dist-optimizer", "gradient_allreduce", "--output-dir", "runs", "--name", "p",
                       "--json", "p.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    run = tmp_path / "runs" / "p"
    assert {f.name for f in run.iterdir()} >= {"config.json", "env.json", "summary.json", "predicted.png"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary == json.loads((tmp_path / "p.json").read_text())
    assert summary["kind"] == "predict" and [p["devices"] for p in summary["points"]] == [1, 2, 4]
    assert summary["inputs"]["compute"].startswith("published: HAL Feb 2020")
    assert json.loads((run / "config.json").read_text())["kind"] == "predict"


@pytest.mark.parametrize("args,message", [
    (["--from-reference", "ngc", "--platform", "dgx-z100"], "unknown --platform 'dgx-z100'"),
    (["--from-reference", "ngc", "--platform", "dgx1-v100", "--gpus", "0,8"], "argument --gpus: '0,8'"),
    (["--platform", "dgx1-v100"], "give one compute source"),
    (["--from-reference", "nope", "--platform", "dgx1-v100"], "unknown --reference 'nope'"),
    (["--from-run", "RUN", "--platform", "dgx1-v100"], "is a comm run"),
    (["--peak-tflops", "0", "--mfu", "0.3", "--batch-size", "64", "--platform", "dgx-a100"],
     "argument --peak-tflops: '0': give a number above 0 and at most 100,000"),
    (["--peak-tflops", "nan", "--mfu", "0.3", "--batch-size", "64", "--platform", "dgx-a100"],
     "argument --peak-tflops: 'nan'"),
    (["--peak-tflops", "Z900", "--mfu", "0.3", "--batch-size", "64", "--platform", "dgx-a100"], "or a device: "),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"kind": "comm"}))
    out = dlscale_here("predict", *[str(run) if a == "RUN" else a for a in args], "--no-run-dir", cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlscale predict: error:") and message in lines[0], out.stderr


TINY_BENCH = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--num-classes", "10",
              "--num-warmup-batches", "2", "--num-batches-per-iter", "2", "--num-iters", "3", "--device", "cpu"]


def test_a_bench_curve_is_read_back_by_predict(tmp_path):
    bench = dlscale_here("bench", *TINY_BENCH, "--batch-size", "4,16,64", "--output-dir", "runs", "--name", "curve",
                         cwd=tmp_path)
    assert bench.returncode == 0, bench.stderr
    # The tiny model's measured steps are mostly its fixed part, which a loaded machine's noise can make shrink
    # with the batch: the curve read back is set to t = 8 ms + 0.5 ms x batch, so the fit is known by hand.
    summary_path = tmp_path / "runs" / "curve" / "summary.json"
    summary = json.loads(summary_path.read_text())
    for point in summary["batch_curve"]:
        point["step_time_ms"] = 8.0 + 0.5 * point["batch_size"]
        point["img_per_sec"] = point["batch_size"] / point["step_time_ms"] * 1000
    summary_path.write_text(json.dumps(summary))
    curve = summary["batch_curve"]
    out = dlscale_here("predict", "--from-run", "runs/curve", "--gpus", "1,4,16", "--global-batch", "256",
                       "--intra-gbps", "100", "--inter-gbps", "100", "--json", "p.json", "--no-run-dir", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "p.json").read_text())
    # Strong scaling: 256, 64, 16 images per device; 64 and 16 were measured, so their compute is the curve's
    # own step; 256 lies beyond it, on the fit printed with its two parameters.
    steps = {c["batch_size"]: c["step_time_ms"] for c in curve}
    by_batch = {p["batch_per_device"]: p for p in result["points"]}
    assert by_batch[64]["compute_ms"] == pytest.approx(steps[64])
    assert by_batch[16]["compute_ms"] == pytest.approx(steps[16])
    t0, t1 = result["inputs"]["fixed_part_ms"], result["inputs"]["per_image_ms"]
    assert (t0, t1) == (pytest.approx(8.0), pytest.approx(0.5))
    assert by_batch[256]["compute_ms"] == pytest.approx(8.0 + 256 * 0.5)
    assert result["inputs"]["fixed_part_known"] and "t0 (fixed part): fitted to the 3 measured" in out.stdout
    assert "batch/device" in out.stdout and "fixed %" in out.stdout


@pytest.mark.parametrize("args,message", [
    (["--from-reference", "ngc:v100_16gb_amp", "--platform", "dgx1-v100", "--step-curve", "RUN"],
     "measured one batch size, so it has no step curve"),
    (["--from-reference", "ngc:v100_16gb_amp", "--platform", "dgx1-v100", "--step-overhead-ms", "500"],
     "--step-overhead-ms 500 must be >= 0 and below the step"),
    (["--from-run", "CURVE1", "--platform", "dgx1-v100"], "needs steps measured at two batch sizes"),
])
def test_bad_curve_input_is_one_line(tmp_path, args, message):
    run, curve1 = tmp_path / "run", tmp_path / "curve1"
    for path, extra in ((run, {}), (curve1, {"batch_curve": [{"batch_size": 8, "step_time_ms": 10.0,
                                                              "img_per_sec": 800.0, "ci95": 1.0}]})):
        path.mkdir()
        (path / "summary.json").write_text(json.dumps({
            "kind": "bench", "model": "resnet18", "batch_size": 8, "world_size": 1, "device": "cpu",
            "img_per_sec_total_mean": 800.0, **extra}))
    args = [{"RUN": str(run), "CURVE1": str(curve1)}.get(a, a) for a in args]
    out = dlscale_here("predict", *args, "--no-run-dir", cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_step_overhead_is_an_override_printed_as_such(tmp_path):
    out = dlscale_here("predict", "--from-reference", "ngc:v100_16gb_amp", "--platform", "dgx1-v100", "--gpus", "1,8",
                       "--global-batch", "256", "--step-overhead-ms", "20", "--json", "p.json", "--no-run-dir",
                       cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "t0 (fixed part): 20 ms, given: --step-overhead-ms (an override)" in out.stdout
    points = json.loads((tmp_path / "p.json").read_text())["points"]
    # 1,200 img/s at 256: 213.33 ms per step; with t0 = 20 ms, t(32) = 20 + 32 x (213.33 - 20) / 256 ms.
    assert points[1]["compute_ms"] == pytest.approx(20 + 32 * (256 / 1.2 - 20) / 256)


def test_strong_scaling_to_4096_h100(tmp_path):
    # The MLPerf series publishes 400 and 50 per GPU: its fit carries the batch per device down to 16.
    out = dlscale_here("predict", "--from-reference", "mlperf:h100_strong", "--platform", "dgx-h100",
                       "--gpus", "8,64,512,4096", "--global-batch", "65536", "--dist-optimizer", "gradient_allreduce",
                       "--grad-bytes", "2", "--json", "p.json", "--no-run-dir", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    points = json.loads((tmp_path / "p.json").read_text())["points"]
    assert [p["batch_per_device"] for p in points] == [8192, 1024, 128, 16]
    assert points[-1]["limit"] == "small batch per device" and points[-1]["fixed_share"] > 0.5


def test_validate_predicts_every_shipped_scaling_point(tmp_path):
    out = dlscale_here("predict", "--validate", "--json", "v.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "v.json").read_text())
    rows = report["rows"]
    covered = {(r["reference"], r["series"]) for r in rows}
    for name in ("hal", "ngc", "dlperf", "mlperf", "mlperf_scale"):
        for series in load_reference(name).of_kind("scaling"):
            if len(series.curve("img_per_s")) >= 2:
                assert (name, series.id) in covered, (name, series.id)
    assert {("bluefog", "neighbor_allreduce"), ("bluefog", "horovod")} <= covered
    for row in rows:
        assert row["error"] == pytest.approx(row["predicted"] / row["published"] - 1)
    # the compute input is never among the predicted points
    assert not any(r["reference"] == "ngc" and r["devices"] == 1 for r in rows)
    assert not any(r["reference"] == "hal" and r["series"] == "feb" and r["devices"] == 2 for r in rows)
    # every shipped point counts, each with the published points that fed its parameters, never itself
    assert report["all"]["points"] == len(rows) >= 43
    for row in rows:
        own = f"{row['reference']}:{row['series']}@{row['devices']}"
        assert row["fed_by"] and own not in {f["point"] for f in row["fed_by"]}
    for word in (f"All {len(rows)} shipped points", "median |error|", "parameters from", "Inputs:", "hal:feb",
                 "mlperf:h100_strong", "mlperf_scale:dgxa100_v20"):
        assert word in out.stdout
    # the published efficiencies of runs not shipped, apart from the shipped points and their goals
    checks = report["efficiency_checks"]
    assert {r["series"] for r in checks["rows"]} == {"goyal_2017", "akiba_2017", "jia_2018", "mikami_2018"}
    assert checks["statistics"]["points"] == 4 and "4 published efficiencies: median |error|" in out.stdout
    assert not any(r["reference"] == "large_batch" for r in rows)
    print("\n".join(out.stdout.splitlines()[:60]))


@pytest.mark.distributed
def test_comm_then_predict_from_it(tmp_path):
    comm = run_process([*torchrun(2), "-m", "dlscale", "comm", "--op", "all_reduce,broadcast", *SMALL,
                        "--output-dir", "runs", "--name", "comm"], tmp_path, env={"DLSCALE_PROGRESS_EVERY": "0"})
    assert comm.returncode == 0, comm.stderr[-3000:]
    # In a pipe, a plain progress line after every size (DLSCALE_PROGRESS_EVERY=0), after that size's row.
    progress = [line for line in comm.stdout.splitlines() if line.startswith("progress: comm ")]
    assert len(progress) == 14 and progress[-1].startswith("progress: comm 14/14 sizes, broadcast 2097152 B: ")
    assert all(re.search(r"GB/s busbw, \d+:\d\d:\d\d elapsed, \d+:\d\d:\d\d left$", line) for line in progress)
    for header in ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"):
        assert header in comm.stdout
    assert "Out of bounds values : 0 OK" in comm.stdout and "# Using devices" in comm.stdout
    summary = json.loads((tmp_path / "runs" / "comm" / "summary.json").read_text())
    assert summary["kind"] == "comm" and summary["wrong"] == 0 and summary["backend"] == "gloo"
    fit = summary["results"]["world"]["all_reduce"]["fit"]["in-place"]
    out = dlscale_here("predict", "--gpus", "1,2", "--peak-tflops", "1", "--mfu", "0.5", "--batch-size", "8",
                       "--comm-run", "runs/comm", "--no-run-dir", cwd=tmp_path)
    if "latency_us" in fit:
        assert out.returncode == 0, out.stderr
        assert "dlscale comm run" in out.stdout
    else:  # a shared machine can hide the bandwidth in noise at these small sizes
        assert "no all_reduce fit" in out.stderr

    # the gloo-sweep check on a sweep directory of two bench runs (figures made up; the arithmetic is checked)
    sweep = tmp_path / "sweep"
    for world, rate in ((1, 100.0), (2, 180.0)):
        run = sweep / f"world{world}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({
            "kind": "bench", "model": "resnet18", "batch_size": 16, "image_size": 64, "num_classes": 1000,
            "width": 64, "world_size": world, "device": "cpu", "img_per_sec_total_mean": rate,
            "dist_optimizer": "allreduce", "num_batches_per_iter": 1, "iterations_per_rank": [[rate] * 4] * world}))
        (run / "env.json").write_text(json.dumps({"torch_threads": 1, "cpu_count": 2}))
    (sweep / "sweep.json").write_text(json.dumps({"kind": "sweep", "points": [
        {"run_dir": f"world{w}", "world_size": w, "nnodes": 1, "status": "ok", "series": "s"} for w in (1, 2)]}))
    if "latency_us" in fit:
        out = dlscale_here("predict", "--validate", "--sweep", "sweep", "--comm-run", "runs/comm", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "sweep s 2 ranks: measured 180.0 img/s" in out.stdout


def test_the_header_says_what_efficiency_is_relative_to_and_that_stragglers_are_zero(tmp_path):
    """Efficiency is over the smallest count asked for (BlueFog at 128 GPUs reads 100% against 16, 89% against
    one); the header says which, and says when no spread of step times was given."""
    header = [line for line in dlscale_here("predict", "--from-reference", "bluefog", "--gpus", "16,128",
                                            "--no-run-dir", cwd=tmp_path).stdout.splitlines() if line.startswith("  ")]
    assert "  efficiency: each count's img/s per device over that at 16 devices, the smallest count asked for " \
           "(--gpus); list 1 first for efficiency against one device" in header
    out = dlscale_here("predict", "--from-reference", "ngc:v100_16gb_amp", "--intra-gbps", "960", "--inter-gbps",
                       "384", "--gpus", "1,8", "--no-run-dir", cwd=tmp_path).stdout
    assert "  efficiency: each count's img/s per device over one device's" in out.splitlines()
    assert "  stragglers: TAKEN AS ZERO: no spread of step times given" in out  # no platform: no kind of machine
    given = dlscale_here("predict", "--from-reference", "ngc:v100_16gb_amp", "--platform", "dgx1-v100", "--gpus",
                         "1,8", "--step-cv", "0.01", "--no-run-dir", cwd=tmp_path).stdout
    assert "stragglers: TAKEN AS ZERO" not in given and "  stragglers: step spread given: 1.0%" in given
    default = dlscale_here("predict", "--from-reference", "ngc:v100_16gb_amp", "--platform", "dgx1-v100", "--gpus",
                           "1,8", "--no-run-dir", cwd=tmp_path).stdout
    assert "  stragglers: per-step spread 0.63%, the default of dedicated machines on an RDMA fabric" in default


MLPERF_AS_A_FILE = {
    "name": "mine", "title": "MLPerf v4.0's H100 points as a user gives them",
    "sources": [{"id": "mlperf", "where": "mlcommons/training_results_v4.0@6fe95437 NVIDIA/results/eos_*"}],
    "series": [{"id": "h100", "label": "DGX H100 at global batch 3200", "kind": "scaling", "device": "H100-SXM5-80GB",
                "precision": "fp16 (MXNet, fp16 gradients)", "platform": "dgx-h100",
                "dist_optimizer": "gradient_allreduce", "bucket_cap_mb": 64, "grad_bytes": 2, "source": ["mlperf"],
                "points": [{"devices": 8, "nodes": 1, "batch_per_device": 400, "global_batch": 3200,
                            "img_per_s": 57288},
                           {"devices": 64, "nodes": 8, "batch_per_device": 50, "global_batch": 3200,
                            "img_per_s": 314118}]}]}


def _file(tmp_path, data, name="mine.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_a_reference_file_is_anchored_and_validated_as_a_shipped_one(tmp_path):
    """The same two published points as references/mlperf.json, in a file with the setting the validation documents
    for them: the multi-node point has its own communication taken out exactly as the shipped one's."""
    mine = _file(tmp_path, MLPERF_AS_A_FILE)
    args = ["--gpus", "8,64,320", "--no-run-dir", "--json"]
    theirs = dlscale_here("predict", "--from-reference", "mlperf:h100_strong", *args, "shipped.json", cwd=tmp_path)
    ours = dlscale_here("predict", "--reference-file", mine, "--from-reference", "mine:h100", *args, "file.json",
                        cwd=tmp_path)
    assert theirs.returncode == 0 and ours.returncode == 0, ours.stderr
    shipped, own = (json.loads((tmp_path / f).read_text()) for f in ("shipped.json", "file.json"))
    assert own["inputs"]["fixed_part_ms"] == pytest.approx(shipped["inputs"]["fixed_part_ms"])
    assert own["inputs"]["per_image_ms"] == pytest.approx(shipped["inputs"]["per_image_ms"])
    rates = [p["img_per_s_total"] for p in shipped["points"]]
    assert [p["img_per_s_total"] for p in own["points"]] == pytest.approx(rates)
    assert own["points"][1]["img_per_s_total"] == pytest.approx(314118)  # its own point given back, anchored
    assert "at 64 devices (batch 50) the model adds" in own["inputs"]["anchored"]
    # --validate predicts the file's points as the shipped ones, never from the point itself, and apart from them
    out = dlscale_here("predict", "--validate", "--reference-file", mine, "--json", "v.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "v.json").read_text())
    (row,) = [r for r in report["rows"] if r["reference"] == "mine"]
    (shipped_row,) = [r for r in report["rows"] if r["reference"] == "mlperf" and r["devices"] == 64]
    assert row["predicted"] == pytest.approx(shipped_row["predicted"])
    assert {"point": "mine:h100@64"} not in [{"point": f["point"]} for f in row["fed_by"]]
    assert report["file"]["points"] == 1 and f"Your 1 points ({mine})" in out.stdout
    assert report["all"]["points"] == len(report["rows"]) - 1


@pytest.mark.parametrize("change,message", [
    (lambda d: d.pop("sources"), "mine.json: no sources (it should be a list)"),
    (lambda d: d["series"][0].pop("source"), "series h100 must name its sources"),
    (lambda d: d["series"][0]["points"][1].update(img_per_s="fast"), "series[0].points[1].img_per_s is 'fast', "
                                                                      "not a number above 0"),
    (lambda d: d["series"][0].update(platform="dgx-z100"), "unknown --platform 'dgx-z100'; choose one of dgx1-v100"),
    (lambda d: d["series"][0].pop("platform"), "series h100 names no platform"),
    (lambda d: d["series"][0]["points"][1].update(program=3), "series[0].points[1].program is 3, not text"),
    (lambda d: d["series"][0]["points"][1].update(config=["a.sh"]), "series[0].points[1].config is ['a.sh'], not text"),
    (lambda d: d["series"][0].update(overlay="no"), "series[0].overlay is 'no', not true or false"),
    (lambda d: d["series"][0].update(dist_optimizer="ring_allreduce"),
     "series h100: dist_optimizer='ring_allreduce'; choose one of allreduce, gradient_allreduce"),
    (lambda d: d["series"][0].update(algorithm="rings"), "series h100: algorithm='rings'; choose one of auto, ring"),
    (lambda d: d["series"][0].update(overlap="forward"), "series h100: overlap='forward'; choose one of backward"),
])
def test_a_bad_reference_file_is_one_line_naming_the_field(tmp_path, change, message):
    data = json.loads(json.dumps(MLPERF_AS_A_FILE))
    change(data)
    out = dlscale_here("predict", "--validate", "--reference-file", _file(tmp_path, data), cwd=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and message in lines[0], out.stderr


def test_a_rate_given_as_such_is_anchored_in_the_commands_setting(tmp_path):
    out = dlscale_here("predict", "--from-reference", "rate=57288,devices=8,batch=400,device=H100", "--platform",
                       "dgx-h100", "--dist-optimizer", "gradient_allreduce", "--grad-bytes", "2", "--bucket-cap-mb",
                       "64", "--gpus", "8,64", "--global-batch", "3200", "--json", "p.json", "--no-run-dir",
                       cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "p.json").read_text())
    assert result["points"][0]["img_per_s_total"] == pytest.approx(57288)  # its own count in its own setting
    assert "given on the command line: 57,288.0 img/s at 8 device(s) of batch 400" in out.stdout
    assert "the H100 curve measured by dlscale bench" in out.stdout  # the device's fixed part, by name
    for bad, message in (("rate=1,devices=8", "needs batch"), ("rate=x,devices=8,batch=4", "rate='x'"),
                         ("rate=1,devices=8,batch=4,device=Z900", "give one of B200, H200 NVL"),
                         ("speed=1", "'speed=1' is not KEY=VALUE"),
                         ("rate=1,devices=8,batch=4,framework=caffe", "framework='caffe': pytorch or mxnet")):
        refused = dlscale_here("predict", "--from-reference", bad, "--platform", "dgx-h100", "--no-run-dir",
                               cwd=tmp_path)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr


def test_the_stack_that_issues_the_kernels_sets_the_modelled_fixed_part(tmp_path):
    """A V100 figure of 1,200 img/s at 256 (NVIDIA's AMP figure): its fixed part modelled with eager PyTorch's 4 us
    per op, with MXNet's executor (4.83 us per launch, 42 engine operations at its default bulk of 15), and with a
    CUDA graph (0.58 us per node); each header says which and t1 follows from the one figure."""
    floors, figure = {}, "rate=1200,devices=1,batch=256,device=V100,precision=amp_fp16"
    for extra in ((), ("--framework", "mxnet"), ("--execution", "cuda-graphs")):
        out = dlscale_here("predict", "--from-reference", figure,
                           "--platform", "dgx1-v100", "--gpus", "1", "--no-run-dir", *extra, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        floors[extra[-1] if extra else "eager"] = next(line for line in out.stdout.splitlines() if "t0 (fixed" in line)
    assert "(pytorch eager): 624 kernels x 4.00 us = 2.50 ms" in floors["eager"]
    assert "(mxnet eager, 15/15 nodes per engine operation): 624 kernels x 4.83 us + 42 engine operations x 4.83 us" \
        in floors["mxnet"]
    assert "(pytorch cuda-graphs): 624 kernels x 0.58 us = 0.36 ms" in floors["cuda-graphs"]


def test_a_runs_modelled_fixed_part_takes_the_stack_given_and_a_measured_one_refuses_it(tmp_path):
    """A one-batch A100 run has no curve: its fixed part is modelled with the run's stack (eager PyTorch, 4 us per
    kernel), or with the one --execution/--framework give (a graph's 0.58 us per node); a run whose steps were
    measured at two batch sizes, or on a device with no model, has nothing for them to change."""
    run = {"kind": "bench", "model": "resnet50", "batch_size": 64, "world_size": 1, "device": "cuda",
           "device_name": "NVIDIA A100-SXM4-80GB", "precision": "amp_bf16", "img_per_sec_total_mean": 2500.0}
    curve = [{"batch_size": b, "step_time_ms": 5.0 + 0.3 * b, "img_per_sec": b / (5.0 + 0.3 * b) * 1e3, "ci95": 1.0}
             for b in (32, 64)]
    for name, summary in (("a100", run), ("curve", {**run, "batch_curve": curve}), ("cpu", {**run, "device": "cpu",
                                                                                           "device_name": None})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    floors = {}
    for extra in ((), ("--execution", "cuda-graphs")):
        out = dlscale_here("predict", "--from-run", "a100", "--platform", "dgx-a100", "--gpus", "8", "--no-run-dir",
                           *extra, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        floors[extra[-1] if extra else "run"] = next(line for line in out.stdout.splitlines() if "t0 (fixed" in line)
    assert "(pytorch eager): 624 kernels x 4.00 us = 2.50 ms" in floors["run"]
    assert "(pytorch cuda-graphs): 624 kernels x 0.58 us = 0.36 ms" in floors["cuda-graphs"]
    for name, what in (("curve", "measured at its batch sizes"), ("cpu", "not modelled for its device")):
        out = dlscale_here("predict", "--from-run", name, "--platform", "dgx-a100", "--gpus", "8", "--no-run-dir",
                           "--framework", "mxnet", cwd=tmp_path)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and what in lines[0] and "drop them" in lines[0], out.stderr


def test_a_references_fixed_part_that_is_not_modelled_refuses_a_stack(tmp_path):
    """--execution and --framework change a modelled fixed part only: a series fitted over its published batch sizes
    and a figure on a device with a shipped curve (H100) have none for them to change, and say so naming the flag."""
    for figure, flag, what in (("mlperf:h100_strong", ("--execution", "eager"), "fitted to its published steps"),
                               ("rate=1000,devices=1,batch=256,device=H100", ("--framework", "mxnet"),
                                "measured (2.63 ms), not modelled")):
        out = dlscale_here("predict", "--from-reference", figure, "--platform", "dgx-h100", "--gpus", "8",
                           "--no-run-dir", *flag, cwd=tmp_path)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, out.stderr
        assert f"{' '.join(flag)}: " in lines[0] and what in lines[0] and "drop them" in lines[0], out.stderr


def test_both_rates_and_the_fixed_parts_range(tmp_path):
    out = dlscale_here("predict", "--from-reference", "rate=1000,devices=1,batch=256", "--platform", "dgx-a100",
                       "--gpus", "1,8", "--batch-size", "32", "--epochs", "90", "--eval-every", "4", "--no-run-dir",
                       "--json", "p.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "time to train" in out.stdout and "img/s end-to-end" in out.stdout
    assert "start-up UNKNOWN, TAKEN AS ZERO (--startup-s)" in out.stdout
    assert "the fixed parts of ResNet-50 dlscale ships lie between 2.63 and 29.97 ms" in out.stdout
    points = json.loads((tmp_path / "p.json").read_text())["points"]
    assert all(p["limit"].endswith("(t0 unknown)") for p in points)  # a smaller batch than the figure's
    assert points[1]["img_per_s_end_to_end"] < points[1]["img_per_s_total"]
    plain = dlscale_here("predict", "--from-reference", "ngc:a100_80gb_amp", "--gpus", "1,8", "--no-run-dir",
                         cwd=tmp_path).stdout
    assert "  rates: img/s is the step rate (training steps alone: no start-up, no evaluation" in plain


def test_machines_by_flag(tmp_path):
    out = dlscale_here("predict", "--from-reference", "ngc:a100_80gb_amp", "--platform", "dgx-a100", "--nics", "2",
                       "--nic-gbps", "100", "--transport", "roce", "--algorithm", "sharp", "--bn-group", "2",
                       "--gpus", "8,64", "--no-run-dir", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "fabric given: nics_per_node 2, nic_gbps 100, transport roce" in out.stdout
    assert "24.000 GB/s per node between nodes" in out.stdout and "sharp algorithm" in out.stdout
    assert "BatchNorm over groups of 2" in out.stdout
    tcp = dlscale_here("predict", "--from-reference", "ngc:a100_80gb_amp", "--platform", "dgx-a100", "--nics", "1",
                       "--transport", "tcp", "--algorithm", "sharp", "--gpus", "8,64", "--no-run-dir", cwd=tmp_path)
    assert tcp.returncode == 2 and "nodes on TCP have none" in tcp.stderr, tcp.stderr
    listed = dlscale_here("predict", "--list-platforms", cwd=tmp_path).stdout
    for name in ("dgx2h", "abci-v100", "xe8545-a100", "r750xa-a100-pcie", "dss8440-a100-pcie", "azure-ndm-a100-v4"):
        assert f"{name}: " in listed


def test_stragglers_from_a_run_directory_by_hand(tmp_path):
    """--stragglers-from: a bench run of two ranks whose iterations of 4 steps took 0.9 and 1.1 s alike (a spread of
    0.1 per iteration, 0.1 x sqrt(4) = 0.2 per step), and a compute of 100 ms (1,000 img/s at batch 100 on one device):
    an allreduce over 2 devices waits 0.2 x 100 ms x E[max of 2] = 20 / sqrt(pi) = 11.28 ms, over 3 devices
    0.2 x 100 ms x 3 / (2 sqrt(pi)) = 16.93 ms (the closed forms of docs/references.md#order-statistics)."""
    import math
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures" / "runs-022c5c5" / "bench" / "summary.json"
    summary = json.loads(fixture.read_text())
    summary.update(world_size=2, num_batches_per_iter=4, iterations_per_rank=[[4 / 0.9, 4 / 1.1], [4 / 1.1, 4 / 0.9]])
    run = tmp_path / "runs" / "bench-two"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary))
    out = dlscale_here("predict", "--from-reference", "rate=1000,devices=1,batch=100", "--intra-gbps", "1000",
                       "--inter-gbps", "100", "--gpus-per-node", "8", "--gpus", "1,2,3", "--stragglers-from", str(run),
                       "--json", "p.json", "--no-run-dir", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"stragglers: per-rank step spread of {run}: 20.0%" in out.stdout
    points = {p["devices"]: p for p in json.loads((tmp_path / "p.json").read_text())["points"]}
    assert points[1]["stragglers_ms"] == 0
    assert points[2]["stragglers_ms"] == pytest.approx(0.2 * 100 / math.sqrt(math.pi), rel=1e-4)
    assert points[3]["stragglers_ms"] == pytest.approx(0.2 * 100 * 3 / (2 * math.sqrt(math.pi)), rel=1e-4)
    row = next(line for line in out.stdout.splitlines() if line.split()[:1] == ["3"])
    assert f"{0.2 * 100 * 3 / (2 * math.sqrt(math.pi)):.2f}" in row.split()  # the term in the table's column
