"""`--mlflow`: runs written by `dlscale train` (a process of its own, as a user runs it, in a pipe:
its plain progress lines) and `dlscale bench` on 2 ranks under torchrun (rank 0 alone tracks) read
back with MLflow's own client, against the run directory (config.json, metrics.jsonl,
summary.json); a tracker that fails is one warning and the run goes on; a resumed run logs into
the same MLflow run. (`dlscale scale --mlflow`: tests/smoke/test_cli_scale.py.)"""

import json
import re

import pytest
from commands import dlscale_process, run_process, torchrun

pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402 - after the skip

from dlscale.cli import main  # noqa: E402
from dlscale.errors import ConfigError  # noqa: E402
from dlscale.metrics import tracking  # noqa: E402

TRAIN = ["train", "--config", "cpu:synthetic", "--set", "model.width=8", "--set", "data.synthetic_size=64",
         "--set", "data.synthetic_val_size=32", "--set", "global_batch_size=16", "--set", "schedule.epochs=2",
         "--set", "schedule.warmup_epochs=0", "--set", "log_every=2", "--set", "checkpoint.enabled=false"]
BENCH = ["bench", "--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4",
         "--num-classes", "10", "--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "3"]


def _history(client, run_id, key):
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_train_and_bench_read_back_as_their_run_directories(tmp_path):
    out = dlscale_process(*TRAIN, "--output-dir", "runs", "--name", "t", "--mlflow", cwd=tmp_path,
                          env={"DLSCALE_PROGRESS_EVERY": "0"})  # a plain progress line at every update
    assert out.returncode == 0, out.stderr[-3000:]
    assert "warning" not in out.stderr and "INFO" not in out.stderr
    # In a pipe: beside each log step's line, a plain progress line with the time left.
    printed = out.stdout.splitlines()
    steps = [line for line in printed if re.fullmatch(r"epoch \d step \d+: loss .* img/s", line)]
    progress = [line for line in printed if line.startswith("progress: ")]
    assert len(progress) == len(steps) == 4 and "\x1b" not in out.stdout and "\r" not in out.stdout
    for step, line in zip(steps, progress, strict=True):
        epoch, number, figures = re.fullmatch(r"epoch (\d) step (\d+): (.*)", step).groups()
        times = r"\d:\d\d:\d\d elapsed, \d:\d\d:\d\d left in the epoch, \d:\d\d:\d\d in the run"
        assert re.fullmatch(rf"progress: epoch {epoch} \d/4 steps, step {number}/8, {re.escape(figures)}, {times}",
                            line), line
    run_dir = tmp_path / "runs" / "t"
    kept = json.loads((run_dir / "mlflow.json").read_text())
    assert f"MLflow: logged to run {kept['run_id']} of experiment 'dlscale' at {kept['tracking_uri']}" in out.stdout
    assert kept["tracking_uri"] == f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"  # beside the runs
    client = MlflowClient(kept["tracking_uri"])
    run = client.get_run(kept["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "t" and run.data.tags["dlscale.kind"] == "train"
    assert client.get_experiment(run.info.experiment_id).name == "dlscale"

    config = json.loads((run_dir / "config.json").read_text())
    assert run.data.params == tracking.flatten(config)  # the resolved settings, every one
    assert run.data.params["optim.lr"] == json.dumps(config["optim"]["lr"])

    # Every number of every metrics.jsonl record, at its step: the same history.
    expected: dict[str, list] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key, value in tracking.numbers(record, f"{record['record']}/", skip=("step",)).items():
            expected.setdefault(key, []).append((record["step"], value))
    assert len(expected["train/train_loss"]) == 4 and len(expected["epoch/val_top1_pct"]) == 2
    for key, history in expected.items():
        assert _history(client, run.info.run_id, key) == sorted(history), key
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run.data.metrics["summary/best_top1_pct"] == summary["best_top1_pct"]
    assert run.data.metrics["summary/steps"] == summary["steps"] == 8
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "env.json", "metrics.jsonl", "summary.json"} <= artifacts
    assert "checkpoints" not in artifacts and "tb" not in artifacts

    # bench on 2 ranks under torchrun into the same store: one MLflow run (rank 0's), every setting of
    # config.json as a parameter, each timed iteration at its index, the summary.
    out = run_process([*torchrun(2), "-m", "dlscale", *BENCH, "--pg-timeout", "60", "--output-dir", "runs",
                       "--name", "b", "--mlflow", "--mlflow-experiment", "bench"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Total img/sec on 2 CPU(s)" in out.stdout and "MLflow" not in out.stderr
    bench_dir = tmp_path / "runs" / "b"
    (run,) = client.search_runs([client.get_experiment_by_name("bench").experiment_id])
    assert json.loads((bench_dir / "mlflow.json").read_text())["run_id"] == run.info.run_id
    assert run.info.status == "FINISHED" and run.data.tags["dlscale.kind"] == "bench"
    config = json.loads((bench_dir / "config.json").read_text())
    assert run.data.params == tracking.flatten(config)
    summary = json.loads((bench_dir / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert _history(client, run.info.run_id, "iteration/total_img_per_s") == list(enumerate(summary["iterations"]))
    assert run.data.metrics["summary/img_per_sec_total_mean"] == summary["img_per_sec_total_mean"]
    assert run.data.metrics["summary/img_per_sec_total_ci95"] == summary["img_per_sec_total_ci95"]
    assert run.data.metrics["summary/world_size"] == 2
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"summary.json", "config.json"}


def test_a_failing_tracker_is_one_warning_and_training_goes_on(tmp_path, capsys, monkeypatch):
    def unreachable(uri):  # the store answered the check before the run, then went away
        raise ConnectionError("the tracking store stopped answering")

    monkeypatch.setattr(tracking, "_mlflow_client", unreachable)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main([*TRAIN, "--output-dir", str(tmp_path / "runs"), "--name", "t", "--mlflow", store]) == 0
    stderr = capsys.readouterr().err
    warnings = [line for line in stderr.splitlines() if "MLflow" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: MLflow tracking ({store}) failed"), stderr
    summary = json.loads((tmp_path / "runs" / "t" / "summary.json").read_text())
    assert summary["epochs_completed"] == 2 and not (tmp_path / "runs" / "t" / "mlflow.json").exists()


@pytest.mark.parametrize("store,message", [
    ("{file}/mlflow.db", "cannot create the MLflow store's folder"),  # a file where its folder should be
    ("{tmp}/text.db", "the SQLite store {tmp}/text.db cannot be written (file is not a database)"),
    ("{tmp}/fifo.db", "{tmp}/fifo.db is a FIFO, not a file"),
    (":::garbage", "--mlflow ':::garbage' is not a tracking URI"),
])
def test_a_store_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys, store, message):
    import os

    (tmp_path / "a-file").write_text("x")
    (tmp_path / "text.db").write_text("not a database, " * 100)
    os.mkfifo(tmp_path / "fifo.db")
    store = store.format(file=tmp_path / "a-file", tmp=tmp_path)
    assert main([*TRAIN, "--output-dir", str(tmp_path / "runs"), "--mlflow", store]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message.format(tmp=tmp_path) in err, err
    assert not (tmp_path / "runs").exists()


def test_a_tracking_uri_from_the_environment_that_is_none_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI ':::garbage' is not a tracking URI"):
        tracking.tracking_target("", output_dir=tmp_path, environ={"MLFLOW_TRACKING_URI": ":::garbage"})
    assert list(tmp_path.iterdir()) == []  # no folder made of it


def test_a_resumed_run_logs_into_the_same_mlflow_run(tmp_path):
    target = tracking.tracking_target("", output_dir=tmp_path)
    said = []
    for attempt in range(2):
        tracker = tracking.Tracker(target, run_name="r", run_dir=tmp_path / "r", say=said.append)
        tracker.params({"optim": {"lr": 0.1}, "attempt": attempt})
        tracker.metrics({"train/loss": 1.0 / (attempt + 1)}, step=10 * (attempt + 1))
        tracker.close("KILLED" if attempt == 0 else "FINISHED")
        assert not tracker.failed
    kept = json.loads((tmp_path / "r" / "mlflow.json").read_text())
    # each attempt says where it logged and how to look at it
    assert said == [f"MLflow: {how} run {kept['run_id']} of experiment 'dlscale' at {target.uri} (to see it: mlflow ui "
                    f"--backend-store-uri {target.uri})" for how in ("logged to", "logged on to")]
    client = MlflowClient(target.uri)
    run = client.get_run(kept["run_id"])
    assert run.info.status == "FINISHED" and len(client.search_runs([run.info.experiment_id])) == 1
    assert run.data.params == {"optim.lr": "0.1", "attempt": "0"}  # MLflow keeps a parameter's first value
    assert _history(client, run.info.run_id, "train/loss") == [(10, 1.0), (20, 0.5)]


def test_targets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a store given as a relative path is made (checked) there, not in the checkout
    assert tracking.tracking_target(None, output_dir=tmp_path) is None
    env = {"MLFLOW_TRACKING_URI": "http://tracker:5000", "MLFLOW_EXPERIMENT_NAME": "resnet"}
    assert tracking.tracking_target("", output_dir=tmp_path, environ=env) == \
        tracking.TrackingTarget("http://tracker:5000", "resnet")
    local = tracking.tracking_target("store.db", output_dir=tmp_path, experiment="x", environ={})
    assert local.uri.startswith("sqlite:///") and local.uri.endswith("/store.db") and local.experiment == "x"
    assert tracking.tracking_target("mlruns", output_dir=tmp_path, environ={}).uri.startswith("file:///")
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"pip install 'dlscale\[mlflow\]'"):
        tracking.tracking_target("", output_dir=tmp_path)


def test_predict_tracks_each_device_count(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["predict", "--gpus", "1,8,64", "--from-reference", "ngc:v100_16gb_amp", "--platform", "dgx1-v100"]
    assert main([*args, "--output-dir", "runs", "--name", "p", "--mlflow"]) == 0
    kept = json.loads((tmp_path / "runs" / "p" / "mlflow.json").read_text())
    client = MlflowClient(kept["tracking_uri"])
    run = client.get_run(kept["run_id"])
    points = json.loads((tmp_path / "runs" / "p" / "summary.json").read_text())["points"]
    for key in ("img_per_s_total", "efficiency", "step_ms"):  # the device count is the step
        assert _history(client, run.info.run_id, key) == [(p["devices"], p[key]) for p in points]
    assert run.data.params["model"] == "resnet50" and run.data.tags["dlscale.kind"] == "predict"
    assert {"summary.json", "predicted.png"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    capsys.readouterr()
    assert main([*args, "--no-run-dir", "--mlflow"]) == 2
    assert "--mlflow tracks a prediction's run directory" in capsys.readouterr().err
