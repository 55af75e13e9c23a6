"""dlscale comm on gloo ranks: every collective returns what it must (#wrong 0), a corrupted result
is counted, busbw is nccl-tests' factor times algbw, and a job spanning nodes is measured per level."""

import pytest
from multiproc import run_ranks

pytestmark = pytest.mark.distributed

SMALL = {"min_bytes": 8, "max_bytes": 64 * 1024, "step_factor": 4, "warmup_iters": 1, "iters": 3}


def _comm(rank, world_size, ops, corrupt, local_world_size):
    import os

    import torch
    import torch.distributed as dist

    from dlscale.bench.comm import CommConfig, run_comm
    from dlscale.distributed import DistEnv

    os.environ["LOCAL_WORLD_SIZE"] = str(local_world_size)
    os.environ["LOCAL_RANK"] = str(rank % local_world_size)
    if corrupt:  # rank 1 receives a wrong first element from every float32 allreduce
        real = dist.all_reduce

        def broken(tensor, *args, **kwargs):
            work = real(tensor, *args, **kwargs)
            if dist.get_rank() == 1 and tensor.dtype == torch.float32:
                tensor.view(-1)[0] += 1.0
            return work

        dist.all_reduce = broken
    cfg = CommConfig(ops=tuple(ops), device="cpu", pg_timeout_s=30, **SMALL)
    return run_comm(cfg, DistEnv.from_env(), out=lambda line: None)


@pytest.mark.parametrize("world_size", [2, 4])
def test_every_collective_is_right(world_size):
    ops = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "neighbor_allreduce"]
    summaries = run_ranks(_comm, world_size, ops, False, world_size, timeout_s=240)
    summary = summaries[0]
    assert summary["wrong"] == 0
    factors = {"all_reduce": 2 * (world_size - 1) / world_size, "all_gather": (world_size - 1) / world_size,
               "reduce_scatter": (world_size - 1) / world_size, "broadcast": 1.0,
               "neighbor_allreduce": 1.0 if world_size == 2 else 2.0}  # exp2 out-degree
    for op in ops:
        result = summary["results"]["world"][op]
        assert result["rows"], op
        for row in result["rows"]:
            for mode in ("out-of-place", "in-place"):
                col = row[mode]
                if col is None:
                    assert op == "neighbor_allreduce" and mode == "in-place"
                    continue
                assert col["wrong"] == 0 and col["time_us"] > 0
                assert col["algbw_gbs"] == pytest.approx(row["size"] / (col["time_us"] * 1e-6) / 1e9)
                assert col["busbw_gbs"] == pytest.approx(col["algbw_gbs"] * factors[op])
        fit = result["fit"]["out-of-place"]  # tiny sizes on a shared machine may not show a bandwidth
        assert "latency_us" in fit or "error" in fit, op
    # sizes below 4 bytes per rank cannot be split for all_gather and reduce_scatter
    assert min(r["size"] for r in summary["results"]["world"]["all_gather"]["rows"]) >= 4 * world_size


def test_a_corrupted_buffer_is_counted():
    summary = run_ranks(_comm, 2, ["all_reduce"], True, 2)[0]
    rows = summary["results"]["world"]["all_reduce"]["rows"]
    assert all(row[mode]["wrong"] == 1 for row in rows for mode in ("out-of-place", "in-place"))
    assert summary["wrong"] == 2 * len(rows)


def test_two_emulated_nodes_are_measured_per_level():
    summary = run_ranks(_comm, 4, ["all_reduce"], False, 2, timeout_s=240)[0]
    assert summary["num_nodes"] == 2 and summary["local_world_size"] == 2
    levels = summary["results"]
    assert set(levels) == {"world", "intra", "inter"}
    assert levels["intra"]["all_reduce"]["ranks"] == 2 and levels["inter"]["all_reduce"]["ranks"] == 2
    assert summary["wrong"] == 0


def _comm_lines(rank, world_size):
    """Rank 0's lines in the order they were said, with a marker at each timed measurement."""
    import dlscale.bench.comm as comm
    from dlscale.distributed import DistEnv

    said: list[str] = []
    measure = comm._measure

    def marked(*args, **kwargs):
        said.append("<measure>")
        return measure(*args, **kwargs)

    comm._measure = marked
    cfg = comm.CommConfig(ops=("all_reduce",), device="cpu", pg_timeout_s=30, mode="out-of-place", **SMALL)
    summary = comm.run_comm(cfg, DistEnv.from_env(), out=said.append)
    return {"said": said, "ranks": summary["ranks"]}


def test_the_header_names_every_rank_and_each_row_is_said_as_it_is_measured():
    import os
    import socket

    result = run_ranks(_comm_lines, 2)[0]
    said = result["said"]
    header = said[:said.index("# Using devices") + 3]
    assert header[0].startswith("# nThread 1 nGpus 1 minBytes 8 maxBytes 65536 step: 4(factor) warmup iters: 1 "
                                "iters: 3")
    host = socket.gethostname()
    rank_lines = [line for line in said if line.startswith("#  Rank ")]
    assert [line.split()[2] for line in rank_lines] == ["0", "1"]
    assert all(f" on {host:>10} device cpu " in line for line in rank_lines)
    pids = [r["pid"] for r in result["ranks"]]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert f"# 2 ranks on 1 host(s) ({host}: 2), gloo" in said
    # One timed measurement (out-of-place only), then its row, size after size: 8, 32, ..., 65536 bytes.
    body = [line for line in said if not line.startswith("#")]
    sizes = [8 * 4 ** i for i in range(7)]
    assert [line if line == "<measure>" else line.split()[0] for line in body] == \
        [item for size in sizes for item in ("<measure>", str(size))]
