"""What the report draws and prints, checked on the figures' own objects and the files: reference overlays
against their JSON, top-5, node boundaries, epoch times, the wide precision table, efficiencies above 100%,
and a report over many runs that stays readable (legend size, tick overlap, text inside the figure)."""

import csv
import json
import math
import re
from dataclasses import replace
from importlib import resources

import pytest
from report_runs import CPU_ENV, bench, many_runs, predict, sweep, train, write_run

from dlscale.report import accuracy, build_report, epoch_plot, plots, reference_plots, workers
from dlscale.report.build import compute, figures_of
from dlscale.report.figure import MAX_LEGEND, MAX_TICKS, figure, layout_problems, legend, log2_axis
from dlscale.report.load import load
from dlscale.report.plots import IMPOSSIBLE
from dlscale.report.references import load_reference, reference_names
from dlscale.report.tables import precision_tables


def lines(fig, axes=0):
    return {line.get_label(): line for line in fig.axes[axes].get_lines()}


def published(name, key):
    """series id -> {devices: value} read straight from the shipped JSON (hours and minutes to seconds)."""
    data = json.loads((resources.files("dlscale") / "references" / f"{name}.json").read_text())
    out = {}
    for series in data["series"]:
        values = {}
        for p in series["points"]:
            if "devices" not in p:
                continue
            if key == "img_per_s" and "img_per_s" in p:
                values[p["devices"]] = p["img_per_s"]
            elif key == "train_time_s":
                seconds = p.get("train_time_s") or 60 * p.get("train_time_min", 0) or 3600 * p.get("train_time_h", 0)
                if seconds:
                    values[p["devices"]] = seconds
        out[series["label"]] = values
    return out


def overlay_factors(fig, name, key):
    """Reference name's lines on the figure: label -> drawn / published at every point."""
    data = published(name, key)
    ratios = {}
    for label, line in lines(fig).items():
        plain = re.sub(r"^x[0-9.e+-]+: ", "", label).removesuffix(" [read off a plot]")
        if plain in data and data[plain]:
            ratios[plain] = [y / data[plain][x] for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)]
    return ratios


def hal_sweep(root):
    for world, seconds, ips in ((2, 100.0, 200.0), (4, 52.0, 390.0), (8, 27.0, 760.0)):
        train(root / "hal-like", f"world{world}", world, 32 * world, [50.0, 70.0], seconds_per_epoch=seconds / 2,
              ips=ips, top5s=[80.0, 90.0], env=CPU_ENV, nodes=1 if world <= 4 else 2)
    sweep(root, "hal-like", [(f"world{w}", w, 1 if w <= 4 else 2, {}) for w in (2, 4, 8)], command="train")
    return [root / "hal-like"]


def test_every_overlay_is_its_json_times_one_factor_per_reference(tmp_path):
    """HAL's series keep their published order: May's 64-GPU run (3,379 s) is drawn faster than February's
    (4,071 s), and every drawn point divides back to its JSON figure by one factor per reference."""
    collection = load(hal_sweep(tmp_path))
    series = compute(collection, 1.0).series
    checked = set()
    for name in reference_names():
        ref = [load_reference(name)]
        for draw, key in ((plots.throughput(series, ref, set()), "img_per_s"),
                          (plots.time_to_solution(series, ref), "train_time_s")):
            ratios = overlay_factors(draw, name, key)
            factors = {round(r, 9) for values in ratios.values() for r in values}
            assert len(factors) <= 1, (name, key, ratios)
            checked |= {(name, key)} if ratios else set()
    assert checked >= {("hal", "img_per_s"), ("hal", "train_time_s"), ("ngc", "img_per_s"), ("ngc", "train_time_s"),
                       ("dlperf", "img_per_s"), ("sc20", "img_per_s"), ("mlperf", "img_per_s")}
    fig = plots.time_to_solution(series, [load_reference("hal")])
    drawn = {label.split(": ", 1)[1]: dict(zip(line.get_xdata(), line.get_ydata(), strict=True))
             for label, line in lines(fig).items() if label.startswith("x")}
    feb, may = drawn["HAL Feb 2020 (V100, 208 img/GPU, AMP O2)"], drawn["HAL May 2020 (V100, 224-256 img/GPU, AMP O2)"]
    assert may[64] < feb[64] and may[64] / feb[64] == pytest.approx(3378.84 / 4071.31)
    assert may[4] / feb[4] == pytest.approx(40908.36 / 39536)
    # The factor in the label is the one drawn: our 2-rank run's 200 device-seconds against HAL's 2-GPU run.
    factor = float(next(label for label in lines(fig) if "Feb" in label).split(":")[0][1:])
    assert factor == pytest.approx(100.0 * 2 / (74211.11 * 2), rel=5e-3)  # printed to 3 digits
    assert feb[2] == pytest.approx(100.0)


def test_throughput_marks_the_node_boundary(tmp_path):
    series = compute(load(hal_sweep(tmp_path)), 1.0).series
    fig = plots.throughput(series, [load_reference("hal")], set())
    boundaries = {label: line.get_xdata()[0] for label, line in lines(fig).items() if label.startswith("node boundary")}
    # Ours and HAL's cross at the same place (4 GPUs per node): one line names both.
    assert boundaries == {"node boundary (ours, hal): 4 in a node | 8 across": pytest.approx(32 ** 0.5)}
    assert any(t.get_text() == "in node | across nodes" for t in fig.axes[0].texts)


def test_accuracy_figure_has_top1_and_top5(tmp_path):
    runs = load(hal_sweep(tmp_path)).runs
    fig = accuracy.curves(runs, set(), "epoch")
    top1, top5 = fig.axes
    assert (top1.get_ylabel(), top5.get_ylabel()) == ("validation top-1 (%)", "validation top-5 (%)")
    build_report([tmp_path / "hal-like"], tmp_path / "out", ["hal"])
    may64 = next(r for r in csv.DictReader((tmp_path / "out" / "references.csv").open())
                 if r["series"].startswith("HAL May") and r["devices"] == "64")
    assert (float(may64["final_top1_pct"]), float(may64["final_top5_pct"])) == (71.93, 90.41)  # HAL's finals
    assert {tuple(line.get_ydata()) for line in top5.get_lines()} == {(80.0, 90.0)}
    assert {tuple(line.get_ydata()) for line in top1.get_lines()} == {(50.0, 70.0)}


def test_epoch_times_as_sc20_logs_them_and_marconi100_draws_them(tmp_path):
    # First epoch 30 s (workers start), then 10 s each: SC20's "Time taken for epoch N" and Marconi100's mean.
    for world, nodes, per_epoch in ((1, 1, 10.0), (2, 1, 5.5), (4, 2, 3.0)):
        train(tmp_path / "s", f"w{world}", world, 16 * world, [10.0, 20.0, 30.0], seconds_per_epoch=per_epoch,
              first_epoch_s=30.0, env=CPU_ENV, nodes=nodes)
    sweep(tmp_path, "s", [("w1", 1, 1, {}), ("w2", 2, 1, {}), ("w4", 4, 2, {})], command="train", grouped=True)
    out = tmp_path / "report"
    build_report([tmp_path / "s"], out, ["marconi100"])
    rows = [r for r in csv.DictReader((out / "epochs.csv").open()) if r["run"] == "w1"]
    assert [float(r["epoch_time_s"]) for r in rows] == [30.0, 10.0, 10.0]
    assert [float(r["elapsed_s"]) for r in rows] == [30.0, 40.0, 50.0]
    assert "| w1 | 1 | 10.00 | 40.00 |" in (out / "report.md").read_text()
    fig = epoch_plot.plot(compute(load([tmp_path / "s"]), 1.0).series, [load_reference("marconi100")])
    one_node = lines(fig, 0)
    ours = next(line for label, line in one_node.items() if not label.startswith(("x", "ideal")))
    assert list(ours.get_xdata()) == [1, 2] and list(ours.get_ydata()) == [10.0, 5.5]
    # Marconi100's 1-4 GPUs in one node, one factor: our 10 device-seconds against its 3,466 s on 1 GPU.
    marconi = next(line for label, line in one_node.items() if "1 node, 1-4" in label)
    assert list(marconi.get_ydata()) == pytest.approx([t * 10.0 / 3466 for t in (3466, 2232, 1977, 1926)])


def test_epoch_time_against_loader_workers_beside_the_loader(tmp_path):
    for count, per_epoch in ((0, 40.0), (2, 22.0), (4, 12.0)):
        train(tmp_path / "w", f"workers{count}", 1, 32, [10.0, 20.0], seconds_per_epoch=per_epoch,
              workers=count, env=CPU_ENV)
    settings = [{"workers": w, "images_per_s": r, "speedup": r / 500.0, "files_per_s": r, "file_read_gb_per_s": 0.0,
                 "storage_read_gb_per_s": 0.0, "cpu_cores_busy": 1.0} for w, r in ((0, 500.0), (2, 900.0), (4, 1500.0))]
    write_run(tmp_path / "w", "loader", kind="loader", decode="fast", settings=settings)
    report = build_report([tmp_path / "w"], tmp_path / "out", ["marconi100"])
    assert "loader_workers.png" in report.drawn
    collection = load([tmp_path / "w"])
    fig = workers.plot(collection.loaders, collection.runs, [load_reference("marconi100")])
    loader, training = fig.axes
    assert [list(line.get_ydata()) for line in loader.get_lines()] == [[1.0, 1.8, 3.0]]
    drawn = lines(fig, 1)
    ours = next(line for label, line in drawn.items() if "resnet18_cifar" in label)
    assert list(ours.get_xdata()) == [0, 2, 4] and list(ours.get_ydata()) == [40.0, 22.0, 12.0]
    # Marconi100's epoch times, one factor: its 16-worker 1,926 s on our 4-worker 12 s (the nearest count).
    marconi = next(line for label, line in drawn.items() if "Marconi100" in label)
    assert list(marconi.get_ydata()) == pytest.approx([t * 12.0 / 1926 for t in (7704, 4882, 2854, 2015, 1926)])
    assert training.get_ylabel() == "epoch time (s)" and layout_problems(fig) == []


def test_wide_precision_table_as_paddle_prints_it(tmp_path):
    """A sweep over precisions at 1, 8 and 32 devices prints PaddlePaddle's table: devices x {FP32, AMP}."""
    rates = {1: (370.194, 790.033), 8: (2791.98, 5889.05), 32: (10523.32, 21259.81)}
    points = []
    for world, (fp32, amp) in rates.items():
        for precision, total in (("fp32", fp32), ("amp_fp16", amp)):
            bench(tmp_path / "p", f"world{world}-{precision}", world, total, precision=precision, batch=256)
            points.append((f"world{world}-{precision}", world, 1, {"precision": precision}))
    sweep(tmp_path, "p", points)
    [(group, headers, rows)] = precision_tables(compute(load([tmp_path / "p"]), 1.0).precisions)
    assert headers == ["devices", "fp32 img/s (batch 256/rank)", "amp_fp16 img/s (batch 256/rank)", "amp_fp16 / fp32"]
    assert rows == [[1, "370.2 ± 1.0", "790.0 ± 1.0", "2.13x"], [8, "2792.0 ± 1.0", "5889.1 ± 1.0", "2.11x"],
                    [32, "10523.3 ± 1.0", "21259.8 ± 1.0", "2.02x"]]
    build_report([tmp_path / "p"], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| devices | fp32 img/s (batch 256/rank) | amp_fp16 img/s (batch 256/rank) | amp_fp16 / fp32 |" in text
    assert len(list(csv.DictReader((tmp_path / "out" / "precisions.csv").open()))) == 6


def test_reference_plot_draws_the_published_figures():
    fig = reference_plots.plot(load_reference("dlperf"))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    for total in ("790", "5,889", "21,260", "10,523"):  # PaddlePaddle's table, rounded
        assert total in labels
    heights = sorted(round(p.get_height(), 2) for p in ax.patches)
    assert round(21259.81 / 32, 2) in heights and round(370.194, 2) in heights
    assert layout_problems(fig) == []


def test_efficiency_above_100_percent_is_marked_with_its_cause(tmp_path):
    """A 1-rank baseline with 2 threads on 1 core of a loaded host: the 2-rank run shows 107.5%, which is
    printed with its mark, its causes and the baseline, in the table, the CSV and on the plot."""
    loaded = {**CPU_ENV, "torch_threads": 2, "cpu_available": 1, "load_average": [3.0, 2.5, 2.0]}
    bench(tmp_path / "runs", "one", 1, 100.0, env=loaded)
    bench(tmp_path / "runs", "two", 2, 215.0, env={**CPU_ENV, "cpu_available": 1})
    out = tmp_path / "out"
    build_report([tmp_path / "runs"], out)
    text = (out / "report.md").read_text()
    row = next(line for line in text.splitlines() if line.endswith("| two |"))
    assert "| 107.5% (!) |" in row
    assert "above 100%, impossible for the same work per rank" in row
    for cause in ("oversubscription at the baseline: 1 rank(s) x 2 threads on 1 cores",
                  "a loaded host at the baseline: load average 3.00 on 1 cores",
                  "different threads per rank: 2 at the baseline, 1 here"):
        assert cause in row
    assert "- bench resnet18 fp32 allreduce: one (1 rank, 1 node, 100.0 img/s)" in text  # the baseline named
    scaling = csv.DictReader((out / "scaling.csv").open())
    flagged = {r["run_dir"].rsplit("/", 1)[-1]: r["efficiency_flag"] for r in scaling}
    assert flagged["one"] == "" and flagged["two"].startswith("efficiency 107.5% is above 100%")
    speedup = {r["path"].rsplit("/", 1)[-1]: r["efficiency_flag"] for r in csv.DictReader((out / "speedup.csv").open())}
    assert speedup["two"].startswith("efficiency 107.5%")
    fig = plots.efficiency(compute(load([tmp_path / "runs"]), 1.0).series, [])
    ring = lines(fig)[IMPOSSIBLE]
    assert (list(ring.get_xdata()), list(ring.get_ydata())) == ([2], [pytest.approx(107.5)])
    assert any(t.get_text().startswith("108%: ") for t in fig.axes[0].texts)


def test_progression_labels_never_overlap(tmp_path):
    """SC20's progression as settings: long precision and option names side by side stay readable."""
    options = ({}, {"channels_last": True}, {"channels_last": True, "cudnn_benchmark": True},
               {"channels_last": True, "cudnn_benchmark": True, "fused_optimizer": True, "compile": True})
    for world in (1, 2):
        for i, extra in enumerate(options):
            bench(tmp_path, f"w{world}-{i}", world, 100.0 * world * (1 + i), precision="amp_bf16", **extra)
        bench(tmp_path, f"w{world}-fp32", world, 50.0 * world)
    figures = compute(load([tmp_path]), 1.0)
    fig = plots.progression(figures.progression, [load_reference("sc20"), load_reference("ngc")])
    assert len(fig.axes[0].get_xticklabels()) == 5
    assert layout_problems(fig) == []


def test_efficiency_above_100_percent_is_an_mlflow_metric_too(tmp_path):
    from dlscale.report.scaling import scaling_metrics

    bench(tmp_path, "one", 1, 100.0)
    bench(tmp_path, "two", 2, 215.0)
    metrics = dict(scaling_metrics(compute(load([tmp_path]), 1.0).series))
    assert metrics[2]["efficiency_pct"] == pytest.approx(107.5) and metrics[2]["efficiency_above_100pct"] == 1.0
    assert "efficiency_above_100pct" not in metrics[1]


def test_different_work_per_rank_is_named(tmp_path):
    bench(tmp_path, "a", 1, 100.0, batch=64)
    bench(tmp_path, "b", 2, 230.0, batch=32)
    (tmp_path / "sweep.json").write_text(json.dumps({"kind": "sweep", "mode": "strong", "command": "bench", "points": [
        {"name": "a", "run_dir": "a", "world_size": 1, "status": "ok", "settings": {}},
        {"name": "b", "run_dir": "b", "world_size": 2, "status": "ok", "settings": {}}]}))
    [s] = compute(load([tmp_path]), 1.0).series
    assert "different work per rank: 64 images per rank at the baseline (a), 32 here" in s.rows[1].flag
    assert s.rows[0].flag == ""


def test_time_to_target_column(tmp_path):
    train(tmp_path / "runs", "reached", 1, 32, [60.0, 75.2], target_top1_pct=75.0, time_to_target_s=412.0)
    train(tmp_path / "runs", "missed", 2, 64, [60.0, 74.5], target_top1_pct=75.0, time_to_target_s=None)
    build_report([tmp_path / "runs"], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert re.search(r"\| 412\.0 s to 75\.00% \| ok \| reached \|", text)
    assert re.search(r"\| not reached \(75\.00%\) \| ok \| missed \|", text)
    rows = {r["run_dir"].rsplit("/", 1)[-1]: r for r in csv.DictReader((tmp_path / "out" / "scaling.csv").open())}
    assert float(rows["reached"]["time_to_target_s"]) == 412.0 and rows["missed"]["time_to_target_s"] == ""


def test_accuracy_is_compared_only_within_a_schedule(tmp_path):
    """A 2-epoch run at a large batch says nothing against a 30-epoch run at a small one."""
    train(tmp_path, "long-small", 1, 64, [70.0, 80.0], epochs_planned=30)
    train(tmp_path, "short-big", 4, 256, [20.0, 25.0], epochs_planned=2)
    train(tmp_path, "long-big", 4, 256, [70.0, 76.0], epochs_planned=30)
    report = build_report([tmp_path], tmp_path / "out")
    assert [line.split(":")[0] for line in report.flagged] == ["long-big"]


def test_a_report_over_many_runs_stays_readable(tmp_path):
    """34 run directories, --reference all: one figure per group (sweep or device kind), and every figure
    passes the layout checks: no tick labels that overlap, no legend past its size, nothing cut off."""
    paths = many_runs(tmp_path)
    figures = compute(load(paths), 1.0)
    refs = [load_reference(name) for name in reference_names()]
    drawn = 0
    for name, title, fig in figures_of(figures, refs, 1.0):
        if isinstance(fig, str):
            continue
        drawn += 1
        assert layout_problems(fig) == [], (name, title)
        for ax in fig.axes:
            if ax.get_legend():
                texts = [t.get_text() for t in ax.get_legend().get_texts()]
                assert len(texts) == len(set(texts)) <= 2 * MAX_LEGEND, (name, title)
    assert drawn >= 20
    groups = {g.title: g for g in figures.groups}
    assert set(groups) == {"sweep-precisions, CPU (x86_64)", "sweep-train, CPU (x86_64)",
                           "sweep-strategies, CPU (x86_64)", "runs on CPU (x86_64)",
                           "runs on NVIDIA H100 80GB HBM3", "dlscale predict runs"}
    # The H100 prediction is not drawn beside CPU runs; the CPU prediction joins the run it was made from.
    assert [p.name for p in groups["dlscale predict runs"].predictions] == ["predict-h100"]
    assert [p.name for p in groups["runs on CPU (x86_64)"].predictions] == ["predict-cpu"]
    assert {r.device for r in groups["runs on NVIDIA H100 80GB HBM3"].runs} == {"cuda"}


@pytest.mark.filterwarnings("ignore:constrained_layout not applied")  # the overfull figure is the point
def test_layout_checks_can_fail():
    """The checks above see what they look for: crowded ticks, an overfull legend, a label past the edge."""
    fig, (ax,) = figure("t")
    ax.plot(range(40), range(40))
    ax.set_xticks(range(40), [f"tick {i}" for i in range(40)])
    ax.set_ylabel("y " * 200)
    for i in range(70):
        ax.plot([0], [0], label=f"series {i}")
    ax.legend(ncols=1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    problems = "\n".join(layout_problems(fig))
    assert "x tick labels 'tick 0' and 'tick 1' overlap" in problems
    assert "the legend has 70 entries" in problems and "reaches past the figure's edge" in problems
    assert "is cut off" in problems


def test_log2_ticks_stay_apart_and_legends_keep_one_entry_per_label():
    fig, (ax,) = figure("t")
    values = [2**k for k in range(17)]  # 1 to 65,536 devices
    ax.plot(values, values, label="same")
    ax.plot(values, values, label="same")
    log2_axis(ax, values, "devices")
    legend(ax, fig)
    labels = [t.get_text() for t in ax.xaxis.get_ticklabels()]
    assert len(labels) <= MAX_TICKS and "64k" in labels and "1" in labels
    assert all(math.log2(b) - math.log2(a) >= 1 for a, b in zip(ax.get_xticks(), ax.get_xticks()[1:], strict=False))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["same"]
    assert layout_problems(fig) == []


def test_predictions_stay_with_the_run_they_come_from(tmp_path):
    bench(tmp_path / "runs", "cpu1", 1, 50.0, env=CPU_ENV)
    bench(tmp_path / "runs", "cpu2", 2, 95.0, env=CPU_ENV)
    predict(tmp_path / "runs", "pred", [1, 2, 4], 50.0, model="resnet18", from_run="cpu1")
    report = build_report([tmp_path / "runs"], tmp_path / "out")
    assert [p.name for _, p in report.drawn["throughput_vs_devices.png"]] == ["throughput_vs_devices.png"]


def test_the_epoch_line_gives_the_epoch_its_own_time(capsys):
    """SC20's log: "Time taken for epoch 2 is 78.5 sec", beside the time since the start."""
    from dlscale.metrics.records import Records

    records = Records(None, enabled=False)
    times = [records._epoch_time({"epoch": e, "elapsed_s": t}) for e, t in ((0, 79.9), (1, 158.4), (3, 300.0))]
    assert times == ["time taken 79.9 s, ", "time taken 78.5 s, ", ""]  # epoch 3 follows a gap (a resume)


def test_the_causes_read_the_host_load_record_bench_and_train_write(tmp_path):
    """The same case as above, its evidence where bench and train record it: env.json's host_load
    (metrics/host_load.py), not top-level fields."""
    host = {"load_avg_start": [3.0, 2.5, 2.0], "cores_available": 1, "threads_per_rank": 2, "ranks_per_node": 1}
    bench(tmp_path / "runs", "one", 1, 100.0, env={**CPU_ENV, "host_load": host})
    bench(tmp_path / "runs", "two", 2, 215.0, env={**CPU_ENV, "host_load": {**host, "threads_per_rank": 1}})
    build_report([tmp_path / "runs"], tmp_path / "out")
    row = next(line for line in (tmp_path / "out" / "report.md").read_text().splitlines() if line.endswith("| two |"))
    for cause in ("oversubscription at the baseline: 1 rank(s) x 2 threads on 1 cores",
                  "a loaded host at the baseline: load average 3.00 on 1 cores",
                  "different threads per rank: 2 at the baseline, 1 here"):
        assert cause in row


def test_a_reference_series_marked_overlay_false_is_on_no_plot(tmp_path):
    """large_batch's four published efficiencies say "overlay": false: the efficiency plot and the strategies'
    efficiency panel leave them out, and draw the same series once the mark is taken off."""
    for world, total in ((1, 100.0), (2, 180.0)):
        bench(tmp_path / "runs", f"ar{world}", world, total)
        bench(tmp_path / "runs", f"nar{world}", world, total * 1.05, dist="neighbor_allreduce")
    figures = compute(load([tmp_path / "runs"]), 1.0)
    hidden = load_reference("large_batch")
    shown = replace(hidden, series=tuple(replace(s, meta={**s.meta, "overlay": True}) for s in hidden.series))
    labels = {s.label for s in hidden.series}
    for refs, drawn in (([hidden], set()), ([shown], labels)):
        efficiency = plots.efficiency(figures.series, refs)
        strategies = plots.dist_optimizers(figures.strategies, refs)
        assert set(lines(efficiency)) & labels == drawn
        assert set(lines(strategies, axes=1)) & labels == drawn
