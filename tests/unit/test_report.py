"""The report from run directories written here by hand: figures, flags, tables and plots."""

import csv
import json
import re
import struct

import pytest

from dlscale.errors import ConfigError
from dlscale.report import PLOTS, build_report, load_reference
from dlscale.report.load import load
from dlscale.report.references import reference_names
from dlscale.report.scaling import accuracy_rows, build_series, efficiency


def write_run(root, name, **summary):
    path = root / name
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def bench(root, name, world, total, ci=1.0, precision="fp32", dist="allreduce", batch=4, **extra):
    return write_run(root, name, kind="bench", model="resnet18", precision=precision, dist_optimizer=dist,
                     image_size=32, batch_size=batch, global_batch_size=batch * world, world_size=world,
                     img_per_sec_total_mean=total, img_per_sec_total_ci95=ci,
                     img_per_sec_per_rank_mean=total / world, img_per_sec_per_rank_ci95=ci / world, **extra)


def train(root, name, world, global_batch, top1s, seconds_per_epoch=10.0, ips=100.0, data="digits"):
    history = [{"epoch": e, "val_top1_pct": t, "elapsed_s": seconds_per_epoch * (e + 1), "global_batch": global_batch}
               for e, t in enumerate(top1s)]
    return write_run(root, name, kind="train", model="resnet18_cifar", data=data, precision="fp32",
                     dist_optimizer="allreduce", world_size=world, batch_size=global_batch // world,
                     global_batch_size=global_batch, final_top1_pct=top1s[-1], best_top1_pct=max(top1s),
                     train_time_s=seconds_per_epoch * len(top1s), total_ips=ips, history=history)


NO_LOADER = {"loader_workers.png": "needs runs of dlscale loader, or train runs that differ only in data.num_workers",
             "io_over_time.png": "needs train runs that recorded their reads (io_* in metrics.jsonl)"}
"""Plots these hand-made runs cannot feed; tests/smoke/test_cli_loader.py and test_train_io.py draw them."""


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_efficiency_and_speedup_per_series(tmp_path):
    bench(tmp_path, "a1", 1, 100.0)
    bench(tmp_path, "a2", 2, 180.0)
    bench(tmp_path, "a4", 4, 300.0)
    bench(tmp_path, "b2", 2, 90.0, precision="amp_bf16")
    bench(tmp_path, "b4", 4, 160.0, precision="amp_bf16")
    series = {s.label: s for s in build_series(load([tmp_path]))}
    assert set(series) == {"fp32", "amp_bf16"}  # labels name only what differs
    rows = series["fp32"].rows
    assert [r.speedup for r in rows] == pytest.approx([1.0, 1.8, 3.0])
    assert [r.efficiency for r in rows] == pytest.approx([1.0, 0.9, 0.75])
    # The base is each series' smallest world size, here 2: (160 / 4) / (90 / 2).
    assert series["amp_bf16"].rows[1].efficiency == pytest.approx(efficiency(160, 4, 90, 2)) == pytest.approx(40 / 45)


def test_runs_sharing_a_world_size_are_told_apart_by_batch(tmp_path):
    bench(tmp_path, "small1", 1, 100.0, batch=4)
    bench(tmp_path, "small2", 2, 190.0, batch=4)
    bench(tmp_path, "big1", 1, 150.0, batch=8)
    series = build_series(load([tmp_path]))
    assert sorted(s.label for s in series) == ["batch 4/rank", "batch 8/rank"]


def test_accuracy_flag_reproduces_hal_may():
    """HAL's May runs: only global batch 16,384 (71.93 against 76.59) falls > 1 point."""
    may = load_reference("hal").get("may")

    class FakeRun:
        def __init__(self, p):
            self.kind, self.data, self.name, self.path = "train", "imagenet", f"hal{p['devices']}", p["devices"]
            self.global_batch, self.world_size, self.final_top1 = p["global_batch"], p["devices"], p["final_top1_pct"]
            self.summary = {"model": "resnet50"}

    rows = accuracy_rows([FakeRun(p) for p in may.points], tolerance_pts=1.0)
    assert [r.run.global_batch for r in rows if r.flagged] == [16384]
    assert rows[-1].delta_pts == pytest.approx(71.93 - 76.59)


def full_set(root):
    """Runs that feed every table and plot."""
    for world, total in ((1, 100.0), (2, 180.0), (4, 320.0)):
        bench(root / "runs", f"ar{world}", world, total)
        bench(root / "runs", f"nar{world}", world, total * 1.05, dist="neighbor_allreduce")
    bench(root / "runs", "amp1", 1, 150.0, precision="amp_bf16")
    bench(root / "runs", "amp1cl", 1, 170.0, precision="amp_bf16", channels_last=True)
    train(root / "train", "gb64", 1, 64, [40.0, 70.0, 90.0], seconds_per_epoch=20.0, ips=50.0)
    train(root / "train", "gb128", 2, 128, [35.0, 68.0, 89.5], seconds_per_epoch=11.0, ips=95.0)
    train(root / "train", "gb256", 4, 256, [30.0, 60.0, 85.0], seconds_per_epoch=6.0, ips=170.0)
    sweep = root / "sweep"
    bench(sweep, "world1", 1, 50.0)
    (sweep / "sweep.json").write_text(json.dumps({"kind": "sweep", "mode": "weak", "command": "bench", "points": [
        {"name": "world1", "world_size": 1, "nnodes": 1, "run_dir": "world1", "status": "ok", "settings": {}},
        {"name": "world2", "world_size": 2, "nnodes": 1, "run_dir": "world2", "status": "failed", "returncode": 1,
         "error": "dlscale bench: error: boom", "settings": {}},
    ]}))
    return [root / "runs", root / "train", sweep]


def test_report_writes_every_table_and_plot(tmp_path):
    out = tmp_path / "report"
    report = build_report(full_set(tmp_path), out, ["hal", "bluefog", "sc20"], tolerance_pts=1.0)
    assert report.not_drawn == NO_LOADER  # tests/smoke/test_cli_loader.py draws that one
    assert set(report.drawn) == set(PLOTS) - set(NO_LOADER)
    for drawn in report.drawn.values():
        for _, path in drawn:
            assert png_size(path) == (800, 500), path
            assert path.stat().st_size > 10_000, path  # a drawn figure, not a blank canvas
    # Two groups, one figure each: the loose runs and the sweep (its one point draws a throughput plot).
    assert [path.name for _, path in report.drawn["throughput_vs_devices.png"]] == [
        "throughput_vs_devices-runs-on-cpu.png", "throughput_vs_devices-sweep-cpu.png"]
    assert [path.name for _, path in report.drawn["reference.png"]] == [
        "reference-hal.png", "reference-sc20.png"]
    assert report.passed["reference.png"] == [("bluefog", "bluefog publishes no images/s per device count")]
    text = (out / "report.md").read_text()
    for name in ("runs", "scaling", "speedup", "accuracy", "progression", "dist_optimizers", "references", "epochs"):
        assert (out / f"{name}.csv").stat().st_size > 0
    # Numbers in report.md are the summaries' numbers.
    assert re.search(r"\| 2 \| 1 \| 180\.0 ± 1\.0 \| 90\.0 ± 0\.5 \| 1\.80x \| 90\.0% \|", text)
    assert re.search(r"\| 4 \| 1 \| 320\.0 ± 1\.0 \| 80\.0 ± 0\.2 \| 3\.20x \| 80\.0% \|", text)
    # The accuracy flag: batch 256 ends 5 points below batch 64; batch 128 is within 1 point.
    assert report.flagged == ["gb256: final top-1 85.00% is 5.00 points below gb64 (global batch 64, 90.00%)"]
    assert "FLAG: more than 1 pts below batch 64" in text and "gb128" in text
    # The failed sweep point is reported with its error.
    assert "failed: dlscale bench: error: boom" in text
    # Marconi100 form: time_base / time_N of the train runs, 60 s / 18 s on 4 ranks.
    rows = list(csv.DictReader((out / "speedup.csv").open()))
    gb256 = next(r for r in rows if r["path"].endswith("gb256"))
    assert float(gb256["speedup_time_base_over_time_n"]) == pytest.approx(60 / 18)
    # allreduce vs neighbor-allreduce at equal world size.
    rows = list(csv.DictReader((out / "dist_optimizers.csv").open()))
    nar = [r for r in rows if r["dist_optimizer"] == "neighbor_allreduce"]
    assert [float(r["ratio_to_first"]) for r in nar] == pytest.approx([1.05] * 3)
    assert "Bluefog-Lib/bluefog:README.rst@9ee376a7" in text  # sources travel with the figures


def test_report_without_references_and_with_all(tmp_path):
    """References add their own rows, section and curves and change nothing measured: the runs' tables are
    the same with none and with every shipped reference, and the second report holds every point of every
    shipped reference, once."""
    paths = full_set(tmp_path)
    plain = build_report(paths, tmp_path / "plain")
    everything = build_report(paths, tmp_path / "all", ["all"])
    assert everything.not_drawn == NO_LOADER
    assert plain.not_drawn == {**NO_LOADER, "reference.png": "no --reference selected"}
    for name in ("runs", "scaling", "speedup", "accuracy", "progression", "dist_optimizers", "epochs"):
        assert (tmp_path / "plain" / f"{name}.csv").read_text() == (tmp_path / "all" / f"{name}.csv").read_text(), name
    assert list(csv.DictReader((tmp_path / "plain" / "references.csv").open())) == []
    shipped = [load_reference(name) for name in reference_names()]
    rows = list(csv.DictReader((tmp_path / "all" / "references.csv").open()))
    assert [(r["reference"], r["series"]) for r in rows] == [
        (ref.name, series.label) for ref in shipped for series in ref.series for _ in series.points]
    plain_text, all_text = (tmp_path / "plain" / "report.md").read_text(), (tmp_path / "all" / "report.md").read_text()
    assert "None selected" in plain_text and "None selected" not in all_text
    for ref in shipped:
        assert f"### {ref.name}: {ref.title}" in all_text and f"### {ref.name}:" not in plain_text, ref.name
    # The published curves are drawn beside the runs': a throughput plot (one per group) is not the plain one.
    plots = sorted(p.name for p in (tmp_path / "all").glob("throughput_vs_devices*.png"))
    assert plots and all((tmp_path / "plain" / name).is_file() for name in plots)
    assert any((tmp_path / "all" / name).read_bytes() != (tmp_path / "plain" / name).read_bytes() for name in plots)


def test_plots_without_data_are_named_not_faked(tmp_path):
    bench(tmp_path / "runs", "only", 1, 100.0)
    report = build_report([tmp_path / "runs"], tmp_path / "out")
    assert (tmp_path / "out" / "throughput_vs_devices.png").exists()
    assert "time_to_solution_vs_devices.png" in report.not_drawn
    assert not (tmp_path / "out" / "time_to_solution_vs_devices.png").exists()
    assert "not drawn" in (tmp_path / "out" / "report.md").read_text()


def test_bad_inputs(tmp_path):
    with pytest.raises(ConfigError, match="no such directory"):
        load([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no summary.json or sweep.json"):
        load([tmp_path / "empty"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot be read as JSON"):
        load([bad])
    (bad / "summary.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"summary.json: not a JSON object"):
        load([bad])


def test_predict_runs_are_overlaid_and_comm_runs_skipped(tmp_path):
    runs = tmp_path / "runs"
    bench(runs, "m1", 1, 100.0)
    bench(runs, "m2", 2, 180.0)
    point = {"nodes": 1, "batch_per_device": 4, "compute_ms": 40.0, "comm_ms": 5.0, "exposed_ms": 2.0,
             "stragglers_ms": 0.0, "step_ms": 42.0, "input_ceiling": None, "limit": "compute"}
    write_run(runs, "pred", kind="predict", model="resnet18", title="resnet18 on test", points=[
        {**point, "devices": 1, "img_per_s_per_device": 100.0, "img_per_s_total": 100.0, "efficiency": 1.0},
        {**point, "devices": 2, "img_per_s_per_device": 99.0, "img_per_s_total": 198.0, "efficiency": 0.99},
        {**point, "devices": 64, "img_per_s_per_device": 90.0, "img_per_s_total": 5760.0, "efficiency": 0.9}])
    write_run(runs, "comm", kind="comm", world_size=2)
    report = build_report([runs], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Predictions (dlscale predict)" in text
    assert "| pred | 2 | 198.0 | 180.0 | +10.0% | 99.0% | compute | m2 |" in text
    assert "| pred | 64 | 5,760.0 | — | — | 90.0% | compute | — |" in text
    assert "a dlscale comm run" in text
    assert "throughput_vs_devices.png" not in report.not_drawn
    with open(tmp_path / "out" / "predictions.csv") as f:
        assert len(list(csv.reader(f))) == 4
    only_comm = tmp_path / "only"
    write_run(only_comm, "comm", kind="comm", world_size=2)
    with pytest.raises(ConfigError, match="comm run"):
        load([only_comm])
