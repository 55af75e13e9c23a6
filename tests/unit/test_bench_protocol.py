"""The benchmark protocol against hand-computed values, with an injected fake clock."""

import numpy as np
import pytest
import torch

from dlscale.bench.synthetic import IterRate, _out_of_memory_hint, measure, summarize
from dlscale.config import BenchConfig
from dlscale.errors import ConfigError, DeviceError
from dlscale.metrics.timing import format_duration, mean_ci95


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_warmup_is_excluded_and_rates_are_exact():
    clock = FakeClock()
    steps = []

    def step(images, labels):
        # Warm-up steps are slow (100 s); timed steps take 0.25 s + 0.05 s of data wait.
        clock.now += 100.0 if len(steps) < 3 else 0.25
        steps.append(1)

    def next_batch():
        if len(steps) >= 3:
            clock.now += 0.05
        return torch.zeros(1), torch.zeros(1)

    synced = []
    rates = measure(step, next_batch, batch_size=8, num_warmup_batches=3, num_batches_per_iter=4,
                    num_iters=5, clock=clock, sync=lambda: synced.append(clock.now))
    assert len(steps) == 3 + 4 * 5
    assert len(synced) == 1 + 5  # after warm-up and at the end of every timed iteration
    for rate in rates:
        assert rate.total_ips == pytest.approx(32 / (4 * 0.30))  # data wait included
        assert rate.compute_ips == pytest.approx(32 / (4 * 0.25))  # data wait excluded


def test_ci95_is_196_population_std():
    values = [270.3, 265.0, 280.1, 259.9, 271.7]
    mean, ci = mean_ci95(values)
    assert mean == pytest.approx(np.mean(values))
    assert ci == pytest.approx(1.96 * np.std(values, ddof=0))
    assert mean_ci95([5.0]) == (5.0, 0.0)


def test_totals_are_sums_of_measured_ranks_not_rank0_times_n():
    rank0 = [IterRate(100.0, 110.0), IterRate(120.0, 130.0)]
    rank1 = [IterRate(50.0, 55.0), IterRate(40.0, 45.0)]
    summary = summarize([rank0, rank1])
    assert summary["iterations"] == [150.0, 160.0]
    assert summary["img_per_sec_total_mean"] == pytest.approx(155.0)
    assert summary["img_per_sec_total_ci95"] == pytest.approx(1.96 * 5.0)
    assert summary["compute_ips"] == pytest.approx((165.0 + 175.0) / 2)
    assert summary["img_per_sec_per_rank_mean"] == pytest.approx(np.mean([100, 120, 50, 40]))
    assert summary["img_per_sec_per_rank_ci95"] == pytest.approx(1.96 * np.std([100, 120, 50, 40]))
    assert summary["img_per_sec_total_mean"] != 2 * np.mean([100, 120])
    with pytest.raises(ValueError):
        summarize([rank0, rank1[:1]])


@pytest.mark.parametrize("field,value,match", [
    ("batch_size", 0, "--batch-size must be positive"),
    ("num_iters", -1, "--num-iters must be positive"),
    ("num_warmup_batches", -1, "--num-warmup-batches"),
    ("image_size", 4, "--image-size"),
])
def test_bad_sizes(field, value, match):
    with pytest.raises(ConfigError, match=match):
        BenchConfig(**{field: value})


def test_out_of_memory_names_a_smaller_batch():
    with pytest.raises(DeviceError, match="try --batch-size 128"), \
            _out_of_memory_hint(BenchConfig(batch_size=256), torch.device("cpu")):
        raise torch.OutOfMemoryError("CUDA out of memory")


def test_hal_time_format():
    assert format_duration(4071.31) == "1.00 hrs 7.00 mins 51.31 secs"
