"""Rates a busy host made meaningless are marked wherever they are shown, by the run's own record (its threads'
share of the time, an interval wider than its mean) beside the load samples, and `dlscale explain` agrees:
recorded runs written here as bench and train write them, never timed."""

import csv
import json

import pytest
from commands import dlscale_here
from report_runs import CPU_ENV, bench, sweep, write_run

from dlscale.explain.build import explain_run
from dlscale.metrics.host_load import SHARE_FLOOR, disturbance, run_disturbance
from dlscale.report import build_report
from dlscale.report.load import load
from dlscale.report.plots import HOST
from dlscale.report.plots import efficiency as efficiency_plot
from dlscale.report.scaling import build_series, scaling_metrics
from dlscale.report.tables import scaling_table
from dlscale.rundir import read_run


def host_load(share, start=1.4, end=3.9, threads=1, cores=2):
    """The host_load record of a run (metrics/host_load.py: env.json's at the start, summary.json's at the end)."""
    return {"load_avg_start": [start, 1.0, 0.5], "load_avg_source": "/proc/loadavg", "cores_available": cores,
            "host_cores": cores, "ranks_per_node": 1, "threads_per_rank": threads, "threads_per_node": threads,
            "oversubscribed": False, "loaded": start > cores, "load_avg_end": [end, 1.5, 0.6], "timed_s": 10.0,
            "process_cpu_s": 10.0 * share * threads, "process_cores_busy": share * threads, "thread_share": share}


def loaded_bench(root, name, world=1, total=12.7, ci=19.6, share=0.45):
    """The issue's `make bench`: 12.7 +-19.6 img/s, its threads 45% of the timed part, load 1.40 -> 3.90 on 2."""
    record = host_load(share)
    env = {**CPU_ENV, "cpu_available": 2, "cpu_count": 2, "host_load": {k: record[k] for k in list(record)[:9]}}
    return bench(root, name, world, total, ci=ci, env=env, device="cpu", host_load=record, compute_ips=total)


def test_the_verdict_is_the_runs_own_evidence_with_the_load_beside_it():
    record = host_load(0.45)
    said = disturbance(record, cpu=True, mean=12.7, ci95=19.6)
    assert said == ("its threads ran 45% of the time they could (rank 0's CPU time) and its 95% interval (+-19.6) "
                    "is wider than its mean (12.7 img/s); load average 1.40 at the start, 3.90 at the end, on 2 cores")
    assert disturbance(host_load(0.95), cpu=True, mean=12.7, ci95=1.0) is None  # the cores were its own
    assert disturbance(host_load(0.95, start=9.0), cpu=True, mean=12.7, ci95=1.0) is None  # a sample, not evidence
    assert disturbance(record, cpu=False, mean=12.7, ci95=1.0) is None  # a GPU run's CPU waits for the GPU
    # waiting for data half the time, 40% of all the time is 80% of the time it computed
    assert disturbance(host_load(0.4), cpu=True, mean=10.0, ci95=1.0, computing=0.5) is None
    assert "ran 48%" in disturbance(host_load(0.24), cpu=True, mean=10.0, ci95=1.0, computing=0.5)
    assert disturbance(host_load(SHARE_FLOOR), cpu=True, mean=10.0, ci95=10.0) is None  # at the floor, ci = mean


def test_a_bench_marked_by_its_record_is_marked_in_the_terminal_the_report_and_explain(tmp_path, capsys):
    path = loaded_bench(tmp_path / "runs", "make-bench")
    run = read_run(path)
    reason = run_disturbance(run)
    assert "its threads ran 45%" in reason and "wider than its mean (12.7 img/s)" in reason

    from dlscale.cli.common import say_if_not_the_models_speed
    say_if_not_the_models_speed(path, "the img/sec figures above are")
    assert capsys.readouterr().out == f"warning: the img/sec figures above are not the model's speed: {reason}; " \
                                      "run where nothing else runs (dlscale explain ranks the causes)\n"

    explained = explain_run(run, "none")
    host = [f for f in explained.findings if f.category == "host"]
    assert [f.cause for f in host] == ["a busy host: its threads ran 45% of the time they could (rank 0's CPU time)"]
    assert "its rates are not the model's speed" in host[0].evidence and host[0].effect.factor == pytest.approx(1 / .45)
    assert not [r for r in explained.ruled_out if r.category == "host" and "left the cores free" in r.evidence]
    out = dlscale_here("explain", path, "--reference", "none", cwd=tmp_path)
    assert out.returncode == 0 and "[host] a busy host: its threads ran 45%" in out.stdout

    build_report([path], tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"- **HOST** make-bench: {reason}" in text and "| 12.7 (?) |" in text
    row = next(csv.DictReader((tmp_path / "report" / "runs.csv").open()))
    assert row["host_flag"] == reason


def test_a_quiet_run_is_not_marked(tmp_path):
    path = loaded_bench(tmp_path, "quiet", share=0.97, ci=0.4)
    assert run_disturbance(read_run(path)) is None
    build_report([path], tmp_path / "report")
    assert "**HOST**" not in (tmp_path / "report" / "report.md").read_text()


def test_a_sweeps_efficiencies_on_a_busy_host_are_marked(tmp_path):
    root = tmp_path / "sweep"
    loaded_bench(root, "world1", 1, total=40.0, ci=2.0, share=0.9)
    loaded_bench(root, "world2", 2, total=24.0, ci=3.0, share=0.3)  # 30% efficiency: its threads ran 30%
    sweep(tmp_path, "sweep", [("world1", 1, 1, {}), ("world2", 2, 1, {})])
    series = build_series(load([root]))
    shown, raw = scaling_table(series)
    assert shown[0][6] == "100.0%" and shown[1][6] == "30.0% (?)" and shown[1][3] == "24.0 ± 3.0 (?)"
    assert "not the model's speed: world2: its threads ran 30%" in shown[1][9]
    assert raw[1][14].startswith("world2: its threads ran 30%") and raw[0][14] is None
    assert dict(scaling_metrics(series))[2]["host_disturbed"] == 1.0
    figure = efficiency_plot(series, [])
    assert HOST in [line.get_label() for line in figure.axes[0].get_lines()]


def test_an_efficiency_against_a_marked_baseline_is_marked(tmp_path):
    root = tmp_path / "sweep"
    loaded_bench(root, "world1", 1, total=10.0, ci=12.0, share=0.9)  # an interval wider than its mean
    loaded_bench(root, "world2", 2, total=30.0, ci=1.0, share=0.9)
    sweep(tmp_path, "sweep", [("world1", 1, 1, {}), ("world2", 2, 1, {})])
    shown, _ = scaling_table(build_series(load([root])))
    assert shown[1][6] == "150.0% (!) (?)" and "baseline world1: its 95% interval (+-12.0)" in shown[1][9]


def test_a_train_run_is_judged_by_its_log_windows(tmp_path):
    record = host_load(0.95)
    path = write_run(tmp_path, "t", env={**CPU_ENV, "host_load": record}, config={"kind": "train"}, kind="train",
                     model="resnet18_cifar", world_size=1, total_ips=50.0, device="cpu", host_load=record)
    rates = [5.0, 120.0, 8.0, 110.0, 6.0]  # after each epoch's first window: swings wider than their mean
    windows = [{"record": "train", "epoch": 0, "step": 5 * (i + 1), "throughput_img_per_s": r,
                "compute_img_per_s": r} for i, r in enumerate([100.0, *rates])]
    (path / "metrics.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))
    reason = run_disturbance(read_run(path))
    assert reason.startswith("its 95% interval (+-104.") and "is wider than its mean (49.8 img/s)" in reason


def test_a_record_the_reader_refuses_leaves_the_finished_command_alone(tmp_path, capsys):
    """A train run resumed at the end of an epoch's steps records that epoch at 0 img/s, which the reader refuses
    (report and explain name it); the command that wrote it has ended well and says nothing more."""
    from dlscale.cli.common import say_if_not_the_models_speed

    path = write_run(tmp_path, "t", kind="train", world_size=1, total_ips=50.0,
                     history=[{"epoch": 0, "throughput_img_per_s": 0.0}])
    say_if_not_the_models_speed(path, "this run's img/s are")
    assert capsys.readouterr().out == ""
