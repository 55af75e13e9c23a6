"""scripts/mlperf_resnet_rates.py, which read references/mlperf_scale.json's figures out of MLPerf's MLLOG files:
a run's training rate and time to train, and what it counts as a finished run."""

import json
import runpy
from pathlib import Path

import pytest

RATES = runpy.run_path(str(Path(__file__).parents[2] / "scripts" / "mlperf_resnet_rates.py"))


def _line(seconds: float, key: str, **metadata) -> str:
    record = {"time_ms": 1000 * seconds, "key": key, "value": None, "metadata": metadata}
    return ":::MLLOG " + json.dumps(record)


def _log(*, stopped: str | None = "success") -> str:
    """A run of two blocks of 4 epochs, each ending in a 2 s evaluation; run_stop at 100 s unless `stopped` is None."""
    lines = [_line(10, "run_start"), _line(10, "global_batch_size")]
    for start in (10, 50):
        lines += [_line(start, "block_start", epoch_count=4), _line(start + 30, "eval_start"),
                  _line(start + 32, "eval_stop"), _line(start + 40, "block_stop")]
    if stopped is not None:
        lines.append(_line(100, "run_stop", status=stopped))
    return "\n".join(lines)


def test_a_finished_run_is_its_time_and_its_rate():
    run = RATES["read_run"](_log())
    assert run.succeeded and run.time_to_train_s == pytest.approx(90.0) and run.epochs == 8
    assert run.eval_s == pytest.approx(4.0)
    # both blocks counted (two blocks or fewer: none left out), each 40 s less its 2 s evaluation
    assert run.img_per_s == pytest.approx(8 * RATES["IMAGENET_TRAIN_IMAGES"] / 76)


def test_a_log_without_run_stop_is_not_a_finished_run():
    """A run cut off before its run_stop has no time to train: it is not counted (it was once a success of
    0 - run_start seconds)."""
    run = RATES["read_run"](_log(stopped=None))
    assert not run.succeeded and run.time_to_train_s is None
    assert not RATES["read_run"](_log(stopped="aborted")).succeeded
