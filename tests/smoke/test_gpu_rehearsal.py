"""`python benchmarks/gpu.py --device cpu`: the campaign's tiny CPU rehearsal, run as a user runs it
(a subprocess); its gpu.json and gpu.md are complete and consistent, with ratios, and it leaves
no more than the three files it promises (the GPU machine hands back at most 8)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
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


def test_part_one(tmp_path):
    """The loan's command on the CPU: the wheels stage (installing .whl's wheels where the checkout has them, else
    asking this venv's nvImageCodec), then the real-data stage end to end with tiny sizes: `dlscale train` on
    synthetic input and on JPEGs fed four ways, each after its `dlscale loader` run, nvImageCodec's CPU backend
    standing in for the hardware decoder and Pillow for nvJPEG, NVML absent; the floor is GPU only; the tier's
    tests all skip."""
    document = _campaign(tmp_path)
    stages = document["stages"]
    assert list(stages) == ["wheels", "env", "decode", "floor", "pytest"] and document["part"] == 1
    assert document["stopped"] is None
    nvimgcodec = importlib.util.find_spec("nvidia.nvimgcodec") is not None or any((ROOT / ".whl").glob("*.whl"))
    why = stages["wheels"]["runs"][0]["details"]["unavailable"]
    assert why is None if nvimgcodec else "nvImageCodec" in why
    decode = stages["decode"]
    runs = {r["name"]: r for r in decode["runs"]}
    assert list(runs) == ["train synthetic", "loader nvimgcodec", "train JPEG nvimgcodec", "loader threads",
                          "train JPEG threads", "loader nvjpeg shared", "train JPEG nvjpeg shared", "loader processes",
                          "train JPEG processes"]
    for name, run in runs.items():
        if "nvimgcodec" in name and not nvimgcodec:
            assert run["status"] == "unavailable" and run["error"] == why, name
            continue
        assert run["status"] == "ok", (name, run.get("error"))
        assert run["nvjpg"]["unavailable"].startswith("NVML is not available here"), name  # recorded, never a zero
        if name.startswith("loader"):
            best = run["details"]["best"]
            assert best["images_per_s"] > 0 and best["cpu_ms_per_image"] > 0 and best["device_ms_per_image"] > 0
    medians = {name: m["median"] for name, m in decode["medians"].items()}
    for ratio in decode["ratios"]:
        top = medians[ratio["numerator"]]
        assert ratio["ratio"] == (top / medians["train synthetic"] if top else None), ratio
    if nvimgcodec:  # its CPU backend decoded the training crops (the loader says which backend)
        best = runs["loader nvimgcodec"]["details"]["best"]
        assert best["decoder"] == "nvimgcodec" and best["decoded_by_backend"]["cpu_only"] == best["decoded_on_device"]
        assert runs["train JPEG nvimgcodec"]["details"]["decoder"] == "nvimgcodec"
    share = runs["loader nvjpeg shared"]["details"]["share"]  # from the loaders and the synthetic run
    assert f"data.device_decode_share={share:.2f}" in runs["train JPEG nvjpeg shared"]["command"]
    assert runs["train JPEG nvjpeg shared"]["details"]["device_decode_share"] == pytest.approx(share)
    assert runs["train JPEG processes"]["details"]["workers_kind"] == "process"
    floor = stages["floor"]["runs"][0]
    assert floor["status"] == "unavailable" and "GPU only" in floor["error"]
    tier = stages["pytest"]["runs"][0]
    assert tier["status"] == "ok" and tier["details"]["skipped"] > 20 and tier["details"]["failed"] == 0
    text = (tmp_path / "gpu.md").read_text()
    assert "| arrangement | train img/s | of synthetic |" in text and "train JPEG threads / train synthetic" in text
    assert "NVML's JPEG engines (NVJPG) during each command:" in text and "GPU only" in text


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
