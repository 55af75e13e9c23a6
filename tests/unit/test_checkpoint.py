"""Atomic checkpoints: round trip, rotation, crash safety, weights_only loading, RNG state."""

import contextlib
import logging
import os
import random
import re
import sys
import textwrap

import numpy as np
import pytest
import torch
from commands import run_process
from torch import nn

from dlscale.config import OptimConfig, ScheduleConfig
from dlscale.errors import ConfigError
from dlscale.train.checkpoint import CheckpointManager, capture_rng_state, restore_rng_state
from dlscale.train.optim import build_optimizer
from dlscale.train.schedule import LRSchedule


def assert_same(a, b, where="state"):
    """Recursive equality: tensors by value and dtype, containers key by key."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b and type(a) is type(b), where


@contextlib.contextmanager
def warns_in_one_line(caplog, match="."):
    """The block logs at least one warning, each a single line matching `match`."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dlscale.train.checkpoint"):
        yield
    lines = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert lines and all(re.search(match, line) and "\n" not in line for line in lines), lines


def training_state():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))
    model(torch.randn(2, 3, 6, 6))
    optimizer = build_optimizer(
        model, OptimConfig(exclude_bn_and_bias_from_weight_decay=True), global_batch=256
    )
    model(torch.randn(2, 3, 6, 6)).sum().backward()
    optimizer.step()  # momentum buffers exist now
    schedule = LRSchedule(ScheduleConfig(name="plateau"), peak_lr=0.1, steps_per_epoch=5)
    schedule.observe(2.5, epoch=0)
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "rng": capture_rng_state(),
        "samples_seen": 640,
        "torch_version": str(torch.__version__),  # TorchVersion itself is not weights_only-safe
        "config_hash": "ab12",
        "note": None,
    }


def test_round_trip_of_every_key(tmp_path):
    state = training_state()
    manager = CheckpointManager(tmp_path, keep_last=2)
    path = manager.save(state, epoch=3, step=42)
    assert path.name == "checkpoint-000000042.pt"
    loaded = manager.load_latest()
    assert loaded["epoch"] == 3 and loaded["step"] == 42
    assert_same({**state, "epoch": 3, "step": 42}, loaded)
    assert (tmp_path / "latest").read_text().strip() == path.name
    assert manager.latest_path() == path


def test_restored_rng_repeats_the_same_numbers(tmp_path):
    manager = CheckpointManager(tmp_path)
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.gauss(0, 1)  # leaves a cached gaussian in the python state
    manager.save({"rng": capture_rng_state()}, epoch=0, step=1)

    def draw():
        return (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), torch.rand(3))

    expected = draw()
    draw()  # move every generator on
    restore_rng_state(manager.load_latest()["rng"])
    again = draw()
    assert again[:3] == expected[:3]
    assert torch.equal(again[3], expected[3])


def test_keep_last_rotation(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in range(1, 6):
        manager.save({"w": torch.tensor(step)}, epoch=0, step=step)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["checkpoint-000000004.pt", "checkpoint-000000005.pt", "latest"]
    assert manager.load_latest()["w"].item() == 5


def test_truncated_newest_falls_back_with_a_warning(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, keep_last=3)
    manager.save({"w": torch.arange(1000)}, epoch=0, step=1)
    newest = manager.save({"w": torch.arange(1000) * 2}, epoch=0, step=2)
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    with warns_in_one_line(caplog, "unreadable"):
        loaded = manager.load_latest()
    assert loaded["step"] == 1


def test_garbage_newest_falls_back(tmp_path, caplog):
    manager = CheckpointManager(tmp_path)
    manager.save({"w": torch.ones(2)}, epoch=0, step=1)
    (tmp_path / "checkpoint-000000009.pt").write_bytes(b"not a checkpoint" * 10)
    with warns_in_one_line(caplog):
        assert manager.load_latest()["step"] == 1


CRASH_BETWEEN_WRITE_AND_RENAME = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    from dlscale.train import checkpoint
    manager = checkpoint.CheckpointManager(sys.argv[1])
    manager.save({"w": torch.zeros(3)}, epoch=0, step=1)
    # the next save dies (SIGKILL, no cleanup) right where it would rename the tmp file
    checkpoint.os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)
    manager.save({"w": torch.ones(3)}, epoch=0, step=2)
    """
)


def test_crash_between_tmp_write_and_rename_keeps_previous(tmp_path):
    result = run_process([sys.executable, "-c", CRASH_BETWEEN_WRITE_AND_RENAME, tmp_path])
    assert result.returncode == -9
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith("ckpt.tmp.")]
    assert len(leftovers) == 1  # the killed write, complete but never renamed
    manager = CheckpointManager(tmp_path)
    assert manager.latest_path().name == "checkpoint-000000001.pt"
    loaded = manager.load_latest()
    assert loaded["step"] == 1 and torch.equal(loaded["w"], torch.zeros(3))
    manager.save({"w": torch.full((3,), 2.0)}, epoch=0, step=2)  # the next save cleans up
    assert not any(p.name.startswith("ckpt.tmp.") for p in tmp_path.iterdir())


def test_leftover_tmp_from_another_process_is_ignored(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save({"w": torch.zeros(1)}, epoch=0, step=5)
    (tmp_path / "ckpt.tmp.99999").write_bytes(b"PK\x03\x04 half a zip")
    assert manager.load_latest()["step"] == 5
    assert manager.checkpoints() == [tmp_path / "checkpoint-000000005.pt"]


def test_failed_rename_leaves_previous_latest(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path)
    manager.save({"w": torch.zeros(1)}, epoch=0, step=1)

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("dlscale.train.checkpoint.os.replace", fail)
    with pytest.raises(OSError, match="disk full"):
        manager.save({"w": torch.ones(1)}, epoch=0, step=2)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-000000001.pt", "latest"]
    assert manager.load_latest()["step"] == 1


class Payload:
    """An arbitrary Python object: weights_only loading must refuse it."""


def test_arbitrary_python_object_is_refused(tmp_path):
    manager = CheckpointManager(tmp_path)
    torch.save({"step": 7, "obj": Payload()}, tmp_path / "checkpoint-000000007.pt")
    with pytest.raises(ConfigError, match="weights_only"):
        manager.load_latest()


def test_unloadable_state_is_rejected_at_save_time(tmp_path):
    manager = CheckpointManager(tmp_path)
    with pytest.raises(TypeError, match="weights_only"):
        manager.save({"rng": np.random.get_state()}, epoch=0, step=1)
    assert list(tmp_path.iterdir()) == []


def test_resume_comes_from_the_directory_not_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "3")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    manager = CheckpointManager(tmp_path / "fresh")
    assert manager.load_latest() is None and manager.latest_path() is None


def test_rotation_after_a_fall_back_keeps_the_new_checkpoint(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, keep_last=1)
    manager.save({"w": torch.zeros(1)}, epoch=0, step=10)
    (tmp_path / "checkpoint-000000020.pt").write_bytes(b"truncated")
    with warns_in_one_line(caplog):
        assert manager.load_latest()["step"] == 10
    manager.save({"w": torch.ones(1)}, epoch=0, step=15)  # the unreadable 20 is not counted
    assert [p.name for p in manager.checkpoints()] == [
        "checkpoint-000000015.pt",
        "checkpoint-000000020.pt",
    ]
    with warns_in_one_line(caplog):
        assert manager.load_latest()["step"] == 15
    manager.save({"w": torch.ones(1)}, epoch=0, step=20)  # replaces the unreadable file
    assert [p.name for p in manager.checkpoints()] == ["checkpoint-000000020.pt"]
    assert manager.load_latest()["step"] == 20


def test_only_unreadable_checkpoints_is_an_error_not_a_fresh_start(tmp_path, caplog):
    (tmp_path / "checkpoint-000000003.pt").write_bytes(b"truncated")
    with warns_in_one_line(caplog), pytest.raises(ConfigError, match="move them away"):
        CheckpointManager(tmp_path).load_latest()


def test_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match="keep_last"):
        CheckpointManager(tmp_path, keep_last=0)
    with pytest.raises(ValueError, match="step"):
        CheckpointManager(tmp_path).save({"step": 3}, epoch=0, step=4)


def test_files_are_written_by_the_calling_process_only(tmp_path):
    # no other process or thread: after save returns, every file is in place
    manager = CheckpointManager(tmp_path)
    manager.save({"w": torch.zeros(1)}, epoch=1, step=3)
    assert os.path.getsize(tmp_path / "checkpoint-000000003.pt") > 0
