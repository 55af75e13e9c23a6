"""`dlscale report` on directories made here by `dlscale scale -- train` and `dlscale bench`."""

import csv
import json
import re
import struct
import subprocess

import pytest
from commands import DLSCALE, HANG_S, dlscale_here, start_process

from dlscale.cli import main
from dlscale.metrics.host_load import run_disturbance
from dlscale.report import PLOTS
from dlscale.rundir import read_run
from dlscale.strategies import STRATEGIES

TINY = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4", "--num-classes", "10",
        "--num-warmup-batches", "2", "--num-batches-per-iter", "2", "--num-iters", "3"]
TRAIN = ["--config", "cpu:digits", "--set", "schedule.epochs=2", "--set", "max_steps_per_epoch=5",
         "--set", "batch_size=16", "--set", "model.width=8", "--pg-timeout", "60"]
OTHER_STRATEGY = "neighbor_allreduce" if "neighbor_allreduce" in STRATEGIES else next(
    (s for s in sorted(STRATEGIES) if s != "allreduce"), None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A weak-scaling train sweep over 1 and 2 ranks, and one-process benchmarks side by side."""
    root = tmp_path_factory.mktemp("report")
    sweep = start_process([*DLSCALE, "scale", "--nproc", "1,2", "--output-dir", "runs", "--name", "train-sweep",
                           "--", "train", *TRAIN], root, stderr=subprocess.STDOUT)
    benches = [("bench-fp32", ["--precision", "fp32"]), ("bench-amp_bf16", ["--precision", "amp_bf16"])]
    if OTHER_STRATEGY:
        benches.append((f"bench-{OTHER_STRATEGY}", ["--dist-optimizer", OTHER_STRATEGY]))
    try:
        for name, extra in benches:
            out = dlscale_here("bench", *TINY, *extra, "--output-dir", "runs", "--name", name, cwd=root)
            assert out.returncode == 0, out.stderr[-3000:]
        log, _ = sweep.communicate(timeout=HANG_S)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 0, log[-4000:]
    return root


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


def _report(root, *args):
    return dlscale_here("report", *args, cwd=root)


@pytest.mark.distributed
def test_report_writes_every_plot_and_table(runs):
    out = _report(runs, "runs", "--reference", "all", "-o", "rep", "--explain-reference", "ngc:v100_16gb_amp")
    assert out.returncode == 0, out.stderr[-3000:]
    rep = runs / "rep"
    # loader_workers.png needs a `dlscale loader` run: tests/smoke/test_cli_loader.py draws it.
    expected = set(PLOTS) - {"loader_workers.png"} - (set() if OTHER_STRATEGY else {"dist_optimizers.png"})
    for name in expected:  # NAME.png, or NAME-<group>.png per sweep and device kind
        stem = name.removesuffix(".png")
        files = [rep / name] if (rep / name).exists() else sorted(rep.glob(f"{stem}-*.png"))
        assert files, name
        for file in files:
            assert _png_size(file) == (800, 500), file
            assert file.stat().st_size > 10_000, file
    if not OTHER_STRATEGY:  # only allreduce exists: said so, not drawn empty
        assert "not drawn: dist_optimizers.png" in out.stdout
    for name in ("report", "runs", "scaling", "speedup", "accuracy", "progression", "dist_optimizers",
                 "references", "epochs"):
        assert (rep / (name + (".md" if name == "report" else ".csv"))).stat().st_size > 0, name

    # Every number report.md prints for a run is the one in that run's summary.json.
    text = (rep / "report.md").read_text()
    for summary_path in (runs / "runs").glob("**/summary.json"):
        summary = json.loads(summary_path.read_text())
        name = summary_path.parent.name
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        total = summary.get("img_per_sec_total_mean", summary.get("total_ips"))
        # marked (?) exactly where the run's own record shows its rate is not the model's speed (a busy host)
        marked = run_disturbance(read_run(summary_path.parent)) is not None
        assert cells[7].endswith(" (?)") == marked, (name, cells[7])
        assert float(cells[7].removesuffix(" (?)")) == pytest.approx(total, abs=0.051), name
        assert int(cells[5]) == summary["world_size"] and int(cells[6]) == summary["global_batch_size"]
        if summary["kind"] == "train":
            assert float(cells[8]) == pytest.approx(summary["final_top1_pct"], abs=0.0051)
            assert float(cells[9]) == pytest.approx(summary["train_time_s"], abs=0.0051)

    # The train sweep is weak scaling: 16 images per rank, global batch 16 and 32.
    rows = list(csv.DictReader((rep / "accuracy.csv").open()))
    assert sorted(int(r["global_batch"]) for r in rows) == [16, 32]
    scaling = [r for r in csv.DictReader((rep / "scaling.csv").open()) if "train-sweep" in r["run_dir"]]
    t1, t2 = (float(r["total_img_per_s"]) for r in sorted(scaling, key=lambda r: int(r["world_size"])))
    assert float(scaling[-1]["efficiency"]) == pytest.approx((t2 / 2) / t1)
    assert re.search(r"### hal: HAL cluster", text) and "4071.31" in (rep / "references.csv").read_text()
    _assert_explained(runs, text)


def _assert_explained(runs, text):
    """The CPU fp32 bench against NVIDIA's AMP figure on a V100 16GB: the gap is NVIDIA's per-device rate
    over the run's, no precision is advised on a CPU, the device is named, and every finding `dlscale
    explain` makes is listed with its effect and change."""
    from dlscale.explain.build import explain_run
    from dlscale.report.references import load_reference
    from dlscale.rundir import read_run

    published = load_reference("ngc").get("v100_16gb_amp").point(devices=1)
    section = text.split("## Why below the reference")[1].split("\n## ")[0]
    block = section.split("- `bench-fp32`: ")[1].split("\n- `")[0].splitlines()
    summary = json.loads((runs / "runs" / "bench-fp32" / "summary.json").read_text())
    gap = published["img_per_s"] / summary["img_per_sec_total_mean"]
    assert block[0].startswith(f"against ngc:v100_16gb_amp ({published['img_per_s']:.1f} img/s per device): "
                               f"gap {gap:.2f}x"), block[0]
    # on a CPU no precision is advised (AMP runs there at a fraction of fp32 unless a run shows otherwise:
    # explain's advice, issue of right advice); the device is named, every finding listed with its change
    numbered = [line for line in block if re.match(r"  \d+\. ", line)]
    assert not any("[recipe] precision" in line for line in numbered), numbered
    device = f"[device] another device: {summary['device_name']}, the reference V100 16GB: effect unknown"
    assert any(re.fullmatch(r"  \d+\. " + re.escape(device), line) for line in block), block
    explanation = explain_run(read_run(runs / "runs" / "bench-fp32"), "ngc:v100_16gb_amp")
    assert len(numbered) == len(explanation.findings) > 3  # every finding, not the top three
    for finding in explanation.findings:
        assert f"     - change: {finding.change}" in block


@pytest.mark.parametrize("args,message", [
    (["no-such-run"], "no-such-run: no such directory; give run or sweep directories"),
    (["."], "holds no summary.json or sweep.json"),
    ([".", "--reference", "hall"], "unknown --reference 'hall'; choose from bluefog, dlperf, hal"),
    ([".", "--top1-tolerance", "-1"], "argument --top1-tolerance: '-1': give a number from 0 to 100"),
])
def test_bad_report_input_is_one_line(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
