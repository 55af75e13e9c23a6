"""Timed windows without host synchronisation inside a step: DeviceTimer with stand-in CUDA events,
the comm meter, and the train loop's log windows (closed by a device sync before the clock is read)."""

import json

import pytest
import torch

import dlscale.train.loop as loop
from dlscale.config import load_config
from dlscale.distributed import DistEnv
from dlscale.metrics.timing import DeviceTimer
from dlscale.strategies.comm import CommMeter


class FakeEvent:
    """A CUDA event stand-in: record() takes the next time of a shared device clock (ms)."""

    now_ms = 0.0
    synchronized = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at = None

    def record(self):
        self.at = FakeEvent.now_ms

    def synchronize(self):
        FakeEvent.synchronized += 1

    def elapsed_time(self, end):
        return end.at - self.at


@pytest.fixture
def no_host_sync(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch.cuda.synchronize inside a timed step")

    monkeypatch.setattr(torch.cuda, "synchronize", refuse)
    FakeEvent.now_ms, FakeEvent.synchronized = 0.0, 0


def test_cuda_intervals_are_event_pairs_read_once(no_host_sync):
    timer = DeviceTimer(torch.device("cuda"), event_factory=FakeEvent)
    for start, stop in ((1.0, 4.0), (10.0, 10.5), (20.0, 22.0)):
        FakeEvent.now_ms = start
        timer.start()
        FakeEvent.now_ms = stop
        timer.stop()
    assert FakeEvent.synchronized == 0 and timer.count == 3  # nothing waited for while timing
    assert timer.total_s() == pytest.approx(0.0055)  # 3 + 0.5 + 2 ms
    assert FakeEvent.synchronized == 1  # one wait, for the last event, when read
    timer.reset()
    assert timer.total_s() == 0.0


def test_cpu_intervals_use_the_host_clock():
    ticks = iter([0.0, 0.25, 1.0, 1.5])
    timer = DeviceTimer(torch.device("cpu"), clock=lambda: next(ticks))
    for _ in range(2):
        timer.start()
        timer.stop()
    assert timer.total_s() == 0.75
    with pytest.raises(RuntimeError, match="without start"):
        timer.stop()


def test_comm_meter_times_without_synchronising(no_host_sync):
    meter = CommMeter(timer=DeviceTimer(torch.device("cuda"), event_factory=FakeEvent))
    for step in range(4):
        FakeEvent.now_ms = 10.0 * step

        def collective():
            FakeEvent.now_ms += 2.0  # the collective's 2 ms on the stream

        meter.timed(collective)
        meter.steps += 1
    stats = meter.stats(wire_bytes=400, basis="test")
    assert stats["comm_time_ms_per_step"] == pytest.approx(2.0) and stats["comm_bytes_per_step"] == 100


def test_every_log_window_is_closed_by_a_device_sync_before_its_clock(tmp_path, monkeypatch):
    """On a GPU the host runs ahead of queued work: a window's clock read before the device
    finished its steps misses that work. Here the queued work of each window takes 100 s, which
    the host sees only by synchronising: every window's step time must include it."""
    now = [0.0]

    def sync():
        now[0] += 100.0  # waiting for the window's queued device work

    def clock():
        now[0] += 0.001
        return now[0]

    monkeypatch.setattr(loop, "device_synchronizer", lambda device: sync)
    monkeypatch.setattr(loop, "clock", clock)
    cfg, _ = load_config("cpu:synthetic", ["schedule.epochs=1", "schedule.warmup_epochs=0", "max_steps_per_epoch=6",
                                           "log_every=2", "model.width=8"])
    loop.fit(cfg, DistEnv(), run_name="w", output_dir=tmp_path)
    lines = (tmp_path / "w" / "metrics.jsonl").read_text().splitlines()
    windows = [json.loads(line) for line in lines if '"train"' in line]
    assert len(windows) == 3
    for window in windows:  # 2 steps per window: at least 100 s / 2 each
        assert window["step_time_ms"] >= 50_000
