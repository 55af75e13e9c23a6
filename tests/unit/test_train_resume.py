"""A run stopped by a preemption signal mid-epoch and resumed ends where the uninterrupted run ends."""

import signal

import pytest
import torch

import dlscale.train.loop as loop
from dlscale.config import load_config
from dlscale.distributed import DistEnv
from dlscale.train.checkpoint import CheckpointManager

OVERRIDES = ["schedule.epochs=2", "max_steps_per_epoch=6", "log_every=2", "model.width=8"]


def _final_weights(run_dir):
    state = CheckpointManager(run_dir / "checkpoints").load_latest()
    return state["model"], state["progress"]


def _tensorboard_steps(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"), size_guidance={SCALARS: 0})
    events.Reload()
    return {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@pytest.mark.slow
def test_preempted_and_resumed_equals_uninterrupted(tmp_path, signal_at_step):
    cfg, _ = load_config("cpu:digits", OVERRIDES)
    full = loop.fit(cfg, DistEnv(), run_name="full", output_dir=tmp_path)
    assert not full["preempted"] and full["steps"] == 12

    disarm = signal_at_step(8)  # in the middle of epoch 1 (6 steps per epoch)
    cut = loop.fit(cfg, DistEnv(), run_name="cut", output_dir=tmp_path)
    disarm()
    assert cut["preempted"] and cut["signal"] == "SIGUSR1" and cut["steps"] == 8
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # handlers restored after the run
    resumed = loop.fit(cfg, DistEnv(), run_name="cut", output_dir=tmp_path)
    assert not resumed["preempted"] and resumed["steps"] == 12 and resumed["epochs_completed"] == 2

    expected, progress = _final_weights(tmp_path / "full")
    actual, resumed_progress = _final_weights(tmp_path / "cut")
    for key, tensor in expected.items():
        assert torch.equal(tensor, actual[key]), key
    assert [h["val_top1_pct"] for h in progress["history"]] == \
        [h["val_top1_pct"] for h in resumed_progress["history"]]

    for tag, steps in _tensorboard_steps(tmp_path / "cut").items():
        assert steps == sorted(set(steps)), tag  # one strictly increasing sequence per tag
    assert {"loss/train", "loss/val", "top1/val", "top5/val", "lr", "throughput/train"} <= \
        set(_tensorboard_steps(tmp_path / "cut"))


def test_finished_run_is_not_trained_again_and_resume_none_refuses(tmp_path):
    cfg, _ = load_config("cpu:synthetic", ["schedule.epochs=1", "schedule.warmup_epochs=0", "max_steps_per_epoch=2",
                                           "model.width=8"])
    first = loop.fit(cfg, DistEnv(), run_name="s", output_dir=tmp_path)
    again = loop.fit(cfg, DistEnv(), run_name="s", output_dir=tmp_path)
    assert again["steps"] == first["steps"] == 2 and again["already_finished"].endswith("(or remove the directory)")
    from dlscale.errors import ConfigError

    with pytest.raises(ConfigError, match="--resume none: .* is a finished run"):
        loop.fit(cfg, DistEnv(), run_name="s", output_dir=tmp_path, resume="none")
    (tmp_path / "s" / "summary.json").unlink()  # stopped after its last checkpoint, before its summary
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        loop.fit(cfg, DistEnv(), run_name="s", output_dir=tmp_path, resume="none")


def test_a_run_stopped_after_reaching_its_target_keeps_its_time_to_solution(tmp_path):
    """Its last checkpoint says the target was reached but no summary was written: run again, it trains no
    further and writes the summary with the time to solution the checkpoint holds."""
    cfg, _ = load_config("cpu:synthetic", ["schedule.epochs=3", "schedule.warmup_epochs=0", "max_steps_per_epoch=2",
                                           "model.width=8", "target_accuracy=0.01"])  # 10 classes: reached at once
    first = loop.fit(cfg, DistEnv(), run_name="t", output_dir=tmp_path)
    assert first["epochs_completed"] == 1 and first["time_to_target_s"] is not None
    (tmp_path / "t" / "summary.json").unlink()
    again = loop.fit(cfg, DistEnv(), run_name="t", output_dir=tmp_path)
    assert "already_finished" not in again  # no summary to say so: resumed from the checkpoint
    assert (again["steps"], again["epochs_completed"]) == (first["steps"], 1)
    assert again["time_to_target_s"] == first["time_to_target_s"]


def test_a_finished_run_asked_for_more_epochs_trains_them_where_its_schedule_allows(tmp_path):
    base = ["schedule.name=constant", "schedule.warmup_epochs=0", "max_steps_per_epoch=2", "model.width=8"]
    cfg, _ = load_config("cpu:synthetic", [*base, "schedule.epochs=1"])
    loop.fit(cfg, DistEnv(), run_name="c", output_dir=tmp_path)
    assert "--epochs N above 1" in loop.fit(cfg, DistEnv(), run_name="c", output_dir=tmp_path)["already_finished"]
    longer, _ = load_config("cpu:synthetic", [*base, "schedule.epochs=2"])
    more = loop.fit(longer, DistEnv(), run_name="c", output_dir=tmp_path)
    assert "already_finished" not in more and (more["epochs_completed"], more["steps"]) == (2, 4)


def test_input_bound_training_says_so(tmp_path, monkeypatch, capsys):
    """A loader slowed to 40 ms per batch against a step of a few ms: the run names the fix."""
    import time

    original = loop.DeviceFeed

    class SlowBatches(original):
        def batches(self, loader):
            for batch in super().batches(loader):
                time.sleep(0.04)
                yield batch

    monkeypatch.setattr(loop, "DeviceFeed", SlowBatches)
    cfg, _ = load_config("cpu:synthetic", ["schedule.epochs=1", "schedule.warmup_epochs=0", "max_steps_per_epoch=6",
                                          "log_every=2", "model.width=8"])
    loop.fit(cfg, DistEnv(), run_name="slow", output_dir=tmp_path)
    out = capsys.readouterr().out
    assert out.count("training is input-bound") == 1  # once per epoch
    assert "more loader workers (data.num_workers=" in out


def test_a_run_builds_one_device_feed_and_trains_and_evaluates_through_it(tmp_path, monkeypatch):
    made, fed = [], []

    class Counting(loop.DeviceFeed):
        def __init__(self, *args, **kwargs):
            made.append(self)
            super().__init__(*args, **kwargs)

        def batches(self, loader):
            fed.append(loader)
            return super().batches(loader)

    monkeypatch.setattr(loop, "DeviceFeed", Counting)
    cfg, _ = load_config("cpu:synthetic", ["schedule.epochs=2", "schedule.warmup_epochs=0", "max_steps_per_epoch=2",
                                          "model.width=8"])
    loop.fit(cfg, DistEnv(), run_name="one", output_dir=tmp_path)
    assert len(made) == 1  # built once per run
    assert len(fed) == 4 and fed[0] is fed[2] and fed[1] is fed[3] and fed[0] is not fed[1]  # train, val, twice


@pytest.mark.slow
def test_an_epoch_all_of_whose_steps_ran_before_a_resume_has_no_rate_and_its_run_is_read(tmp_path, signal_at_step):
    from dlscale import cli
    from dlscale.rundir import read_run

    cfg, _ = load_config("cpu:digits", OVERRIDES)
    disarm = signal_at_step(6)  # the last step of epoch 0 (6 steps per epoch): stopped before its evaluation
    cut = loop.fit(cfg, DistEnv(), run_name="cut", output_dir=tmp_path)
    disarm()
    assert cut["preempted"] and cut["steps"] == 6 and cut["epochs_completed"] == 0
    resumed = loop.fit(cfg, DistEnv(), run_name="cut", output_dir=tmp_path)
    history = resumed["history"]
    assert history[0]["throughput_img_per_s"] is None  # this attempt trained none of epoch 0: no rate, not 0 img/s
    assert history[1]["throughput_img_per_s"] > 0 and resumed["total_ips"] == history[1]["throughput_img_per_s"]
    read_run(tmp_path / "cut")  # the reader takes it (a rate of 0.0 was refused, and report and explain with it)
    assert cli.main(["report", str(tmp_path / "cut"), "-o", str(tmp_path / "report")]) == 0
    assert cli.main(["explain", str(tmp_path / "cut"), "--reference", "none"]) == 0
