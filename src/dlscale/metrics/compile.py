"""What torch.compile did in a run, from torch's own counters: the time compiling took, the graphs it
traced and compiled, graph breaks, whether the inductor cache was warm, CUDA-graph skips and replays.

The counters are torch._dynamo.utils.counters (process-wide; the same names in torch 2.11 and 2.13):

    counters["stats"]["unique_graphs"]        graphs dynamo traced (a graph break ends one, starts another)
    counters["graph_break"]                   reason -> graph breaks met while tracing
    counters["aot_autograd"]["total"]         graphs handed to AOT autograd, i.e. compiled: the traced graphs
                                              after DDP's optimizer split them at its buckets
                                              (torch/_dynamo/backends/distributed.py)
    counters["inductor"]["fxgraph_cache_hit"], ["fxgraph_cache_miss"]          inductor's FX graph cache
    counters["aot_autograd"]["autograd_cache_hit"], ["autograd_cache_miss"]    AOT autograd's cache
    counters["inductor"]["cudagraph_skips"]   compiled graphs that run without their CUDA graph (why: the
                                              "skipping cudagraphs" warning in the log)

torch counts no CUDA-graph replays (torch/_inductor/cudagraph_trees.py). ReplayCounter counts the calls of
CUDAGraphTreeManager.execute_node, the one path on which a recorded graph replays: the warm-up run of a graph
takes run_eager, its recording record_function, and a graph whose CUDA graph was skipped runs its compiled
code directly. A run is "replayed" when its timed steps replayed at least one graph; a compiled graph
replays twice per step (its forward and its backward). Where torch lacks that method the count is None.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from dlscale.distributed import over_ranks

CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
"""torch.compile's modes that record and replay CUDA graphs (on CUDA devices)."""

COUNTERS = {
    "traced_graphs": ("stats", "unique_graphs"),
    "compiled_graphs": ("aot_autograd", "total"),
    "fx_graph_cache_hits": ("inductor", "fxgraph_cache_hit"),
    "fx_graph_cache_misses": ("inductor", "fxgraph_cache_miss"),
    "aot_autograd_cache_hits": ("aot_autograd", "autograd_cache_hit"),
    "aot_autograd_cache_misses": ("aot_autograd", "autograd_cache_miss"),
    "cudagraph_skips": ("inductor", "cudagraph_skips"),
}
"""Each fact read from one of torch's counters: name -> (counter group, key)."""


def read_counters() -> dict:
    """The counters of COUNTERS, the graph-break total and its reasons, now."""
    from torch._dynamo.utils import counters

    values = {name: counters[group][key] for name, (group, key) in COUNTERS.items()}
    return {**values, "graph_breaks": counters["graph_break"].total(), "reasons": dict(counters["graph_break"])}


class ReplayCounter:
    """Counts CUDA-graph replays of torch.compile while it is entered (see the module docstring)."""

    def __init__(self) -> None:
        self.count: int | None = 0
        self._lock = threading.Lock()  # backward replays its graphs on autograd's device thread
        self._restore: Callable[[], None] | None = None

    def reset(self) -> None:
        if self.count is not None:
            with self._lock:
                self.count = 0

    def __enter__(self) -> ReplayCounter:
        try:
            from torch._inductor.cudagraph_trees import CUDAGraphTreeManager
            original = CUDAGraphTreeManager.execute_node
        except (ImportError, AttributeError):
            self.count = None  # this torch replays some other way: not counted
            return self

        @functools.wraps(original)
        def execute_node(manager, node, new_inputs):
            with self._lock:
                self.count += 1
            return original(manager, node, new_inputs)

        CUDAGraphTreeManager.execute_node = execute_node
        self._restore = lambda: setattr(CUDAGraphTreeManager, "execute_node", original)
        return self

    def __exit__(self, *exc) -> None:
        if self._restore is not None:
            self._restore()
            self._restore = None


@dataclass
class CompileWatch:
    """One run's compile facts: torch's counters at its start, the first step's time, the replays."""

    cudagraphs: bool
    """The compile mode replays CUDA graphs on this device (reduce-overhead, max-autotune on CUDA)."""
    start: dict = field(default_factory=read_counters)
    replays: ReplayCounter | None = None
    first_step_s: float | None = None
    """The first train step's time, compiling included (device synchronised before and after)."""
    warmup_s: float | None = None
    """bench: the whole warm-up's time, CUDA-graph recording and cuDNN autotuning included."""

    def __post_init__(self) -> None:
        if self.cudagraphs and self.replays is None:
            self.replays = ReplayCounter()

    @classmethod
    def for_run(cls, compiled: bool, mode: str, device: torch.device) -> CompileWatch | None:
        """A watch for a compiled run; None for an eager one."""
        if not compiled:
            return None
        return cls(cudagraphs=device.type == "cuda" and mode in CUDAGRAPH_MODES)

    def warmup_done(self, seconds: float) -> None:
        """bench: the warm-up took `seconds`; replays are counted from now on (the timed steps')."""
        self.warmup_s = seconds
        if self.replays is not None:
            self.replays.reset()

    def not_replayed(self) -> bool:
        """CUDA graphs apply, are counted, and none has replayed (since the warm-up, in bench)."""
        return self.replays is not None and self.replays.count == 0

    def facts(self, device: torch.device, *, steady_step_s: float | None, steps: int, warmup_steps: int = 0) -> dict:
        """The run's compile facts for summary.json, on every rank (a collective when there are several).
        steady_step_s: a step's time once compiled (the timed steps' mean); steps: the steps the replay
        count covers; warmup_steps: bench's untimed steps. Times are this rank's."""
        now = read_counters()
        delta = {name: now[name] - self.start[name] for name in (*COUNTERS, "graph_breaks")}
        reasons = {reason: count - self.start["reasons"].get(reason, 0) for reason, count in now["reasons"].items()}
        delta, replays = _over_ranks(delta, self.replays.count if self.replays is not None else None, device)
        compile_s = extra = None
        if steady_step_s is not None and self.first_step_s is not None:
            compile_s = self.first_step_s - steady_step_s
        if steady_step_s is not None and self.warmup_s is not None:
            extra = self.warmup_s - warmup_steps * steady_step_s
        return {
            "compile_s": compile_s,
            "compile_s_basis": "the first step's time minus a steady step's (rank 0; the device synchronised "
                               "around the first step)",
            "warmup_extra_s": extra,
            **delta,
            "graph_break_reasons": {_short(reason): count for reason, count in reasons.items() if count},
            "inductor_cache": cache_verdict(delta),
            "cudagraphs": self.cudagraphs,
            "cudagraph_replays": replays,
            "cudagraph_replays_per_step": replays / steps if replays is not None and steps else None,
            "cudagraphs_replayed": None if replays is None else replays > 0,
        }


def cache_verdict(delta: dict) -> str:
    """warm: every lookup of inductor's and AOT autograd's caches hit; cold: every one missed; partly warm;
    or unused (no lookup: caches off, or a backend without them)."""
    hits = delta["fx_graph_cache_hits"] + delta["aot_autograd_cache_hits"]
    misses = delta["fx_graph_cache_misses"] + delta["aot_autograd_cache_misses"]
    if hits and misses:
        return "partly warm"
    return "warm" if hits else "cold" if misses else "unused"


def _short(reason: str) -> str:
    """A graph break's reason in one line: its first line and its Explanation line, if any."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    explanation = next((line for line in lines[1:] if line.startswith("Explanation:")), "")
    return " ".join(filter(None, (lines[0] if lines else "", explanation)))[:300]


def _over_ranks(delta: dict, replays: int | None, device: torch.device) -> tuple[dict, int | None]:
    """The skips and graph breaks of the rank with the most, the replays of the rank with the fewest (one
    all_gather): a rate is CUDA graphs' only if every rank replayed them. Unchanged for one process."""
    ranks = over_ranks(device, max={"skips": delta["cudagraph_skips"], "breaks": delta["graph_breaks"]},
                       min={"replays": replays if replays is not None else 0})
    skips, breaks = int(ranks.max["skips"]), int(ranks.max["breaks"])
    return ({**delta, "cudagraph_skips": skips, "graph_breaks": breaks},
            None if replays is None else int(ranks.min["replays"]))


def describe(facts: dict) -> list[str]:
    """The facts as the terminal's lines."""
    compile_s = facts["compile_s"]
    timing = (f"{compile_s:.1f} s (the first step's time over a steady step's"
              + (f"; the whole warm-up's extra time {facts['warmup_extra_s']:.1f} s)"
                 if facts["warmup_extra_s"] is not None else ")")) if compile_s is not None else "not timed"
    hits = facts["fx_graph_cache_hits"] + facts["aot_autograd_cache_hits"]
    misses = facts["fx_graph_cache_misses"] + facts["aot_autograd_cache_misses"]
    lines = [f"Compiling: {timing}; inductor cache {facts['inductor_cache']} ({hits} hits, {misses} misses)",
             f"Graphs: {facts['traced_graphs']} traced, {facts['compiled_graphs']} compiled"
             + (" (DDP's optimizer split them at its buckets)" if facts["compiled_graphs"] > facts["traced_graphs"]
                else "") + f", {facts['graph_breaks']} graph breaks"]
    if facts["cudagraphs"]:
        per_step = facts["cudagraph_replays_per_step"]
        replays = "not counted (this torch has no CUDAGraphTreeManager.execute_node)" if per_step is None \
            else f"{per_step:g} replays per timed step"
        lines.append(f"CUDA graphs: {facts['cudagraph_skips']} skipped, {replays}")
    return lines


def not_replayed_line(facts: dict) -> str | None:
    """The line that replaces a rate whose CUDA graphs never replayed; None when they did, or do not apply."""
    if facts.get("cudagraphs_replayed") is not False:
        return None
    return (f"Img/sec: not reported: torch.compile's CUDA graphs never replayed in the timed steps "
            f"({facts['cudagraph_skips']} skipped; the log's 'skipping cudagraphs' lines say why), so the steps "
            "ran without them (summary.json keeps their rate beside cudagraphs_replayed: false)")


def counting_replays(watch: CompileWatch | None) -> contextlib.AbstractContextManager:
    """Count the watch's CUDA-graph replays inside this block; nothing for an eager run or without CUDA graphs."""
    if watch is None or watch.replays is None:
        return contextlib.nullcontext()
    return watch.replays


@contextlib.contextmanager
def timed_first_step(watch: CompileWatch | None, sync: Callable[[], None],
                     clock: Callable[[], float]) -> Iterator[None]:
    """Time the block as the watch's first step (the device synchronised before and after), once; a no-op
    for an eager run and after the first step."""
    if watch is None or watch.first_step_s is not None:
        yield
        return
    sync()
    start = clock()
    yield
    sync()
    watch.first_step_s = clock() - start
