"""The device decode in a process of its own (data.device_feed=process), on the CPU: the Pillow decoder in a
spawned process, shared memory in place of CUDA IPC. The batches must be the in-process stage's, bit for bit,
in order, with the same counts; errors and a dead process surface in the receiver in one line."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from dlscale.config import DataConfig
from dlscale.data import build_loaders
from dlscale.data.dataset import BadSampleError
from dlscale.data.device import DeviceFeed, DevicePrefetcher
from dlscale.data.device import process as decode_process
from dlscale.data.device.process import DecodeProcess
from dlscale.errors import ConfigError, DataError
from tests.unit.test_device_decode import SIZE, _bad_files, _scan_corrupt, _tree

pytestmark = pytest.mark.timeout(240)  # a spawned interpreter imports torch: seconds, not minutes


def _train_loader(root, workers=0, **options):
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=workers,
                     drop_last=False, **options)
    train, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)
    return train


def _batches(loader, epoch, **prefetcher):
    loader.sampler.set_epoch(epoch)
    feeder = DevicePrefetcher(loader, "cpu", **prefetcher)
    return list(feeder), feeder


def _same(a_batches, b_batches):
    assert len(a_batches) == len(b_batches)
    for a, b in zip(a_batches, b_batches, strict=True):
        assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) and a.skipped == b.skipped


def test_batches_decoded_in_a_process_of_their_own_are_the_in_process_batches_with_the_same_counts(tmp_path):
    loader = _train_loader(_tree(tmp_path, _bad_files()))  # refused, skipped and worker-decoded rows too
    process = DeviceFeed("cpu", feed="process", depth=1).decode_process(loader)
    assert process.ahead == 2  # at least two batches in the process
    try:
        for epoch in (0, 1):  # one process serves every epoch
            inline, feeder = _batches(loader, epoch)
            apart, _ = _batches(loader, epoch, process=process)
            _same(inline, apart)
        counts = feeder.stage.counts
        # over the two epochs: twice one epoch's counts (CMYK, grayscale, PNG x2 by the workers, scan.JPEG refused)
        assert (process.counts.workers, process.counts.refused, process.counts.device) == (8, 2, 2 * (22 - 5))
        assert (counts.workers, counts.refused, counts.device) == (4, 1, 22 - 5)
        pid = process.pids()[0]
        assert pid != os.getpid()
    finally:
        process.close()
    assert process.pids() == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_an_epoch_stopped_early_leaves_the_next_one_whole_and_in_order(tmp_path):
    loader = _train_loader(_tree(tmp_path), workers=2)  # persistent workers, batches in shared memory
    with contextlib.closing(DecodeProcess(loader.dataset.device_plan, "cpu", ahead=3)) as process:
        loader.sampler.set_epoch(0)
        batches = iter(DevicePrefetcher(loader, "cpu", process=process))
        next(batches)
        batches.close()  # a preemption after one step: up to three batches are still in the process
        inline, _ = _batches(loader, 1)
        apart, _ = _batches(loader, 1, process=process)  # the stale replies are dropped, not taken for these
        _same(inline, apart)


def test_a_slow_receiver_gets_every_batch_intact_and_each_slot_is_sent_once(tmp_path, monkeypatch):
    """The receiver copies a batch out of its slot only after a pause: were a request that reuses the slot sent
    before the copy, the decode process would have overwritten it by then."""
    loader = _train_loader(_tree(tmp_path))
    copy = DecodeProcess._copy

    def slowly(self, decoded):
        time.sleep(0.3)
        return copy(self, decoded)

    monkeypatch.setattr(DecodeProcess, "_copy", slowly)
    with contextlib.closing(DecodeProcess(loader.dataset.device_plan, "cpu", ahead=2)) as process:
        for epoch in (0, 1):
            inline, _ = _batches(loader, epoch)
            apart, _ = _batches(loader, epoch, process=process)
            _same(inline, apart)
        assert process.slots_received == 2  # one per slot of the ring, not one per batch


def test_the_signals_that_stop_a_run_are_left_to_the_training_process(tmp_path):
    """SLURM and torchrun signal every process of a job or group: the decode process must not die of them."""
    loader = _train_loader(_tree(tmp_path))
    with contextlib.closing(DecodeProcess(loader.dataset.device_plan, "cpu")) as process:
        inline, _ = _batches(loader, 0)
        _batches(loader, 1, process=process)  # started, and past its setup
        for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            os.kill(process.pids()[0], signum)
        time.sleep(1.0)
        assert process.pids()
        apart, _ = _batches(loader, 0, process=process)  # every batch of it asked after the signals
        _same(inline, apart)
    assert process.pids() == []  # closed all the same (killed if it would not end)


def test_a_decode_process_that_stops_answering_is_named_and_a_stopping_consumer_does_not_wait(tmp_path,
                                                                                           monkeypatch):
    loader = _train_loader(_tree(tmp_path))
    process = DecodeProcess(loader.dataset.device_plan, "cpu")
    try:
        loader.sampler.set_epoch(0)
        batches = iter(DevicePrefetcher(loader, "cpu", process=process))
        next(batches)
        # On the CPU a slot is handed over as a file descriptor that its sender must still pass on when the message
        # is read (a CUDA IPC handle needs no such answer): the process is stopped once every slot has arrived.
        every_slot = time.monotonic() + 120
        while process.slots_received < min(process.ahead, len(loader)) and time.monotonic() < every_slot:
            time.sleep(0.01)
        assert process.slots_received >= min(process.ahead, len(loader)), "the slots never all arrived"
        os.kill(process.pids()[0], signal.SIGSTOP)  # alive, but answering nothing
        started = time.monotonic()
        batches.close()  # a preemption: the thread waiting for the decode process ends with the epoch
        assert time.monotonic() - started < 30
        assert not [thread for thread in threading.enumerate() if thread.name == "dlscale-feed"]
        monkeypatch.setattr(decode_process, "REPLY_TIMEOUT_S", 2.0)
        with pytest.raises(DataError, match="sent no batch for 2 s"):
            _batches(loader, 1, process=process)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pids()[0], signal.SIGCONT)
        process.close()


def test_an_error_in_the_decode_process_is_raised_in_the_training_process_as_itself(tmp_path):
    loader = _train_loader(_tree(tmp_path, {"scan.JPEG": _scan_corrupt()}), on_bad_sample="error")
    with contextlib.closing(DecodeProcess(loader.dataset.device_plan, "cpu")) as process:
        with pytest.raises(BadSampleError) as raised:  # the refused file's CPU decode fails in the decode process
            _batches(loader, 0, process=process)
        assert "\n" not in str(raised.value) and "scan.JPEG: cannot decode" in str(raised.value)


def test_a_decode_process_that_dies_is_named_instead_of_waited_for(tmp_path):
    loader = _train_loader(_tree(tmp_path))
    with contextlib.closing(DecodeProcess(loader.dataset.device_plan, "cpu")) as process:
        _batches(loader, 0, process=process)
        pid = process.pids()[0]
        os.kill(pid, signal.SIGKILL)
        while process.pids():
            time.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(DataError, match=r"decode process .* ended with exit code -9"):
            _batches(loader, 1, process=process)
        assert time.monotonic() - started < 60  # noticed by polling, not by a timeout of minutes


def test_a_program_that_never_closes_its_decode_process_still_exits(tmp_path):
    """At exit multiprocessing terminates daemonic children and waits for them without a limit; the decode process
    ignores SIGTERM, so it must be killed before that."""
    _tree(tmp_path / "tree")
    script = textwrap.dedent(f"""
        from dlscale.config import DataConfig
        from dlscale.data import build_loaders
        from dlscale.data.device import DevicePrefetcher
        from dlscale.data.device.process import DecodeProcess

        if __name__ == "__main__":
            cfg = DataConfig(name="imagefolder", path={str(tmp_path / "tree")!r}, image_size=16, decode="gpu",
                             num_workers=0)
            train, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)
            train.sampler.set_epoch(0)
            keep = DecodeProcess(train.dataset.device_plan, "cpu")
            print(len(list(DevicePrefetcher(train, "cpu", process=keep))), "batches", flush=True)
    """)
    (tmp_path / "script.py").write_text(script)
    done = subprocess.run([sys.executable, str(tmp_path / "script.py")], capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4 batches"


def test_the_process_feed_is_checked_in_one_line_and_kept_only_on_the_device_path():
    assert DataConfig(decode="gpu", device_feed="process").device_feed == "process"
    assert DataConfig(decode="auto", device_feed="process").on_path("fast").device_feed == "thread"
    assert DataConfig(decode="auto", device_feed="process").on_path("gpu").device_feed == "process"
    with pytest.raises(ConfigError, match="data.device_feed=process .*data.decode=fast"):
        DataConfig(decode="fast", device_feed="process")


def test_only_a_training_loader_of_encoded_batches_gets_a_decode_process_and_it_does_not_pin_them(tmp_path):
    root = _tree(tmp_path)
    assert DeviceFeed("cpu", feed="thread").decode_process(_train_loader(root)) is None
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="fast", num_workers=0)
    fast, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)
    assert DeviceFeed("cpu", feed="process").decode_process(fast) is None
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=0)
    _, val, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)
    assert DeviceFeed("cpu", feed="process").decode_process(val) is None  # validation decodes in this process
    feed = DeviceFeed("cpu", feed="process", depth=5)
    process = feed.decode_process(_train_loader(root, device_feed="process"))
    assert process.ahead == 5 and process.pids() == [] and feed.pids() == []  # started by the first epoch
    assert not _train_loader(root, device_feed="process").pin_memory


def test_a_cuda_device_without_an_index_is_the_current_one_in_the_decode_process(tmp_path, monkeypatch):
    """torch.cuda.set_device in the decode process refuses "cuda"; a training process on device 1 means 1."""
    plan = _train_loader(_tree(tmp_path)).dataset.device_plan
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert DecodeProcess(plan, "cuda").device == torch.device("cuda", 1)
    assert DecodeProcess(plan, "cuda:0").device == torch.device("cuda", 0)
    assert DecodeProcess(plan, "cpu").device == torch.device("cpu")
