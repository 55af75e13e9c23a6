"""Per-rank lead times and the straggler verdict (metrics/ranks.py); process read counters that follow
processes which come and go (metrics/proc_io.py); log windows that add up to every read (train/windows.py)."""

import os
import subprocess
import sys
import time

import pytest
import torch
from commands import start_process
from torch import nn

from dlscale.data.counting import CountingSource, ReadMeter
from dlscale.metrics.proc_io import ProcessReads
from dlscale.metrics.ranks import STRAGGLER_EXCESS, describe, lead_times, slowest, stragglers, too_few
from dlscale.strategies.base import Strategy
from dlscale.train.windows import LogWindows


def test_slowest_is_measured_against_the_median_of_the_other_ranks():
    assert slowest([10.0, 20.0]) == (1, pytest.approx(1.0))
    assert slowest([10.0, 12.0, 30.0, 11.0]) == (2, pytest.approx(30.0 / 11.0 - 1))
    assert slowest([5.0]) == (0, 0.0)
    assert lead_times([[1.0, 2.0]], [[10.0, 30.0]]) == [[11.0, 32.0]]


def test_a_rank_slower_in_every_window_is_a_straggler():
    verdict = stragglers([[10.0, 21.0]] * 9 + [[10.0, 10.5]])
    assert verdict["straggler"] == 1 and verdict["pattern"] == "always"
    assert verdict["slowest_windows"] == 10 and verdict["median_excess_pct"] == pytest.approx(110.0)
    assert describe(verdict).startswith("straggler: rank 1 (slowest in 10 of 10 windows")


def test_noise_names_no_straggler_and_a_few_slow_windows_are_sometimes():
    even = stragglers([[10.0, 10.9], [10.5, 10.0], [10.0, 10.2], [11.0, 10.0]])
    assert even["straggler"] is None and even["pattern"] == "even"
    assert describe(even).startswith("ranks even: no rank 25% slower")
    slow = 10.0 * (1 + 2 * STRAGGLER_EXCESS)
    sometimes = stragglers([[10.0, slow]] * 3 + [[10.0, 10.1]] * 7)
    assert sometimes["straggler"] is None and sometimes["pattern"] == "sometimes"
    assert sometimes["slower_windows"] == 3 and sometimes["slower_ranks"] == [1]
    assert stragglers([[10.0]] * 3)["pattern"] == "one rank" and describe(stragglers([[10.0]])) is None


def test_the_line_never_calls_ranks_even_where_one_was_slower():
    # the bench that printed "ranks even on the whole ... rank 1 slowest in 3 of 3 iterations, median +33%"
    few = stragglers([[10.0, 13.3]] * 3)
    assert few["straggler"] is None and too_few(few)
    line = describe(few, "iterations")
    assert line.startswith("rank 1 slower: slowest in 3 of 3 iterations, median +33%") and "even" not in line
    assert "3 iterations are too few to call it a straggler (8 needed)" in line
    once = stragglers([[10.0, 10.5]] * 9 + [[10.0, 14.0]])  # one window of ten with a rank 40% slower
    assert once["pattern"] == "even" and describe(once) == "ranks even: a rank 25% slower than the others in 1 of " \
                                                           "10 windows only"
    some = describe(stragglers([[10.0, 15.0]] * 3 + [[10.0, 10.1]] * 7))
    assert some.startswith("no straggler: rank(s) 1 25% slower than the others in 3 of 10 windows only")


def _reader(path):
    """A child that reads `path` once when told to on stdin, then waits to be told to exit."""
    code = ("import sys; sys.stdin.readline(); open(sys.argv[1], 'rb').read(); print('read', flush=True); "
            "sys.stdin.readline()")
    return start_process([sys.executable, "-c", code, path], stdin=subprocess.PIPE, stderr=None)


def _tell(child, word):
    child.stdin.write(word + "\n")
    child.stdin.flush()


def test_process_reads_count_known_processes_from_the_first_sample_and_new_ones_from_zero(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(3_000_000))
    first, second = _reader(data), _reader(data)
    try:
        reads = ProcessReads()
        assert reads.sample([first.pid])["rchar"] == 0.0  # the baseline
        _tell(first, "go")
        assert first.stdout.readline() == "read\n"
        delta = reads.sample([first.pid])
        assert 3_000_000 <= delta["rchar"] < 3_200_000  # the file, and little else since the baseline
        _tell(second, "go")
        assert second.stdout.readline() == "read\n"
        # Seen for the first time: everything it read since it started (Python's start-up included).
        assert reads.sample([first.pid, second.pid])["rchar"] >= 3_000_000
        for child in (first, second):
            _tell(child, "exit")
            child.wait(timeout=30)
        assert reads.sample([first.pid, second.pid])["rchar"] == 0.0  # gone: dropped, never negative
    finally:
        for child in (first, second):
            child.kill()


class _FileSource:
    """Samples that are files of known sizes (CountingSource counts the files a source with path() opens)."""

    def __init__(self, folder):
        self.files = []
        for i in range(8):
            path = folder / f"{i}.bin"
            path.write_bytes(b"x" * (100 + i))
            self.files.append(path)

    def __len__(self):
        return len(self.files)

    def path(self, index):
        return str(self.files[index])

    def load(self, index):
        return self.files[index].read_bytes()


class _NoComm(Strategy):
    name = "none"

    def comm_stats(self):
        return {"comm_time_ms_per_step": None, "comm_bytes_per_step": 0.0}


def test_log_windows_count_every_read_of_the_epoch_also_those_between_windows(tmp_path):
    """Loader workers read while the main process logs: a window's reads run from the previous window's close,
    and the epoch's first window's from its opening, so the windows add up to every file the epoch read and
    to nothing read before it (train/windows.py)."""
    source = CountingSource(_FileSource(tmp_path), workers=0)
    windows = LogWindows(torch.device("cpu"), model=nn.Linear(2, 2), strategy=_NoComm(), compiled=False,
                         reads=ReadMeter(source), sync=lambda: None, clock=time.perf_counter)
    source.load(7)  # the previous epoch's evaluation, or anything before the epoch: not this epoch's input
    files = []
    window = windows.open(first=True)
    for i in range(3):  # the workers' first loads, before the first step
        source.load(i)
    for batch in ((3, 4), (5,)):
        for i in batch:
            source.load(i)
        window.add(torch.tensor(1.0), images=len(batch))
        figures, _ = windows.close(window, also_sum={})
        files.append((figures["io_files"], figures["io_file_bytes"]))
        source.load(6)  # a worker loads while the main process logs
        window = windows.open()
    window.add(torch.tensor(1.0), images=1)
    figures, _ = windows.close(window, also_sum={})
    files.append((figures["io_files"], figures["io_file_bytes"]))
    assert files == [(5, sum(100 + i for i in range(5))), (2, 105 + 106), (1, 106)]
