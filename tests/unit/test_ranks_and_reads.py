"""Per-rank lead times and the straggler verdict (metrics/ranks.py); process read counters that follow
processes which come and go (metrics/proc_io.py)."""

import os
import subprocess
import sys

import pytest
from commands import start_process

from dlscale.metrics.proc_io import ProcessReads
from dlscale.metrics.ranks import STRAGGLER_EXCESS, describe, lead_times, slowest, stragglers


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
