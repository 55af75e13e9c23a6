"""Progress as a user sees it: `dlscale bench`, `dlscale train` and `dlscale loader` on a
pseudo-terminal: a bar with the time left, removed at the end, the final lines as they always were.
In a pipe: the bench with a progress line at every update is what ReFrame reads in
tests/smoke/test_reframe.py; a `dlscale train` process's step lines and plain progress lines are
checked in tests/smoke/test_cli_mlflow.py (its train run), the Records behind them in
tests/unit/test_progress.py; the loader's plain lines in tests/smoke/test_cli_loader.py."""

import re

from commands import DLSCALE, ENV
from terminal import frames, run_on_pty, screen

from dlscale.metrics.host_load import run_disturbance
from dlscale.rundir import read_run

BENCH = ["bench", "--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4",
         "--num-classes", "10", "--num-warmup-batches", "3", "--num-batches-per-iter", "2", "--num-iters", "3"]
TRAIN = ["train", "--config", "cpu:synthetic", "--set", "model.width=8", "--set", "data.synthetic_size=64",
         "--set", "data.synthetic_val_size=32", "--set", "global_batch_size=16", "--set", "schedule.epochs=2",
         "--set", "schedule.warmup_epochs=0", "--set", "log_every=2", "--set", "checkpoint.enabled=false"]
HOROVOD = [r"Model: resnet18", r"Batch size: 4", r"Number of CPUs: 1", r"Running warmup\.\.\.",
           r"Running benchmark\.\.\.", *(rf"Iter #{i}: \d+\.\d img/sec per CPU" for i in range(3)),
           r"Img/sec per CPU: \d+\.\d \+-\d+\.\d", r"Total img/sec on 1 CPU\(s\): \d+\.\d \+-\d+\.\d"]


def _pty(args, tmp_path, output=("--output-dir", "runs")):
    code, text = run_on_pty([*DLSCALE, *args, *output], env=ENV, cwd=tmp_path, timeout_s=180)
    assert code == 0, text[-3000:]
    return text


def _horovod_block(lines):
    start = lines.index("Model: resnet18")
    block = lines[start:start + len(HOROVOD)]
    assert all(re.fullmatch(pattern, line) for pattern, line in zip(HOROVOD, block, strict=True)), block
    return block


def test_bench_on_a_terminal_shows_a_bar_and_leaves_the_horovod_lines(tmp_path):
    text = _pty(BENCH, tmp_path)
    shown = screen(text)
    _horovod_block(shown)  # every line in its place, nothing between them
    assert not any("steps" in line for line in shown)  # the bar is gone at the end
    drawn = frames(text)
    assert any(re.search(r"^warm-up .*\d/3 steps, 0:00:\d\d elapsed", f) for f in drawn), drawn
    assert any(re.search(r"^benchmark .* 6/6 steps, \d+\.\d img/s per CPU, 0:00:\d\d elapsed", f) for f in drawn)
    # From the second timed iteration on, the rate since the first gives the time left.
    assert any(re.search(r"^benchmark .* 4/6 steps, \d+\.\d img/s per CPU, 0:00:\d\d elapsed, 0:00:\d\d left$", f)
               for f in drawn), drawn


def test_train_on_a_terminal(tmp_path):
    text = _pty([*TRAIN, "--name", "tty"], tmp_path)
    shown = screen(text)
    epoch_line = r"epoch \d: val top1 .* img/s \| time taken \d+\.\d s, elapsed \d+\.\d s"  # SC20's epoch time
    epochs = [line for line in shown if re.fullmatch(epoch_line, line)]
    # last, the best top-1, and after it the mark of rates a busy host made meaningless where the record says so
    marked = run_disturbance(read_run(tmp_path / "runs" / "tty")) is not None
    assert shown[-1].startswith("warning: this run's img/s are not the model's speed") == marked, shown[-2:]
    assert len(epochs) == 2 and shown[-1 - marked].startswith("best top-1 ")
    assert not any(re.match(r"epoch \d step \d+:", line) or "left in the" in line for line in shown)
    drawn = [f for f in frames(text) if "left in the epoch" in f]
    assert drawn and all(re.search(r"^epoch [01] .*\d/4 steps, step \d/8, loss \d+\.\d{4} lr [\d.]+ [\d.]+ img/s, "
                                   r"0:00:\d\d elapsed, 0:00:\d\d left in the epoch, 0:00:\d\d in the run$", f)
                         for f in drawn), drawn


def test_loader_on_a_terminal(tmp_path):
    text = _pty(["loader", "--dataset", "synthetic", "--workers", "0,1,2", "--workers-kind", "process", "--batch-size",
                 "4", "--batches", "4", "--warmup-batches", "1", "--image-size", "32"], tmp_path,
                output=("--out", "runs/loader"))
    shown = screen(text)
    assert [line.split()[0] for line in shown if re.match(r"^ +\d+ +\w+ +[\d.]+ +[\d.]+x ", line)] == ["0", "1", "2"]
    assert not any("settings" in line for line in shown)  # the bar is gone at the end
    drawn = frames(text)
    bar = r"^loader .* 2/3 settings, 1 worker process: [\d.]+ img/s, 0:00:\d\d elapsed, 0:00:\d\d left$"
    assert any(re.search(bar, f) for f in drawn), drawn
