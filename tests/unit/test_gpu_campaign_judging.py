"""How the GPU campaign judges its figures (benchmarks/gpu_campaign/report.py, parts.py, alternate.py), against
campaign records made by hand and against the records of real runs in docs/results/: the throughput goal is the
compiled default's own figure, a lever helps when it beats the default by 1% or more in most rounds, windows pair
by the round they were timed in, the combined stage tests a batch against the default's own batch, and --compare
refuses another machine's run."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu  # noqa: E402
from gpu_campaign import alternate, parts, readers, report, runner  # noqa: E402
from gpu_campaign import plan as P  # noqa: E402

RESULTS = ROOT / "docs" / "results"


def _stage(name: str, records: list[dict], ratios: list[tuple[str, str]], variants=()) -> dict:
    """A stage's result as the runner writes it into gpu.json: its records, their medians and ratios."""
    names = dict.fromkeys(r["name"] for r in records if not r.get("variant_of"))
    stage = P.Stage(name, name, 100.0, [P.Run(n, [], "bench", 1.0) for n in names], ratios=ratios,
                    variants=list(variants))
    return {"name": name, "title": name, "note": "", "budget_s": 100.0, "estimate_s": 50.0, "setup": [],
            "runs": records, **runner.summarize(stage, records)}


def _bench(name: str, rates: list[float], batch: int = 512) -> list[dict]:
    return [{"name": name, "round": k, "status": "ok", "value": rate, "unit": "img/s",
             "details": {"batch_size": batch}} for k, rate in enumerate(rates)]


def _alternated(name: str, variants: dict[str, tuple[list[str], dict[int, float]]]) -> list[dict]:
    """alternate.py's JSON for these variants ({name: (flags, {round: img/s})}), turned into the stage's records
    as run_stage does."""
    figures = {"variants": {v: {"flags": flags, "command": "dlscale bench " + " ".join(flags), "error": None,
                                "windows_img_per_s": list(windows.values()), "window_rounds": list(windows)}
                            for v, (flags, windows) in variants.items()}}
    return runner.windows({"name": name, "details": figures})


# ------------------------------------------------------------------------------- the throughput goal

def test_the_throughput_goal_is_the_compiled_defaults_even_where_an_eager_peer_is_faster():
    """A hand-made campaign in which the eager peers, a lever and the DDP wrapper all beat the compiled default:
    the goal is judged on the default's own figure (5,950 < 6,000: not met), never on the fastest of them."""
    stages = {
        "baseline": _stage("baseline", _bench("compiled default", [5950.0]), []),
        "peers": _stage("peers", _bench("dlscale bench", [6400.0, 6420.0], 256) + _bench("bare loop", [6390.0, 6410.0])
                        + _bench("timm benchmark.py", [6100.0, 6110.0], 256)
                        + _bench("dlscale bench default", [5940.0, 5946.0])
                        + _bench("timm benchmark.py compiled", [6020.0, 6030.0]),
                        [("dlscale bench", "bare loop"), ("dlscale bench", "timm benchmark.py"),
                         ("dlscale bench default", "timm benchmark.py compiled")]),
        "levers_a": _stage("levers_a", _alternated("levers-a", {
            "default 512": (["--batch-size", "512"], {0: 5960.0, 1: 5962.0}),
            "batch 768": (["--batch-size", "768"], {0: 6300.0, 1: 6310.0})}), [("batch 768", "default 512")],
            variants=["default 512", "batch 768"]),
        "ddp": _stage("ddp", _alternated("ddp", {"default 256": (["--batch-size", "256"], {0: 5700.0}),
                                                 "DDP": (["--wrap-single-rank"], {0: 7300.0})}),
                      [("DDP", "default 256")], variants=["default 256", "DDP"]),
    }
    rows = {g["goal"]: g for g in report.goals(stages, "cuda", "NVIDIA H100 80GB HBM3")}
    throughput = rows["throughput"]
    assert (throughput["value"], throughput["source"]) == (5950.0, "baseline / compiled default")
    assert throughput["met"] is False and throughput["goal_met"] is False
    # without the baseline, the peers stage's run of the same command: its median of 5,940 and 5,946
    del stages["baseline"]
    source, value = report.compiled_default(stages)
    assert (source, value) == ("peers / dlscale bench default", 5943.0)
    # compiled against compiled at one batch: timm's 6,025 beats the default's 5,943, so that goal fails too,
    # while the eager ratio (6,410 / 6,105) passes its own floor; each is shown beside the other
    assert rows["vs_timm_compiled"]["value"] == pytest.approx(5943.0 / 6025.0)
    assert rows["vs_timm_compiled"]["met"] is False and rows["vs_timm_eager"]["met"] is True
    assert rows["vs_timm_eager"]["value"] == pytest.approx(6410.0 / 6105.0)


def test_the_recorded_runs_judge_their_own_default():
    """Re-judged from their records, the H100 runs' throughput is the baseline's `dlscale bench` (5,953.1 img/s
    in the third run, 0.8% under the floor), where the old rule took the levers' batch 768 windows (5,985.9)."""
    document = json.loads((RESULTS / "gpu-2026-11-27-h100-run3-part1.json").read_text())
    later = json.loads((RESULTS / "gpu-2026-11-27-h100-run3-part2.json").read_text())
    stages = {**later["stages"], **document["stages"]}
    throughput = report.goals(stages, "cuda", "NVIDIA H100 80GB HBM3")[0]
    assert throughput["source"] == "baseline / compiled default" and round(throughput["value"], 1) == 5953.1
    assert throughput["met"] is False
    assert max(m["median"] for m in stages["levers_a"]["medians"].values()) > 5980.0  # what a maximum would take


def test_timm_compiled_runs_at_the_batch_the_default_ran(tmp_path):
    """The peers stage runs timm's --torchcompile after the GPU default in each round, at the batch the default's
    own summary names (512 until a run says otherwise)."""
    f = P.Features(device="cuda", timm=True, timm_script=".peers/timm_benchmark.py", timm_script_found=True,
                   torchvision=True, cores=16)
    stage = parts.build_plan(f, {"peers": None})[1]
    runs = {r.name: r for r in stage.runs}
    assert list(runs) == ["dlscale bench", "bare loop", "timm benchmark.py", "dlscale bench default",
                          "timm benchmark.py compiled"]
    compiled, eager = runs["timm benchmark.py compiled"].argv, runs["timm benchmark.py"].argv
    assert compiled[compiled.index("-b") + 1] == "{default_batch}" and "--torchcompile" in compiled
    assert eager[eager.index("-b") + 1] == "256" and "--torchcompile" not in eager
    assert runs["dlscale bench default"].sets == "default_batch" and stage.values == {"default_batch": "512"}
    assert ("dlscale bench default", "timm benchmark.py compiled") in stage.ratios
    summary = tmp_path / "default.json"
    summary.write_text('{"img_per_sec_total_mean": 5000.0, "batch_size": 256}')
    ctx = runner.Context(python=sys.executable, root=ROOT, work=tmp_path, env={}, log=None, deadline=0.0,
                         pythonpath=False, values=dict(stage.values))
    readers.read_bench(runs["dlscale bench default"], "", summary, ctx)  # a GPU under 40 GiB: batch 256
    assert ctx.fill(" ".join(compiled), 0).split(" -b ")[1].startswith("256 ")
    cpu = {r.name: r for r in parts.build_plan(P.Features(device="cpu", timm=True), {"peers": None})[1].runs}
    assert "GPU only" in cpu["timm benchmark.py compiled"].unavailable


# ------------------------------------------------------------------------- the lever rule, the rounds

def test_a_lever_helps_when_it_beats_the_default_by_1pct_in_most_rounds():
    assert report.helps({"per_round": [1.012, 1.011, 1.015]})
    assert report.helps({"per_round": [1.01, 1.01, 0.99]})  # 1% exactly counts; two rounds of three
    # ahead in every round and by 1.2% at the median, but by 1% or more in two rounds of five: no
    assert not report.helps({"ratio": 1.012, "per_round": [1.012, 1.013, 1.002, 1.003, 1.004]})
    assert not report.helps({"per_round": [1.02, 1.02, 0.99, 0.99]})  # half is not most
    assert not report.helps({"per_round": []})
    # the recorded runs: batch 384 against 256 (1% or more in 6 of 8 rounds) helps; cuDNN's limit 0 (1.001x)
    # and batch 768 against 512 (1.002x, under 1% in every round) do not
    run2 = json.loads((RESULTS / "gpu-2026-11-27-h100-run2-part2.json").read_text())["stages"]["levers_a"]
    run3 = json.loads((RESULTS / "gpu-2026-11-27-h100-run3-part2.json").read_text())["stages"]["levers_a"]
    verdicts = {r["numerator"]: report.helps(r) for r in run2["ratios"] + run3["ratios"]}
    assert verdicts == {"batch 384": True, "cudnn limit 0": False, "batch 768": False}
    # gpu.md says it beside each lever's ratio
    table = "\n".join(report.stage_table(run2))
    assert "| ratio | of medians | per round | helps (rounds at 1.01 or more) |" in table
    assert "| batch 384 / default 256 | **1.015** |" in table and table.count("| yes, 6 of 8 |") == 1
    assert "| no, 1 of 8 |" in table  # cuDNN's limit 0: 1.031 in its first round only


def test_windows_pair_by_the_round_they_were_timed_in_where_one_is_missing():
    """The default's window of round 1 is missing and the machine slows down round by round; the lever is 1%
    slower than the default in every round. Paired by index, its windows would meet the default's of the round
    before and seem 8-11% faster in four rounds of five; paired by round it is 0.99 in each."""
    default = {0: 130.0, 2: 110.0, 3: 100.0, 4: 90.0, 5: 80.0}
    lever = {0: 128.7, 1: 118.8, 2: 108.9, 3: 99.0, 4: 89.1, 5: 79.2}
    records = _alternated("levers-a", {"default 512": (["--batch-size", "512"], default),
                                       "batch 768": (["--batch-size", "768"], lever)})
    assert sorted(r["round"] for r in records if r["name"] == "default 512") == [0, 2, 3, 4, 5]
    stage = _stage("levers_a", records, [("batch 768", "default 512")], variants=["default 512", "batch 768"])
    ratio = stage["ratios"][0]
    assert ratio["per_round"] == pytest.approx([0.99] * 5) and not report.helps(ratio)
    by_index = [a / b for a, b in zip(lever.values(), default.values(), strict=False)]
    assert sum(p >= report.HELPS for p in by_index) == 4  # what pairing by index would have concluded
    # alternate.py's own ratios pair the same way
    figures = {name: {"windows_img_per_s": list(w.values()), "window_rounds": list(w),
                      "median_img_per_s": sorted(w.values())[len(w) // 2]}
               for name, w in (("default", default), ("lever", lever))}
    assert alternate.ratios(figures, "default")["lever"]["per_round"] == pytest.approx([0.99] * 5)
    # a record written before rounds were kept pairs by index, as then
    del figures["lever"]["window_rounds"], figures["default"]["window_rounds"]
    assert len(alternate.ratios(figures, "default")["lever"]["per_round"]) == 5


def test_the_combined_stage_adds_only_what_each_lever_changed_and_a_batch_that_beat_the_defaults():
    """Levers measured at batch 256 carry their batch and the stage's common flags in their flags: only what each
    adds to its own baseline is a lever, and a batch that beat 256 is not tried against the default's 512."""
    common = ["--pool-batches", "4"]
    at_256 = _stage("levers_a", _alternated("levers-a", {
        "default 256": ([*common, "--batch-size", "256"], {k: 5740.0 for k in range(4)}),
        "cudnn limit 0": ([*common, "--batch-size", "256", "--cudnn-benchmark-limit", "0"],
                          {k: 5820.0 for k in range(4)}),
        "batch 384": ([*common, "--batch-size", "384"], {k: 5830.0 for k in range(4)})}),
        [("cudnn limit 0", "default 256"), ("batch 384", "default 256")],
        variants=["default 256", "cudnn limit 0", "batch 384"])
    baseline = _stage("baseline", _bench("compiled default", [5976.0]), [])
    assert parts.default_batch({"baseline": baseline}) == 512
    assert parts.helpful_flags({"stages": {"baseline": baseline, "levers_a": at_256}}) == [
        "--cudnn-benchmark-limit", "0"]
    # a batch that beat the default at its own batch joins, with the other levers
    at_512 = _stage("levers_b", _alternated("levers-b", {
        "default 512": ([*common, "--batch-size", "512"], {k: 5976.0 for k in range(4)}),
        "batch 768": ([*common, "--batch-size", "768"], {k: 6100.0 for k in range(4)})}),
        [("batch 768", "default 512")], variants=["default 512", "batch 768"])
    stages = {"baseline": baseline, "levers_a": at_256, "levers_b": at_512}
    assert parts.helpful_flags({"stages": stages}) == ["--cudnn-benchmark-limit", "0", "--batch-size", "768"]
    # on a GPU whose default is 256 the batch 384 lever is against the default's own batch
    small = _stage("baseline", _bench("compiled default", [3000.0], batch=256), [])
    assert parts.helpful_flags({"stages": {"baseline": small, "levers_a": at_256}}) == [
        "--cudnn-benchmark-limit", "0", "--batch-size", "384"]
    f = P.Features(device="cuda", bench_flags=frozenset({"--stem-channels", "--coordinate-descent-tuning",
                                                         "--cudnn-benchmark-limit"}), cores=16)
    stage, flags = parts.combined_for_run(f, {"levers_a": at_256}, {"baseline": baseline})
    argv = stage.runs[0].argv
    assert "default=" in argv and "combined=--cudnn-benchmark-limit 0" in argv  # both at the default's batch
    assert "1% or more in most rounds" in stage.note


# ----------------------------------------------------------------------------------------- --compare

def _environment(uuid: str, name: str = "NVIDIA H100 80GB HBM3") -> dict:
    return {"device_name": name, "device_uuid": uuid, "driver": "580.159.04", "cpu_model": "Intel(R) Xeon(R)",
            "available_cores": 16}


def test_compare_is_refused_across_machines_and_marked_across_runs():
    stages = {"baseline": _stage("baseline", _bench("compiled default", [5976.0]), [])}
    now = {"device": "cuda", "environment": _environment("794c4a7e"), "stages": stages,
           "goals": report.goals(stages, "cuda")}
    then_stages = {"baseline": _stage("baseline", _bench("compiled default", [5953.0]), [])}
    then = {"device": "cuda", "environment": _environment("794c4a7e"), "stages": then_stages, "started": "then",
            "goals": report.goals(then_stages, "cuda")}
    text = "\n".join(report.comparison(now, then, "part1.json"))
    assert "across two runs" in text and "| figure | then | now | now / then (across runs) |" in text
    assert "| baseline / compiled default | 5,953.000 | 5,976.000 | 1.004 |" in text
    other = {**then, "environment": _environment("GPU-bf35eb79")}
    refused = "\n".join(report.comparison(now, other, "run4.json"))
    assert "Not compared: the two runs are of different machines (GPU 794c4a7e against bf35eb79)" in refused
    assert "| baseline" not in refused
    h200 = {**then, "environment": {"device_name": "NVIDIA H200"}}
    assert "device NVIDIA H100 80GB HBM3 against NVIDIA H200" in "\n".join(report.comparison(now, h200, "h200"))
    assert report.other_machine({"device_uuid": "GPU-794c4a7e"}, {"device_uuid": "794c4a7e"}) is None


def test_compare_with_another_machines_run_is_refused_before_the_work(tmp_path, monkeypatch, capsys):
    here = {"device_uuid": "GPU-794c4a7e", "device_name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04"}
    monkeypatch.setattr(gpu, "this_gpu", lambda: here)
    ran = []
    monkeypatch.setattr(gpu, "run", lambda *args: ran.append(args) or 0)
    out = tmp_path / "out"
    record = str(RESULTS / "gpu-2026-11-27-h100-run4-part1.json")  # GPU bf35eb79...
    with pytest.raises(SystemExit) as stopped:
        gpu.main(["--device", "cuda", "--out", str(out), "--compare", record])
    assert stopped.value.code == 2 and not ran and not out.exists()
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert "that run is of another machine (GPU 794c4a7e against bf35eb79-" in said
    assert said.endswith("a ratio across machines is refused: compare runs of this machine")
    same = str(RESULTS / "gpu-2026-11-27-h100-run3-part1.json")  # GPU 794c4a7e...: this one
    here = {"device_uuid": "GPU-794c4a7e-7c84-be39-be29-341e118b72c8"}
    monkeypatch.setattr(gpu, "this_gpu", lambda: here)
    assert gpu.main(["--device", "cuda", "--out", str(out), "--compare", same]) == 0 and len(ran) == 1
    assert ran[0][1].compared[0] == Path(same)


# ------------------------------------------------------------------------------------------ the help

def test_the_help_lists_each_parts_stages_in_their_order():
    """benchmarks/gpu.py's docstring, which --help prints, names each part's stages as parts.PARTS runs them."""
    doc = gpu.__doc__
    lines = doc.splitlines()
    for part, names in parts.PARTS.items():
        start = next(i for i, line in enumerate(lines) if line.startswith(f"Part {part}, in order"))
        block = lines[start + 1:]
        end = next(i for i, line in enumerate(block) if not line.startswith(" "))
        listed = [line.split()[0] for line in block[:end] if line[2] != " "]
        assert listed == names, (part, listed)
    assert "--torchcompile" in doc and "1% or more in most rounds" in doc
