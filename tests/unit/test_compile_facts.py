"""What bench and train report about torch.compile (dlscale.metrics.compile), checked against functions
whose graphs, graph breaks and cache state are known by construction."""

from types import SimpleNamespace

import pytest
import torch

from dlscale.bench.synthetic import _rate_lines
from dlscale.metrics.compile import (
    CompileWatch,
    ReplayCounter,
    cache_verdict,
    counting_replays,
    describe,
    timed_first_step,
)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _two_graphs(x):
    y = x.sin() + 1
    torch._dynamo.graph_break()  # one break: the function is traced as two graphs
    return y.cos() * 2


def test_graph_breaks_and_graphs_are_counted():
    watch = CompileWatch(cudagraphs=False)
    compiled = torch.compile(_two_graphs, backend="aot_eager")
    x = torch.randn(8, requires_grad=True)
    compiled(x).sum().backward()
    compiled(x).sum().backward()  # the cached graphs run: nothing more is traced
    facts = watch.facts(torch.device("cpu"), steady_step_s=None, steps=2)
    assert (facts["traced_graphs"], facts["compiled_graphs"], facts["graph_breaks"]) == (2, 2, 1)
    [reason] = facts["graph_break_reasons"]
    assert "graph_break" in reason and "\n" not in reason
    assert facts["compile_s"] is None and facts["cudagraph_replays"] is None and facts["cudagraphs_replayed"] is None


def test_a_second_watch_counts_only_its_own_run():
    torch.compile(_two_graphs, backend="aot_eager")(torch.randn(4))
    torch._dynamo.reset()
    watch = CompileWatch(cudagraphs=False)
    torch.compile(lambda x: x * 3, backend="aot_eager")(torch.randn(4))
    facts = watch.facts(torch.device("cpu"), steady_step_s=None, steps=1)
    assert (facts["traced_graphs"], facts["graph_breaks"], facts["graph_break_reasons"]) == (1, 0, {})


@pytest.mark.slow
def test_inductor_cache_is_cold_then_warm(tmp_path, monkeypatch):
    """A fresh cache directory misses; the same function compiled again after dynamo forgot it hits."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    x = torch.randn(16)
    verdicts = []
    for _ in range(2):
        torch._dynamo.reset()
        watch = CompileWatch(cudagraphs=False)
        torch.compile(lambda t: (t.sin() + 2) * t, backend="inductor")(x)
        facts = watch.facts(torch.device("cpu"), steady_step_s=None, steps=1)
        verdicts.append((facts["inductor_cache"], facts["fx_graph_cache_hits"] > 0, facts["fx_graph_cache_misses"] > 0))
    assert verdicts == [("cold", False, True), ("warm", True, False)]


@pytest.mark.parametrize("hits,misses,verdict", [
    ((0, 0), (0, 0), "unused"), ((2, 1), (0, 0), "warm"), ((0, 0), (3, 1), "cold"), ((1, 0), (0, 1), "partly warm"),
])
def test_cache_verdict(hits, misses, verdict):
    delta = {"fx_graph_cache_hits": hits[0], "aot_autograd_cache_hits": hits[1],
             "fx_graph_cache_misses": misses[0], "aot_autograd_cache_misses": misses[1]}
    assert cache_verdict(delta) == verdict


def test_compile_seconds_are_the_first_steps_extra_time():
    """First step 5.0 s, warm-up of 3 steps 5.6 s, a steady step 0.25 s: compiling 4.75 s, the warm-up's
    extra time 5.6 - 3 x 0.25 = 4.85 s."""
    times = iter([10.0, 15.0])
    watch = CompileWatch(cudagraphs=False)
    synced = []
    for _ in range(3):
        with timed_first_step(watch, lambda: synced.append(1), lambda: next(times)):
            pass
    watch.warmup_done(5.6)
    facts = watch.facts(torch.device("cpu"), steady_step_s=0.25, steps=4, warmup_steps=3)
    assert len(synced) == 2  # around the first step only
    assert facts["compile_s"] == pytest.approx(4.75) and facts["warmup_extra_s"] == pytest.approx(4.85)
    with timed_first_step(None, lambda: synced.append(1), lambda: 0.0):  # an eager run: nothing
        pass
    assert len(synced) == 2


def test_replay_counter_counts_torchs_replay_path_and_restores_it():
    """Calls of CUDAGraphTreeManager.execute_node (torch's replay of a recorded graph) are counted while the
    counter is entered, and the method is torch's own again afterwards."""
    from torch._inductor.cudagraph_trees import CUDAGraphTreeManager

    original = CUDAGraphTreeManager.execute_node
    manager = SimpleNamespace(update_generation=lambda: None)
    node = SimpleNamespace(run=lambda inputs: ["out", *inputs])
    with ReplayCounter() as counter:
        for _ in range(3):
            assert CUDAGraphTreeManager.execute_node(manager, node, ["in"]) == ["out", "in"]
        assert counter.count == 3 and manager.current_node is node
        counter.reset()
        assert counter.count == 0
    assert CUDAGraphTreeManager.execute_node is original


def test_only_cuda_graph_modes_on_cuda_count_replays():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert CompileWatch.for_run(False, "reduce-overhead", cuda) is None
    assert CompileWatch.for_run(True, "reduce-overhead", cpu).replays is None
    assert CompileWatch.for_run(True, "default", cuda).replays is None
    assert CompileWatch.for_run(True, "max-autotune", cuda).cudagraphs
    watch = CompileWatch.for_run(True, "reduce-overhead", cuda)
    assert watch.not_replayed()  # nothing replayed yet
    with counting_replays(watch) as counter:
        assert counter is watch.replays


def _facts(**changes):
    base = {"compile_s": 40.0, "warmup_extra_s": 43.0, "traced_graphs": 1, "compiled_graphs": 3,
            "fx_graph_cache_hits": 0, "fx_graph_cache_misses": 6, "aot_autograd_cache_hits": 0,
            "aot_autograd_cache_misses": 1, "graph_breaks": 3, "inductor_cache": "cold", "cudagraphs": True,
            "cudagraph_skips": 0, "cudagraph_replays": 60, "cudagraph_replays_per_step": 6.0,
            "cudagraphs_replayed": True}
    return {**base, **changes}


def _summary(facts):
    return {"compile_facts": facts, "img_per_sec_per_rank_mean": 100.0, "img_per_sec_per_rank_ci95": 1.0,
            "img_per_sec_total_mean": 100.0, "img_per_sec_total_ci95": 1.0}


def test_a_run_whose_cuda_graphs_never_replayed_prints_no_rate():
    lines = _rate_lines(_summary(_facts(cudagraph_skips=3, cudagraph_replays=0, cudagraph_replays_per_step=0.0,
                                        cudagraphs_replayed=False)), 1, "GPU")
    assert not any("img/sec" in line.lower() and "not reported" not in line for line in lines)
    assert lines[-1].startswith("Img/sec: not reported: torch.compile's CUDA graphs never replayed")
    assert "3 skipped" in lines[-1]


def test_a_replayed_run_prints_its_facts_then_its_rate():
    lines = _rate_lines(_summary(_facts()), 1, "GPU")
    assert lines[:3] == describe(_facts())
    assert "40.0 s" in lines[0] and "cold (0 hits, 7 misses)" in lines[0]
    assert "1 traced, 3 compiled (DDP's optimizer split them at its buckets), 3 graph breaks" in lines[1]
    assert lines[2] == "CUDA graphs: 0 skipped, 6 replays per timed step"
    assert lines[-1] == "Total img/sec on 1 GPU(s): 100.0 +-1.0"
    assert _rate_lines(_summary(None), 1, "CPU") == ["Img/sec per CPU: 100.0 +-1.0",
                                                     "Total img/sec on 1 CPU(s): 100.0 +-1.0"]
