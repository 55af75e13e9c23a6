"""`python benchmarks/gpu.py --device cpu`: the campaign's tiny CPU rehearsal, run as a user runs it
(a subprocess); its gpu.json and gpu.md are complete and consistent, with ratios, and it leaves
no more than the three files it promises (the GPU machine hands back at most 8)."""

import importlib.util
import json
import sys
from pathlib import Path

from commands import run_process

ROOT = Path(__file__).resolve().parents[2]


def report_goals() -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_campaign.report import GOALS

    return GOALS


def helpful_flags(document: dict) -> list[str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_campaign.parts import helpful_flags as flags

    return flags(document)


def _campaign(out: Path, *args: str) -> dict:
    done = run_process([sys.executable, "benchmarks/gpu.py", "--device", "cpu", "--out", out, *args], ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["gpu.json", "gpu.log", "gpu.md"]
    document = json.loads((out / "gpu.json").read_text())
    assert document["device"] == "cpu" and document["environment"]["torch"]
    assert (out / "gpu.md").read_text() in done.stdout  # the tables end the output
    return document


def test_tests_peers_and_progression(tmp_path):
    document = _campaign(tmp_path, "--stages", "pytest,peers,progression:fp32+channels_last+fused_sgd")
    stages = document["stages"]
    assert list(stages) == ["env", "peers", "pytest", "progression"]

    tier = stages["pytest"]["runs"][0]
    assert tier["status"] == "ok" and tier["details"]["skipped"] > 20 and tier["details"]["failed"] == 0

    peers = {r["name"]: r for r in stages["peers"]["runs"]}
    ours = peers["dlscale bench"]
    assert ours["status"] == "ok" and ours["value"] > 0 and ours["command"].startswith("python3 -m dlscale bench")
    default = peers["dlscale bench default"]  # the GPU default: another model and size on the CPU
    assert default["status"] == "unavailable" and "GPU only" in default["error"]
    assert stages["peers"]["medians"]["dlscale bench default"]["median"] is None
    for name, package in (("bare loop", "torchvision"), ("timm benchmark.py", "timm")):
        if importlib.util.find_spec(package) is None:
            assert peers[name]["status"] == "unavailable" and package in peers[name]["error"]

    progression = stages["progression"]
    medians = {name: m["median"] for name, m in progression["medians"].items()}
    assert medians["fp32"] > 0 and medians["channels_last"] > 0
    assert medians["fused_sgd"] == stages["peers"]["medians"]["dlscale bench"]["median"]  # the same command, reused
    vs_fp32 = {r["numerator"]: r["ratio"] for r in progression["ratios"] if not r.get("chain")}
    assert vs_fp32["channels_last"] == medians["channels_last"] / medians["fp32"]
    chained = {(r["numerator"], r["denominator"]) for r in progression["ratios"] if r.get("chain")}
    assert chained == {("channels_last", "fp32"), ("fused_sgd", "channels_last")}
    goals = {g["goal"]: g for g in document["goals"]}
    assert list(goals) == list(report_goals())
    assert goals["vs_timm_compiled"]["value"] is None  # no default run on the CPU, nor timm's compiled peer
    assert peers["timm benchmark.py compiled"]["status"] == "unavailable"
    assert all(g["met"] is None for g in document["goals"])  # a CPU rehearsal judges nothing

    text = (tmp_path / "gpu.md").read_text()
    assert "## The SC20 progression" in text and "| channels_last |" in text and "x fp32" in text
    assert "## GPU tests" in text and "skipped" in text
    log = (tmp_path / "gpu.log").read_text()
    assert "### peers / dlscale bench / round 0: ok" in log


def test_the_real_data_stage(tmp_path):
    document = _campaign(tmp_path, "--stages", "data", "--rounds", "1")
    data = document["stages"]["data"]
    setup = {r["name"]: r for r in data["setup"]}
    assert setup["JPEG tree"]["status"] == "ok" and setup["dlscale loader"]["status"] == "ok"
    workers = setup["dlscale loader"]["details"]["best_workers"]
    assert [row["workers"] for row in setup["dlscale loader"]["details"]["rows"]] == [0, 2]
    runs = {r["name"]: r for r in data["runs"]}
    assert runs["train JPEG"]["status"] == runs["train synthetic"]["status"] == "ok"
    assert f"data.num_workers={workers}" in runs["train JPEG"]["command"]  # the loader's fastest setting
    ratio = data["ratios"][0]
    assert ratio["ratio"] == runs["train JPEG"]["value"] / runs["train synthetic"]["value"]
    assert "train JPEG / train synthetic" in (tmp_path / "gpu.md").read_text()


def test_part_one(tmp_path):
    """The default plan on the CPU: the baseline is GPU only; the real-data stage probes how the device path's
    decode overlaps eager steps (the Pillow decoder standing in) and trains on JPEGs and on synthetic input."""
    document = _campaign(tmp_path)
    stages = document["stages"]
    assert list(stages) == ["env", "baseline", "decode"] and document["part"] == 1
    assert stages["baseline"]["runs"][0]["status"] == "unavailable"
    decode = stages["decode"]
    runs = {r["name"]: r for r in decode["runs"]}
    assert runs["train synthetic"]["status"] == runs["train JPEG fast"]["status"] == "ok"
    setup = {r["name"]: r for r in decode["setup"]}
    assert setup["loader fast"]["status"] == setup["decode overlap"]["status"] == "ok"
    assert set(setup["decode overlap"]["details"]["steps"]) == {"synthetic", "inline", "thread", "process"}
    text = (tmp_path / "gpu.md").read_text()
    assert "train JPEG fast / train synthetic" in text and "`benchmarks/decode_overlap.py`" in text


def test_the_levers_and_their_combination(tmp_path):
    """The levers run as alternated workers of the tiny model (each variant's windows, ratios against the
    default); the combined stage after them takes the levers that helped in this very run."""
    document = _campaign(tmp_path, "--stages", "levers_a,combined")
    stages = document["stages"]
    levers = stages["levers_a"]
    medians = levers["medians"]
    assert set(medians) == {"default", "stem 4", "batch 16"} and all(m["median"] > 0 for m in medians.values())
    assert len(medians["stem 4"]["values"]) == 3  # a window per round
    stem = next(r for r in levers["ratios"] if r["numerator"] == "stem 4")
    assert stem["ratio"] == medians["stem 4"]["median"] / medians["default"]["median"]
    assert len(stem["per_round"]) == 3
    flags = document["combined_flags"]
    assert flags == helpful_flags({"stages": stages})  # decided from this run's levers, at the stage's start
    combined = stages["combined"]["runs"][0]
    assert (combined["status"] == "unavailable") == (flags == []), combined
    assert "| stem 4 / default |" in (tmp_path / "gpu.md").read_text()
