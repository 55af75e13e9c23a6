"""The progress display's choices and arithmetic, on a fake clock: which mode, when a plain line
comes, what time left it says, and the training run's time left in the epoch and in the run."""

import io

import pytest

from dlscale.metrics.progress import ProgressDisplay, format_eta, remaining_s, resolve_mode
from dlscale.metrics.records import Records, time_left
from dlscale.rundir import RunDir


class _Tty(io.StringIO):
    def isatty(self):
        return True


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_mode_follows_the_terminal_and_the_environment():
    assert resolve_mode({}, _Tty()) == "bar"
    assert resolve_mode({}, io.StringIO()) == "plain"  # a pipe, a CI log, a SLURM log file
    assert resolve_mode({"TERM": "dumb"}, _Tty()) == "plain"
    assert resolve_mode({"DLSCALE_PROGRESS": "off"}, _Tty()) == "off"
    assert resolve_mode({"DLSCALE_PROGRESS": "plain"}, _Tty()) == "plain"
    assert resolve_mode({"DLSCALE_PROGRESS": "bar"}, io.StringIO()) == "bar"
    assert resolve_mode({"DLSCALE_PROGRESS": "nonsense"}, io.StringIO()) == "plain"


def test_eta_format_and_remaining_time():
    assert format_eta(0) == "0:00:00"
    assert format_eta(3725.4) == "1:02:05"
    assert format_eta(90061) == "25:01:01"  # hours are not wrapped into days
    assert format_eta(None) == format_eta(float("nan")) == format_eta(float("inf")) == "?"
    assert remaining_s(30, 100, 7.0) == pytest.approx(10.0)
    assert remaining_s(30, 100, None) is None and remaining_s(30, 100, 0.0) is None
    assert remaining_s(120, 100, 5.0) == 0.0


def test_plain_lines_come_every_period_with_the_rate_since_the_first_update():
    clock, lines = FakeClock(), []
    display = ProgressDisplay(mode="plain", every_s=30, clock=clock, out=lines.append)
    display.start("benchmark", 100)
    clock.now += 20  # start-up (compilation, first batch): not in the rate
    display.update(10)
    clock.now += 5
    display.update(20, status="55.0 img/s")
    assert lines == []  # nothing before 30 s: a short command prints what it always printed
    clock.now += 5  # 30 s after the start; 20 steps in the 10 s since the first update: 2 steps/s
    display.update(30, status="55.0 img/s")
    assert lines == ["progress: benchmark 30/100 steps, 55.0 img/s, 0:00:30 elapsed, 0:00:35 left"]
    clock.now += 29
    display.update(40)
    assert len(lines) == 1
    clock.now += 1
    display.update(50, left="0:10:00 left in the run")  # the caller's own estimate replaces the rate's
    assert lines[-1] == "progress: benchmark 50/100 steps, 55.0 img/s, 0:01:00 elapsed, 0:10:00 left in the run"


def test_disabled_and_off_print_nothing():
    clock, lines = FakeClock(), []
    for display in (ProgressDisplay(enabled=False, mode="plain", every_s=0, clock=clock, out=lines.append),
                    ProgressDisplay(mode="off", every_s=0, clock=clock, out=lines.append)):
        display.start("epoch 0", 10)
        clock.now += 100
        display.update(5)
        display.close()
        assert not display.active
    assert lines == []


def test_training_time_left():
    # 40 of 100 steps of epoch 1, step 140 of 300; 0.5 s per step in the last window; 0.6 s of wall
    # time per step since the first log step (evaluations included)
    epoch, run = time_left(iteration=40, steps_per_epoch=100, step=140, total_steps=300, step_s=0.5,
                           wall_s_per_step=0.6)
    assert epoch == pytest.approx(30.0) and run == pytest.approx(96.0)
    epoch, run = time_left(iteration=40, steps_per_epoch=100, step=140, total_steps=300, step_s=0.5,
                           wall_s_per_step=None)
    assert run == pytest.approx(80.0)  # before a second log step: the window's step time
    assert time_left(iteration=10, steps_per_epoch=10, step=10, total_steps=None, step_s=1.0,
                     wall_s_per_step=None) == (0.0, None)


TRAIN = {"epoch": 0, "step": 20, "iteration": 20, "train_loss": 2.5, "lr": 0.1, "throughput_img_per_s": 400.0,
         "compute_img_per_s": 500.0, "data_time_ms": 50.0, "step_time_ms": 250.0, "grad_scale": 1.0}


def test_records_keep_the_step_line_and_add_the_time_left(tmp_path, capsys):
    lines = []
    display = ProgressDisplay(mode="plain", every_s=0, out=lines.append)
    records = Records(RunDir.create(tmp_path, "run"), enabled=True, tensorboard=False, steps_per_epoch=50,
                      epochs=4, display=display)
    records.train(TRAIN)
    records.close()
    assert capsys.readouterr().out == "epoch 0 step 20: loss 2.5000 lr 0.10000 400.0 img/s\n"
    assert lines == ["progress: epoch 0 20/50 steps, step 20/200, loss 2.5000 lr 0.10000 400.0 img/s, "
                     "0:00:00 elapsed, 0:00:08 left in the epoch, 0:00:45 in the run"]
