"""Named reductions over ranks on one process (no process group): nothing is communicated, the figures
come back as given, and a gather holds this one rank's."""

import pytest
import torch

from dlscale.distributed import (
    barrier,
    broadcast_from_main,
    gather_over_ranks,
    max_over_ranks,
    min_over_ranks,
    over_ranks,
    sum_over_ranks,
)


def test_one_process_gives_the_figures_back_by_name():
    loss = torch.tensor(0.25, dtype=torch.float32)
    ranks = over_ranks("cpu", sum={"images": 96, "loss": loss, "votes": [1, 0]}, max={"bytes": 2**40},
                       min={"ok": True}, gather={"step_ms": 12.5, "per_iter": torch.tensor([1.0, 2.0])})
    assert ranks.sum == {"images": 96.0, "loss": 0.25, "votes": [1.0, 0.0]}
    assert ranks.max == {"bytes": float(2**40)} and ranks.min == {"ok": 1.0}
    assert ranks.gather == {"step_ms": [12.5], "per_iter": [[1.0, 2.0]]}  # one entry: this rank's


def test_the_short_forms_and_the_empty_call():
    assert sum_over_ranks({"a": 3, "b": 0.5}, "cpu") == {"a": 3.0, "b": 0.5}
    assert max_over_ranks({"a": -2}, "cpu") == {"a": -2.0}
    assert min_over_ranks({"a": [4, 5]}, "cpu") == {"a": [4.0, 5.0]}
    assert gather_over_ranks({"a": 7}, "cpu") == {"a": [7.0]}
    assert over_ranks("cpu").sum == {}


def test_whole_numbers_are_exact_below_2_to_the_53():
    assert int(max_over_ranks({"bytes": 2**53 - 1}, "cpu")["bytes"]) == 2**53 - 1


def test_broadcast_and_barrier_are_no_ops_on_one_process():
    assert broadcast_from_main(("ConfigError", "bad")) == ("ConfigError", "bad")
    assert barrier() is None


def test_nan_is_carried_not_dropped():
    value = max_over_ranks({"time_ms": float("nan")}, "cpu")["time_ms"]
    assert value != value
    with pytest.raises(TypeError):
        sum_over_ranks({"a": None}, "cpu")
