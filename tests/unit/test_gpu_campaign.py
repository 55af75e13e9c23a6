"""The GPU campaign's plan, readers, failure handling and report, without a GPU (benchmarks/gpu.py).
The tiny CPU rehearsal of the whole command is in tests/smoke/test_gpu_rehearsal.py."""

import dataclasses
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_campaign import plan as P  # noqa: E402
from gpu_campaign import report, runner  # noqa: E402

EVERYTHING = P.Features(device="cuda", bench_flags=frozenset({"--compile-mode", "--cuda-graphs",
                                                              "--no-fused-optimizer"}),
                        torchvision=True, timm=True, timm_script_found=True, xdist=True, cores=16)


def test_dry_run_prints_every_stage_and_command_and_runs_nothing(tmp_path):
    out = subprocess.run([sys.executable, "benchmarks/gpu.py", "--dry-run", "--device", "cuda", "--cores", "16"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for stage in P.STAGES:
        assert (f"\nstage {stage}: " in text) == (stage not in P.OPTIONAL), stage
    for step in ("fp32", "tf32", "amp_fp16", "amp_bf16", "channels_last", "fused_sgd", "compile_reduce_overhead",
                 "compile_max_autotune", "cuda_graphs"):
        assert f"  run {step} [" in text, step
    for command in ("benchmarks/gpu_campaign/environment.py", "-m pytest -m gpu",
                    "-m dlscale bench --model resnet50 --image-size 224 --batch-size 256", "benchmarks/bare_loop.py",
                    "benchmarks/peers/timm_benchmark.py --bench train --model resnet50", "--amp-dtype bfloat16",
                    "benchmarks/gpu_campaign/jpeg_tree.py", "-m dlscale loader",
                    "--workers 8,12,15 --batch-size 256 --batches 120",
                    "-m dlscale train --config imagenet:default", "--compile-mode reduce-overhead",
                    "--compile-mode max-autotune", "--cuda-graphs"):
        assert command in text, command
    assert "estimated total" in text and "With these estimates:" in text
    assert "run cuda_graphs [~" in text  # available: this checkout's dlscale bench has --cuda-graphs
    assert not any(tmp_path.iterdir()) and "Traceback" not in out.stderr


def test_a_machine_with_everything_runs_every_entry():
    stages = {s.name: s for s in P.build_plan(EVERYTHING)}
    assert list(stages) == [name for name in P.STAGES if name not in P.OPTIONAL]
    stages.update({s.name: s for s in P.build_plan(EVERYTHING, {name: None for name in P.OPTIONAL})})
    assert all(r.unavailable is None for s in stages.values() for r in s.runs + s.setup)
    progression = {r.name: r for r in stages["progression"].runs}
    for name in ("fp32", "tf32", "amp_fp16", "amp_bf16", "channels_last"):
        assert "--no-fused-optimizer" in progression[name].argv, name
    assert progression["fused_sgd"].reuse == "peers/dlscale bench"
    peers = stages["peers"].runs[0].argv
    assert peers[peers.index("bench") + 1:peers.index("--json")] == progression["fused_sgd"].argv[3:-4]
    assert "-n" in stages["pytest"].runs[0].argv  # pytest-xdist spreads the tier over 4 workers


def test_a_bare_machine_marks_what_it_cannot_run():
    bare = P.Features(device="cuda", cores=16)
    stages = {s.name: s for s in P.build_plan(bare)}
    why = {r.name: r.unavailable for s in stages.values() for r in s.runs}
    assert "torchvision" in why["bare loop"] and "timm" in why["timm benchmark.py"]
    assert "--compile-mode" in why["compile_max_autotune"] and "--cuda-graphs" in why["cuda_graphs"]
    assert why["fp32"] is None and why["train JPEG"] is None


def test_the_choices_stage_pairs_every_setting_with_the_bf16_eager_run():
    stages = P.build_plan(EVERYTHING, {"choices": None, "peers": None})
    assert [s.name for s in stages] == ["env", "peers", "choices"]  # after the peers, whose default it reuses
    choices = stages[2]
    names = [r.name for r in choices.runs]
    assert names == ["bf16", "fp16", "bf16 graphs", "fp16 graphs", "bf16 b384", "bf16 b512", "fp16 b512",
                     "fp16 compile", "bf16 compile"]
    assert choices.ratios == [(name, "bf16") for name in names[1:]]
    by_name = {r.name: r for r in choices.runs}
    runs = {r.name: r.argv for r in choices.runs}
    flag = lambda name, option: runs[name][runs[name].index(option) + 1]  # noqa: E731
    assert flag("fp16 b512", "--batch-size") == "512" and flag("bf16 b384", "--batch-size") == "384"
    assert flag("fp16 graphs", "--precision") == "amp_fp16" and "--cuda-graphs" in runs["fp16 graphs"]
    assert "--cuda-graphs" not in runs["fp16"] and flag("bf16", "--precision") == "amp_bf16"
    for name in names:  # every run: NHWC, fused SGD, cuDNN autotuning, batch 256 unless named
        assert {"--channels-last", "--fused-optimizer", "--cudnn-benchmark"} <= set(runs[name]), name
        assert flag(name, "--batch-size") == (name.split(" b")[1] if " b" in name else "256"), name
    # The compile runs: reduce-overhead, 5 more warm-up steps (10 + 5) for the CUDA-graph recordings,
    # the measured compile time on top of the eager run's estimate
    for name in ("fp16 compile", "bf16 compile"):
        assert flag(name, "--compile-mode") == "reduce-overhead" and flag(name, "--num-warmup-batches") == "15"
        eager = name.replace(" compile", "")
        assert by_name[name].estimate_s == pytest.approx(by_name[eager].estimate_s + P.COMPILE_S["reduce-overhead"])
    assert all(flag(name, "--num-warmup-batches") == "10" for name in names if "compile" not in name)
    assert all("--compile-mode" not in runs[name] for name in names if "compile" not in name)
    # bf16 compile is the GPU default, measured once by the peers stage
    assert by_name["bf16 compile"].reuse == "peers/dlscale bench default"
    assert "dlscale bench default" in [r.name for r in stages[1].runs]
    assert all(by_name[name].reuse is None for name in names if name != "bf16 compile")
    assert choices.estimate_s() == pytest.approx(2 * sum(by_name[name].estimate_s for name in names[:-1]))  # 2 rounds
    # A dlscale bench without --compile-mode cannot run either compile choice, nor reuse the default
    older = dataclasses.replace(EVERYTHING, bench_flags=frozenset({"--cuda-graphs"}))
    why = {r.name: (r.unavailable, r.reuse) for r in P.build_plan(older, {"choices": None})[1].runs}
    assert why["bf16 compile"] == why["fp16 compile"] == ("this dlscale bench has no --compile-mode yet", None)
    assert why["bf16 graphs"] == (None, None)


def test_stages_and_runs_can_be_chosen_and_rounds_capped():
    stages = P.build_plan(EVERYTHING, {"peers": {"dlscale_bench"}, "progression": {"compile_max_autotune"}}, rounds=1)
    assert [s.name for s in stages] == ["env", "peers", "progression"]  # env always
    assert [r.name for r in stages[1].runs] == ["dlscale bench"] and stages[1].rounds == 1
    assert [r.name for r in stages[2].runs] == ["compile_max_autotune"]
    with pytest.raises(ValueError, match="no run nope"):
        P.build_plan(EVERYTHING, {"progression": {"nope"}})


def test_the_schedule_keeps_the_deadline_with_pessimistic_estimates():
    """With every estimate at its slow end, extra rounds and the longest compile are what give way."""
    predicted = P.simulate(P.build_plan(EVERYTHING), 450.0)
    assert predicted[-1].startswith("progression ends at")
    assert float(predicted[-1].split("~")[1].split(" ")[0]) <= 450.0
    assert "pytest ends at ~108 s" in predicted  # the tier is not cut


# ----------------------------------------------------------------------------- running commands

def _context(tmp_path, deadline_s=60.0):
    return runner.Context(python=sys.executable, root=ROOT, work=tmp_path, env={"PATH": "/usr/bin:/bin"},
                          log=io.StringIO(), deadline=time.monotonic() + deadline_s, pythonpath=False,
                          say=lambda line: None)


def test_a_failed_and_a_timed_out_command_are_recorded_and_the_stage_goes_on(tmp_path):
    fails = P.Run("fails", ["-c", "print('about to fail'); raise SystemExit(3)"], "none", 1.0)
    sleeps = P.Run("sleeps", ["-c", "import time; time.sleep(60)"], "none", 1.0)
    works = P.Run("works", ["-c", "print('{work} round {round}')"], "none", 1.0)
    stage = P.Stage("demo", "demo", budget_s=4.0, runs=[fails, sleeps, works])
    ctx = _context(tmp_path)
    started = time.monotonic()
    result = runner.run_stage(stage, ctx)
    assert time.monotonic() - started < 30
    by_name = {r["name"]: r for r in result["runs"]}
    assert by_name["fails"]["status"] == "failed" and by_name["fails"]["returncode"] == 3
    assert "about to fail" in by_name["fails"]["error"]
    assert by_name["sleeps"]["status"] == "timeout" and "deadline" in by_name["sleeps"]["error"]
    assert by_name["works"]["status"] in ("ok", "not_run")  # what is left of the 4 s after the sleeper
    assert "### demo / fails / round 0: failed" in ctx.log.getvalue()


def test_a_run_that_does_not_fit_is_not_started_and_says_how_to_run_it(tmp_path):
    ctx = _context(tmp_path, deadline_s=5.0)
    record = runner.execute(P.Run("compile_max_autotune", ["-c", "pass"], "none", 240.0), ctx, "progression", 0,
                            ctx.deadline)
    assert record["status"] == "not_run" and "--stages progression:compile_max_autotune" in record["error"]


def test_rounds_alternate_and_ratios_pair_each_round(tmp_path):
    a = P.Run("a", ["-c", "print('--result'); print('{\"train_samples_per_sec\": 200.0}')"], "timm", 1.0)
    b = P.Run("b", ["-c", "print('--result'); print('{\"train_samples_per_sec\": 100.0}')"], "timm", 1.0)
    stage = P.Stage("pair", "pair", budget_s=60.0, runs=[a, b], rounds=2, ratios=[("a", "b")])
    result = runner.run_stage(stage, _context(tmp_path))
    assert [(r["name"], r["round"]) for r in result["runs"]] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert result["ratios"] == [{"numerator": "a", "denominator": "b", "ratio": 2.0, "per_round": [2.0, 2.0]}]


# ------------------------------------------------------------------------------------ readers

def test_train_reader_keeps_the_steady_windows(tmp_path):
    # 1,000 images per window; epoch 1's windows after its first: 4,000, 2,000 (starved) and 4,000 img/s
    records = [{"record": "train", "epoch": e, "iteration": i, "throughput_img_per_s": rate, "data_time_ms": 1.0,
                "step_time_ms": 50.0, "window_s": 1000 / rate}
               for e, i, rate in [(0, 5, 10.0), (0, 10, 900.0), (1, 5, 20.0), (1, 10, 4000.0), (1, 15, 2000.0),
                                  (1, 20, 4000.0)]]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"total_ips": 500.0}))
    out = "epoch 1 ...\nWARNING: training is input-bound: 40% of each step ...\n"
    got = runner.read_train(None, out, tmp_path, _context(tmp_path))
    # 3,000 images in 0.25 + 0.5 + 0.25 s, not the median window (4,000)
    assert got["value"] == pytest.approx(3000.0) and got["details"]["windows"] == 3
    assert got["details"]["input_bound_warnings"] == ["WARNING: training is input-bound: 40% of each step ..."]


def test_pytest_reader_counts_outcomes(tmp_path):
    (tmp_path / "junit.xml").write_text(
        '<testsuites><testsuite><testcase classname="t" name="ok" time="1.5"/>'
        '<testcase classname="t" name="bad" time="2"><failure message="assert 1 == 2">trace</failure></testcase>'
        '<testcase classname="t" name="skip" time="0"><skipped message="needs a CUDA device"/></testcase>'
        '</testsuite></testsuites>')
    got = runner.read_pytest(None, "", tmp_path / "junit.xml", _context(tmp_path))
    assert got["value"] == 1 and (got["details"]["failed"], got["details"]["skipped"]) == (1, 1)
    failed = {"test": "t::bad", "outcome": "failed", "seconds": 2.0, "message": "assert 1 == 2"}
    assert failed in got["details"]["tests"]


def test_loader_reader_picks_the_fastest_worker_count_for_training(tmp_path):
    rows = [{"workers": w, "images_per_s": r, "cpu_cores_busy": 1.0, "images_per_cpu_s": r / w, "speedup": 1.0}
            for w, r in ((4, 2400.0), (8, 4700.0), (15, 4600.0))]
    (tmp_path / "summary.json").write_text(json.dumps({"settings": rows}))
    ctx = _context(tmp_path)
    got = runner.read_loader(None, "", tmp_path / "summary.json", ctx)
    assert got["value"] == 4700.0 and ctx.values["workers"] == "8"
    assert ctx.fill("data.num_workers={workers} {work}/x-{round}", 2) == f"data.num_workers=8 {tmp_path}/x-2"


# ------------------------------------------------------------------------------------- report

def _results():
    def stage(name, medians, ratios, **extra):
        return {"name": name, "title": name, "note": "", "budget_s": 100.0, "estimate_s": 50.0, "seconds": 40.0,
                "setup": [], "runs": [], "medians": {k: {"values": [v], "median": v, "unit": "img/s",
                                                         "status": "ok", "settings": ""} for k, v in medians.items()},
                "ratios": ratios, **extra}
    ratio = lambda a, b, v: {"numerator": a, "denominator": b, "ratio": v, "per_round": [v]}  # noqa: E731
    loader = {"name": "dlscale loader", "status": "ok", "details": {"rows": [
        {"workers": 15, "images_per_s": 9000.0, "cpu_cores_busy": 14.0, "images_per_cpu_s": 640.0}]}}
    warning = "WARNING: training is input-bound: 20% of each step waits for data"
    return {
        "peers": stage("peers", {"dlscale bench": 5600.0, "bare loop": 5650.0, "timm benchmark.py": 4800.0,
                                 "dlscale bench default": 6240.0},
                       [ratio("dlscale bench", "bare loop", 0.991),
                        ratio("dlscale bench", "timm benchmark.py", 5600.0 / 4800.0),
                        ratio("dlscale bench default", "timm benchmark.py", 6240.0 / 4800.0)]),
        "data": stage("data", {"train JPEG": 4400.0, "train synthetic": 5500.0},
                      [ratio("train JPEG", "train synthetic", 0.8)], setup=[loader],
                      runs=[{"name": "train JPEG", "status": "ok", "details": {"input_bound_warnings": [warning]}}]),
        "progression": stage("progression", {"fp32": 1200.0, "fused_sgd": 5600.0, "compile_reduce_overhead": 6300.0},
                             [ratio("fused_sgd", "fp32", 4.667)]),
    }


def test_goals_are_judged_on_a_gpu_and_say_why_real_data_falls_short():
    rows = {g["goal"]: g for g in report.goals(_results(), "cuda")}
    assert rows["throughput"]["value"] == 6300.0 and rows["throughput"]["met"] and rows["throughput"]["goal_met"]
    assert rows["vs_bare"]["met"]
    # vs_timm is the GPU default (compiled) against timm: 6,240 / 4,800 = 1.3 >= 1.10; the eager ratio with
    # the same settings (5,600 / 4,800 = 1.167) is only shown
    assert rows["vs_timm"]["value"] == pytest.approx(6240.0 / 4800.0) and rows["vs_timm"]["met"] is True
    assert rows["vs_timm_eager"]["value"] == pytest.approx(5600.0 / 4800.0)
    assert (rows["vs_timm_eager"]["floor"], rows["vs_timm_eager"]["met"], rows["vs_timm_eager"]["goal_met"]) == (
        None, None, None)
    assert list(rows) == ["throughput", "vs_bare", "vs_timm", "vs_timm_eager", "real_data"]
    slow = _results()
    slow["peers"]["ratios"][2]["ratio"] = 5040.0 / 4800.0  # a default at 5,040 img/s: 1.05 < 1.10
    judged = {g["goal"]: g for g in report.goals(slow, "cuda")}
    assert judged["vs_timm"]["met"] is False and judged["vs_timm_eager"]["met"] is None
    del slow["peers"]["ratios"][2]  # the default did not run (a CPU rehearsal): no value, nothing judged
    judged = {g["goal"]: g for g in report.goals(slow, "cuda")}
    assert judged["vs_timm"]["value"] is None and judged["vs_timm"]["met"] is None
    assert rows["real_data"]["met"] is False and rows["real_data"]["input_bound_warnings"]
    assert rows["real_data"]["cores_needed"]["cores"] == pytest.approx(5500.0 / 640.0)
    assert all(g["met"] is None for g in report.goals(_results(), "cpu"))  # tiny CPU runs prove nothing
    # The choices stage counts at the goal's batch (256), not at 512
    results = _results() | {"choices": {"medians": {"fp16": {"median": 6400.0}, "fp16 b512": {"median": 7000.0}}}}
    throughput = report.goals(results, "cuda")[0]
    assert throughput["value"] == 6400.0
    results["peers"]["medians"]["dlscale bench default"] = {"median": 6500.0}  # the compiled GPU default counts
    assert report.goals(results, "cuda")[0]["source"] == "peers / dlscale bench default"
    results["peers"]["medians"]["dlscale bench default"] = {"median": 6100.0}
    throughput = report.goals(results, "cuda")[0]
    assert (throughput["value"], throughput["source"]) == (6400.0, "choices / fp16")


def test_markdown_has_the_goal_table_and_the_progression():
    environment = {"device_name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "cuda_available": True}
    document = {"command": "python3 benchmarks/gpu.py --out x", "device": "cuda", "started": "now", "wall_s": 400.0,
                "budget_s": 450.0, "environment": environment, "stages": _results()}
    document["goals"] = report.goals(document["stages"], "cuda")
    text = report.markdown(document)
    assert "# GPU campaign: NVIDIA H100 80GB HBM3" in text and "driver 580.159.04" in text
    assert "| dlscale bench / bare PyTorch loop | 0.98 | - | 0.991 | yes |" in text
    assert "| dlscale train, JPEG / synthetic | 0.90 | - | 0.800 | **no** |" in text
    assert "| dlscale bench default / timm benchmark.py (train) | 1.10 | - | 1.300 | yes |" in text
    eager = "| dlscale bench / timm benchmark.py (train), both eager with the same settings | - | - | 1.167 | - |"
    assert eager in text
    assert "about 8.6 cores per GPU" in text and "input-bound" in text
    assert "| fused_sgd | - | ok | 5,600.0 | - | 4.67 | - |" in text
    assert "The throughput is that of progression / compile_reduce_overhead." in text


def test_an_earlier_run_is_compared_figure_by_figure():
    now = {"stages": _results(), "goals": report.goals(_results(), "cuda")}
    earlier_stages = _results()
    earlier_stages["peers"]["medians"]["dlscale bench"]["median"] = 5000.0
    earlier = {"stages": earlier_stages, "goals": report.goals(earlier_stages, "cuda"), "started": "then",
               "environment": {"device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"}}
    text = "\n".join(report.comparison(now, earlier, "docs/results/gpu-h100.json"))
    assert "## Against docs/results/gpu-h100.json" in text
    assert "| peers / dlscale bench | 5,000.000 | 5,600.000 | 1.120 |" in text
