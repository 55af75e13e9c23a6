"""Nothing lost, nothing mixed, one line: wrong command lines, one run per run directory, settings
changed on resume, checkpoints dlscale did not write, unreadable validation files, a full disk."""

import errno
import json
import os
import pickle
import time

import numpy as np
import pytest
from commands import DLSCALE, HANG_S, dlscale_here, start_process
from PIL import Image

from dlscale.cli import main

TINY = ["--config", "cpu:synthetic", "--set", "model.width=8", "--set", "max_steps_per_epoch=4", "--set",
        "schedule.epochs=1", "--set", "schedule.warmup_epochs=0", "--set", "log_every=2"]


def _one_line(capsys, argv, code=2):
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("args,message", [
    (["--set", "log_every=0"], "log_every=0 must be >= 1"),
    (["--set", "checkpoint.every_epochs=0"], "checkpoint.every_epochs=0 must be >= 1"),
    (["--set", "checkpoint.every_steps=-1"], "checkpoint.every_steps=-1 must be >= 0"),
    (["--set", "max_steps_per_epoch=0"], "max_steps_per_epoch=0 must be >= 1"),
    (["--pg-timeout", "0"], "argument --pg-timeout: '0': give a number above 0"),
    (["--pg-timeout", "-5"], "argument --pg-timeout: '-5': give a number above 0"),
    (["--pg-timeout", "inf"], "argument --pg-timeout: 'inf': give a number above 0"),
    (["--set", "pg_timeout_s=.inf"], "pg_timeout_s=inf must be a finite number"),
    (["--set", "seed=-1"], "seed=-1 must be 0 to 4,294,967,295"),
    (["--set", "model.width=100000"], "model.width=100000 must be 1 to 1024 channels"),
    (["--set", "data.num_workers=4294967296"], "data.num_workers=4294967296; use 0 to 1,024"),
    (["--target-accuracy", "1.5"], "argument --target-accuracy: '1.5': give a number above 0 and at most 1"),
    (["--target-accuracy", "nan"], "argument --target-accuracy: 'nan': give a number above 0 and at most 1"),
    (["--set", "global_batch_size=null", "--set", "batch_size=1"], "BatchNorm needs at least 2"),
    (["--output-dir", "/proc/not-here"], "cannot create the run directory"),
])
def test_nonsense_is_refused_in_one_line(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    err = _one_line(capsys, ["train", *TINY, *args])
    assert message in err


def test_a_report_of_a_summary_that_is_not_utf8_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_bytes(b'{"kind": "bench", "model": "\xff\xfe"}')
    err = _one_line(capsys, ["report", str(run), "-o", str(tmp_path / "report")])
    assert "not UTF-8" in err


def test_scale_checks_the_swept_commands_values_before_any_point(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _one_line(capsys, ["scale", "--nproc", "1", "--", "bench", "--model", "resnet18", "--batch-size", "0"])
    assert "argument --batch-size: '0': give whole numbers from 1" in err and not (tmp_path / "runs").exists()
    err = _one_line(capsys, ["scale", "--nproc", "1", "--", "train", "--config", "cpu:digits", "--set", "log_every=0"])
    assert "log_every=0" in err and not (tmp_path / "runs").exists()


def test_two_runs_of_one_name_one_refuses_and_nothing_is_written_twice(tmp_path):
    command = ["train", "--config", "cpu:synthetic", "--set", "model.width=8", "--set", "schedule.epochs=2",
               "--set", "log_every=2", "--output-dir", tmp_path, "--name", "one"]
    first = start_process([*DLSCALE, *command])  # a run of its own, in another process
    holder = tmp_path / "one" / ".lock.holder"
    deadline = time.monotonic() + HANG_S
    while not holder.is_file():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-2000:]
        time.sleep(0.1)
    second = dlscale_here(*command)
    assert first.wait(timeout=HANG_S) == 0
    assert second.returncode == 2 and len(second.stderr.strip().splitlines()) == 1, second.stderr
    assert "is in use by `dlscale train" in second.stderr and f"pid {first.pid}" in second.stderr
    records = [json.loads(line) for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    steps = [(r["record"], r["step"]) for r in records]
    assert len(steps) == len(set(steps))  # every record once
    again = dlscale_here(*command)  # the lock died with its run
    assert again.returncode == 0, again.stderr[-2000:]


@pytest.fixture
def finished(tmp_path, monkeypatch):
    """A one-epoch run named r in tmp_path/runs, its checkpoints on disk."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TINY, "--name", "r"]) == 0
    return tmp_path / "runs" / "r"


@pytest.mark.parametrize("change,refused", [
    (["--set", "precision=amp_bf16"], "precision 'fp32' -> 'amp_bf16'"),
    (["--set", "optim.weight_decay=0.001"], "optim.weight_decay 0.0005 -> 0.001"),
    (["--set", "optim.momentum=0.5"], "optim.momentum 0.9 -> 0.5"),
    (["--set", "data.image_size=24"], "data.image_size 16 -> 24"),
    (["--set", "schedule.epochs=3"], "schedule.epochs 1 -> 3"),  # cosine decays to the last epoch
])
def test_settings_that_change_what_is_trained_are_refused_on_resume(finished, capsys, change, refused):
    capsys.readouterr()
    err = _one_line(capsys, ["train", *TINY, "--name", "r", *change])
    assert refused in err and "--name" in err
    config = json.loads((finished / "config.json").read_text())
    assert config["precision"] == "fp32" and config["optim"]["weight_decay"] == 0.0005  # never claims a new value


def test_settings_that_do_not_change_what_is_trained_are_recorded_with_their_step(finished, capsys):
    before = (finished / "config.json").read_text()
    assert main(["train", *TINY, "--name", "r", "--set", "log_every=1", "--set", "checkpoint.keep_last=5"]) == 0
    assert "is a finished run" in capsys.readouterr().out  # finished: nothing written, nothing recorded
    assert (finished / "config.json").read_text() == before
    (finished / "summary.json").unlink()  # stopped after its last checkpoint, before its summary: resumed
    assert main(["train", *TINY, "--name", "r", "--set", "log_every=1", "--set", "checkpoint.keep_last=5"]) == 0
    config = json.loads((finished / "config.json").read_text())
    assert config["log_every"] == 1 and config["checkpoint"]["keep_last"] == 5
    assert config["changes"] == [{"step": 4, "changed": {"checkpoint.keep_last": [2, 5], "log_every": [2, 1]}}]


def test_world_size_is_a_setting_of_the_run():
    from dlscale.errors import ConfigError
    from dlscale.train.resume_check import check_resume

    with pytest.raises(ConfigError, match="world_size 2 -> 4"):
        check_resume({"world_size": 2, "log_every": 5}, {"world_size": 4, "log_every": 5}, run="runs/x")
    assert check_resume({"world_size": 2, "log_every": 5}, {"world_size": 2, "log_every": 9}, run="x") == {
        "log_every": (5, 9)}


def test_a_checkpoint_from_before_a_setting_existed_resumes_with_its_default():
    from dlscale.errors import ConfigError
    from dlscale.train.resume_check import check_resume

    # a checkpoint from before data.device_decode_share ran with the whole decode on its path's side
    before = {"data": {"decode": "gpu"}}
    assert check_resume(before, {"data": {"decode": "gpu", "device_decode_share": 1.0}}, run="x") == {}
    with pytest.raises(ConfigError, match=r"data.device_decode_share 1.0 -> 0.5"):
        check_resume(before, {"data": {"decode": "gpu", "device_decode_share": 0.5}}, run="x")


def test_a_plain_pickle_checkpoint_is_refused_and_left_in_place(finished, capsys):
    latest = sorted((finished / "checkpoints").glob("checkpoint-*.pt"))[-1]
    hostile = pickle.dumps({"step": 99, "model": "anything"}, protocol=4)
    latest.write_bytes(hostile)
    (finished / "summary.json").unlink()  # stopped before its summary: the run resumes from its checkpoints
    capsys.readouterr()
    err = _one_line(capsys, ["train", *TINY, "--name", "r"])
    assert f"checkpoints/{latest.name}" in err and "plain pickle" in err
    err = _one_line(capsys, ["train", *TINY, "--name", "other", "--resume", str(latest)])
    assert f"checkpoints/{latest.name}" in err and "plain pickle" in err
    assert latest.read_bytes() == hostile  # never overwritten or deleted


def test_a_full_disk_names_the_directory_and_the_intact_checkpoint(tmp_path, monkeypatch, capsys):
    from dlscale.train.checkpoint import CheckpointManager

    monkeypatch.chdir(tmp_path)
    real_save = CheckpointManager.save
    calls = []

    def fills_up(self, state, *, epoch, step):
        calls.append(step)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(self, state, epoch=epoch, step=step)

    monkeypatch.setattr(CheckpointManager, "save", fills_up)
    err = _one_line(capsys, ["train", *TINY, "--set", "checkpoint.every_steps=2", "--name", "full"])
    assert "No space left on device" in err and "checkpoint-000000002.pt, is intact" in err
    assert "run the same command to resume" in err


def test_unreadable_validation_files_are_counted_once_and_left_out(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    for split, count in (("train", 8), ("val", 33)):
        for label in ("a", "b"):
            (data / split / label).mkdir(parents=True)
            for i in range(count):
                pixels = np.random.default_rng(i).integers(0, 256, (20, 24, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(data / split / label / f"{i}.JPEG")
    for i in range(3):  # 66 validation files, 60 readable
        (data / "val" / "a" / f"{i}.JPEG").write_bytes(b"not a jpeg")
        (data / "val" / "b" / f"{i}.JPEG").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", "cpu:digits", "--set", "data.name=imagefolder", "--set", "data.image_size=16",
                 "--set", "global_batch_size=8", "--set", "model.width=8", "--set", "schedule.epochs=1",
                 "--set", "schedule.warmup_epochs=0", "--data", str(data), "--name", "v"]) == 0
    epoch = [json.loads(line) for line in (tmp_path / "runs" / "v" / "metrics.jsonl").read_text().splitlines()
             if '"epoch"' in line and '"val_count"' in line][-1]
    assert (epoch["val_count"], epoch["val_skipped"]) == (60, 6)
    assert "validation: 6 unreadable file(s) left out" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["config", "--list"], ["models"], ["train", "--help"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path, argv):
    """`dlscale config --list | head -1`: the reader closes the pipe; the command stops as one killed by SIGPIPE
    would, with no traceback and no 'Exception ignored' at exit."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    with os.fdopen(write_end, "w") as pipe:
        process = start_process([*DLSCALE, *argv], tmp_path, stdout=pipe)
    _, err = process.communicate(timeout=HANG_S)
    assert process.returncode == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err
