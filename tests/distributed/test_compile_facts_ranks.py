"""Compile facts over several ranks: a rate is CUDA graphs' only if every rank replayed them, so the job
reports the fewest replays and the most skips and graph breaks of any rank."""

import pytest
import torch
from multiproc import run_ranks

from dlscale.metrics.compile import CompileWatch

pytestmark = pytest.mark.distributed


def _facts(rank, size):
    watch = CompileWatch(cudagraphs=True)
    watch.replays.count = [12, 0][rank]  # rank 1's graphs never replayed
    watch.start = {**watch.start, "cudagraph_skips": watch.start["cudagraph_skips"] - [0, 2][rank],
                   "graph_breaks": watch.start["graph_breaks"] - [1, 3][rank]}
    return watch.facts(torch.device("cpu"), steady_step_s=None, steps=6)


def test_the_job_reports_its_least_replayed_rank():
    for facts in run_ranks(_facts, 2):
        assert (facts["cudagraph_replays"], facts["cudagraphs_replayed"], facts["cudagraph_replays_per_step"]) == \
            (0, False, 0.0)
        assert (facts["cudagraph_skips"], facts["graph_breaks"]) == (2, 3)
