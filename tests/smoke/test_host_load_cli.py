"""A bench and a training run on a machine made to look loaded (a fake load average) and oversubscribed (one
core for two threads): the warning at the start, its record in env.json and summary.json, and `dlscale
explain` ranking both causes with that evidence."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dlscale
from dlscale.metrics.host_load import run_disturbance
from dlscale.rundir import read_run

LOAD = 4 * os.cpu_count() + 1.5  # above the machine's cores, whatever machine runs this
SOURCES = str(Path(dlscale.__file__).resolve().parents[1])  # the package under test, in the children too


def _dlscale(args, cwd, loadavg):
    core = min(os.sched_getaffinity(0))
    env = {"OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCES, "DLSCALE_LOADAVG_FILE": str(loadavg)}
    out = subprocess.run([sys.executable, "-m", "dlscale", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                         timeout=300, env=env, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_a_bench_on_a_loaded_oversubscribed_machine_warns_records_and_is_explained(tmp_path):
    loadavg = tmp_path / "loadavg"
    loadavg.write_text(f"{LOAD:.2f} 8.00 7.00 3/200 1234\n")
    out = _dlscale(["bench", "--model", "resnet18", "--width", "4", "--image-size", "16", "--num-classes", "10",
                    "--batch-size", "2", "--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "3",
                    "--name", "b", "--output-dir", "runs"], tmp_path, loadavg)
    warning, *marks = [line for line in out.stdout.splitlines() if line.startswith("warning:")]
    assert "1 rank(s) x 2 threads = 2 compute threads on the 1 cores this process may use" in warning
    assert f"load average {LOAD:.2f} over the last minute on {os.cpu_count()} cores" in warning  # the machine's
    assert warning.endswith("set OMP_NUM_THREADS=1 (now 2) or run where nothing else runs")
    run = tmp_path / "runs" / "b"
    env = json.loads((run / "env.json").read_text())["host_load"]
    assert env["load_avg_start"] == [LOAD, 8.0, 7.0] and env["cores_available"] == 1
    assert env["threads_per_rank"] == 2 and env["oversubscribed"] and env["loaded"]
    summary = json.loads((run / "summary.json").read_text())["host_load"]
    assert summary["load_avg_end"] == [LOAD, 8.0, 7.0] and summary["process_cpu_s"] > 0
    # One core for 2 threads: the process cannot have run more than that core's time (a little slack for the clock).
    assert 0 < summary["process_cores_busy"] <= 1.05 and summary["thread_share"] <= 0.55
    # the rates are marked at the end exactly where the record's own evidence says so (report and explain agree)
    reason = run_disturbance(read_run(run))
    assert marks == ([f"warning: the img/sec figures above are not the model's speed: {reason}; run where nothing "
                      "else runs (dlscale explain ranks the causes)"] if reason else [])
    _explain(tmp_path, "runs/b")
    explained = json.loads((tmp_path / "e.json").read_text())[0]
    host = [f for f in explained["findings"] if f["category"] == "host"]
    loaded = f"a loaded host: load average {LOAD:.2f} on {os.cpu_count()} cores before the run"
    assert {f["cause"] for f in host} == {loaded, "oversubscribed: 2 compute threads on 1 cores"}
    assert explained["findings"][0]["category"] in ("host", "measurement")  # a 3-iteration interval may be wider


def _explain(cwd, path):
    out = subprocess.run([sys.executable, "-m", "dlscale", "explain", path, "--json", "e.json"], cwd=cwd,
                         capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                                           "PYTHONPATH": SOURCES})
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_a_training_run_records_the_load_at_its_start_and_end(tmp_path):
    loadavg = tmp_path / "loadavg"
    loadavg.write_text(f"{LOAD:.2f} 2.00 1.00 1/100 99\n")
    settings = ["model.width=4", "data.image_size=8", "data.synthetic_size=32", "data.synthetic_val_size=8",
                "schedule.epochs=1", "schedule.warmup_epochs=0", "global_batch_size=16", "checkpoint.enabled=false"]
    out = _dlscale(["train", "--config", "cpu:synthetic", *(w for s in settings for w in ("--set", s)), "--name", "t",
                    "--output-dir", "runs"], tmp_path, loadavg)
    assert "warning: 1 rank(s) x 2 threads" in out.stdout and f"load average {LOAD:.2f}" in out.stdout
    run = tmp_path / "runs" / "t"
    assert json.loads((run / "env.json").read_text())["host_load"]["load_avg_start"] == [LOAD, 2.0, 1.0]
    record = json.loads((run / "summary.json").read_text())["host_load"]
    assert record["load_avg_end"] == [LOAD, 2.0, 1.0] and record["timed_s"] > 0 and record["process_cpu_s"] > 0
    reason = run_disturbance(read_run(run))
    marks = [line for line in out.stdout.splitlines() if line.startswith("warning: this run's img/s")]
    assert marks == ([f"warning: this run's img/s are not the model's speed: {reason}; run where nothing else runs "
                      "(dlscale explain ranks the causes)"] if reason else [])
