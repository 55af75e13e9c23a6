"""Named reductions over three gloo ranks against hand-computed sums, maxima, minima and gathers; several
reductions in one call equal the same reductions one by one."""

import pytest
from multiproc import run_ranks

pytestmark = pytest.mark.distributed


def _reduce(rank, world_size):
    import torch

    from dlscale.distributed import (
        broadcast_from_main,
        gather_over_ranks,
        max_over_ranks,
        min_over_ranks,
        on_main,
        over_ranks,
        sum_over_ranks,
    )
    from dlscale.errors import ConfigError

    def refuse():
        raise ConfigError(f"refused by rank {rank}")

    try:
        on_main(rank == 0, refuse, share=True)
        refused = None
    except ConfigError as error:
        refused = str(error)

    figures = {"loss": torch.tensor(float(rank + 1)), "images": 10 * (rank + 1), "votes": [rank == 2, 1]}
    times = {"step_ms": 100.0 + rank, "per_iter": [rank, -rank]}
    together = over_ranks("cpu", sum=figures, max={"ms": 3.0 - rank}, min={"ok": rank != 1}, gather=times)
    return {
        "together": {"sum": together.sum, "max": together.max, "min": together.min, "gather": together.gather},
        "sum": sum_over_ranks(figures, "cpu"), "max": max_over_ranks({"ms": 3.0 - rank}, "cpu"),
        "min": min_over_ranks({"ok": rank != 1}, "cpu"), "gather": gather_over_ranks(times, "cpu"),
        "main": broadcast_from_main(f"rank {rank}"),
        "shared": on_main(rank == 0, lambda: f"rank {rank}", share=True), "refused": refused,
    }


def test_reductions_by_name_over_three_ranks():
    results = run_ranks(_reduce, 3)
    assert all(result == results[0] for result in results)  # every rank has the same figures
    result = results[0]
    assert result["sum"] == {"loss": 6.0, "images": 60.0, "votes": [1.0, 3.0]}  # 1+2+3, 10+20+30
    assert result["max"] == {"ms": 3.0} and result["min"] == {"ok": 0.0}  # rank 1 is not ok
    assert result["gather"] == {"step_ms": [100.0, 101.0, 102.0], "per_iter": [[0.0, 0.0], [1.0, -1.0], [2.0, -2.0]]}
    assert result["together"] == {key: result[key] for key in ("sum", "max", "min", "gather")}
    assert result["main"] == "rank 0"
    # rank 0's result, and its refusal, on every rank
    assert result["shared"] == "rank 0" and result["refused"] == "refused by rank 0"
