"""NVTX range names and nesting (through a recorded fake backend), the step breakdown's arithmetic,
the torch.profiler trace, the input-bound check and the nsys command line."""

import json
import time

import pytest
import torch
from torch import nn

from dlscale import profiling
from dlscale.config import StrategyConfig
from dlscale.distributed import DistEnv
from dlscale.launch.local import nsys_command
from dlscale.metrics.input_bound import cores_needed, input_bound_warning
from dlscale.precision import build_precision
from dlscale.strategies.allreduce import AllreduceStrategy
from dlscale.train.step import StepParts


class Recorder:
    """A range backend that records what it is sent."""

    def __init__(self):
        self.events, self.stack = [], []

    def push(self, name):
        self.stack.append(name)
        self.events.append(("push", name))

    def pop(self):
        self.events.append(("pop", self.stack.pop()))


class Batches:
    """Tiny random batches; `per_epoch` batches make an epoch; optionally slow."""

    def __init__(self, per_epoch=1000, delay_s=0.0):
        self.per_epoch, self.delay_s, self.served = per_epoch, delay_s, 0
        self.images, self.labels = torch.randn(4, 8), torch.tensor([0, 1, 2, 0])

    @property
    def epoch(self):
        return self.served // self.per_epoch

    def __call__(self):
        self.served += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.images, self.labels


class Waits(nn.Module):
    """A layer that takes `seconds` of wall time however busy the machine is: a sleep, not work."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return x


def _parts(step_s: float = 0.0):
    """The tiny model's step parts; step_s > 0 makes each forward pass take at least that long."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    if step_s:
        model = nn.Sequential(Waits(step_s), model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return StepParts(model, optimizer, build_precision("fp32", torch.device("cpu")),
                     AllreduceStrategy(StrategyConfig(), DistEnv()), nn.CrossEntropyLoss())


def _iteration(index):
    """The SC20 ranges of one step, with dlscale's forward and backward inside forward/loss/backward;
    zero_grad last, where the trained step (dlscale.train.step) has it."""
    inner = [("push", "data"), ("pop", "data"),
             ("push", "forward/loss/backward"), ("push", "forward"), ("pop", "forward"), ("push", "backward"),
             ("pop", "backward"), ("pop", "forward/loss/backward"), ("push", "optimizer.step"),
             ("pop", "optimizer.step"), ("push", "zero_grad"), ("pop", "zero_grad")]
    return [("push", f"iteration {index}"), *inner, ("pop", f"iteration {index}")]


def test_range_names_and_nesting():
    recorder = Recorder()
    batches = Batches(per_epoch=3)
    profiling.profile_window(_parts(), batches, torch.device("cpu"), warmup=2, steps=4, backends=[recorder])
    expected = [("push", "epoch 0"), *_iteration(0), *_iteration(1), ("pop", "epoch 0"),  # warm-up: outside PROFILE
                ("push", "PROFILE"),
                ("push", "epoch 0"), *_iteration(2), ("pop", "epoch 0"),
                ("push", "epoch 1"), *_iteration(3), *_iteration(4), *_iteration(5), ("pop", "epoch 1"),
                ("pop", "PROFILE")]
    assert recorder.events == expected
    assert recorder.stack == []


def test_disabled_ranges_do_nothing():
    def boom():
        raise AssertionError("sync called")

    ranges = profiling.Ranges(sync=boom)
    assert not ranges.enabled
    assert ranges("iteration 3") is ranges("data")  # one shared nullcontext, nothing allocated per call
    with ranges("PROFILE"):
        ranges.push("x")
        ranges.pop()
    assert profiling.device_backends(torch.device("cpu")) == []  # no NVTX in the CPU build: disabled


def test_sync_runs_before_every_push_and_pop():
    recorder = Recorder()
    ranges = profiling.Ranges([recorder], sync=lambda: recorder.events.append(("sync", None)))
    with ranges("forward/loss/backward"):
        pass
    assert recorder.events == [("sync", None), ("push", "forward/loss/backward"), ("sync", None),
                               ("pop", "forward/loss/backward")]


def test_breakdown_arithmetic_with_a_counting_clock():
    ticks = iter(range(10**6))
    result = profiling.profile_window(_parts(), Batches(), torch.device("cpu"), warmup=1, steps=3,
                                      clock=lambda: float(next(ticks)))
    # Each clock read advances one tick: every region lasts 1, the step 11 (start, 5 regions x 2 reads, end).
    for record in result["steps"]:
        assert (record["data_s"], record["forward_s"], record["backward_s"]) == (1.0, 1.0, 1.0)
        assert record["optimizer_s"] == 2.0 and record["zero_grad_s"] == 1.0  # zero_grad + optimizer.step
        assert record["step_s"] == 11.0 and record["other_s"] == 6.0
    breakdown = result["breakdown"]
    assert breakdown["step_ms"] == 11000.0 and breakdown["comm_ms"] is None and breakdown["step_ms_ci95"] == 0.0


def test_breakdown_parts_sum_to_the_step_time():
    result = profiling.profile_window(_parts(), Batches(), torch.device("cpu"), warmup=2, steps=5)
    for record in result["steps"]:
        parts = record["data_s"] + record["forward_s"] + record["backward_s"] + record["optimizer_s"]
        assert record["other_s"] >= 0.0
        assert parts + record["other_s"] == pytest.approx(record["step_s"], rel=1e-9)
    rows = profiling.gather_breakdowns(result["breakdown"], torch.device("cpu"))
    row = rows[0]
    assert len(rows) == 1 and row["rank"] == 0 and row["overlap_pct"] is None
    total = sum(row[f"{part}_ms"] for part in ("data", "forward", "backward", "optimizer", "other"))
    assert total == pytest.approx(row["step_ms"], rel=1e-6)
    table = profiling.format_breakdown(rows, warmup=2, steps=5, timing="test")
    assert "slowest=0" in table and "allreduce: none with one rank" in table


def test_trace_is_chrome_trace_json_with_the_ranges(tmp_path):
    path = tmp_path / "trace" / "rank0.pt.trace.json"
    result = profiling.profile_window(_parts(), Batches(), torch.device("cpu"), warmup=1, steps=2,
                                      trace_steps=2, trace_path=path)
    assert result["trace"] == path
    trace = json.loads(path.read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    # Step 0 warms up, steps 1 and 2 are timed, step 3 warms the profiler up, steps 4 and 5 are traced.
    assert {"iteration 4", "iteration 5", "data", "forward/loss/backward", "optimizer.step"} <= names
    assert not {"iteration 2", "iteration 3"} & names
    assert any(str(name).startswith("ProfilerStep#") for name in names)
    assert (tmp_path / "trace" / "rank0.ops.txt").read_text().strip()


def test_input_bound_warning_threshold_and_advice():
    assert input_bound_warning(0.009, 0.1, workers=2, decode="plain", cores=8) is None
    message = input_bound_warning(0.05, 0.1, workers=2, decode="plain", cores=8, batch_size=64)
    assert message.startswith("training is input-bound: 50% of each step (50.0 of 100.0 ms) waits for data")
    assert "2.00x below the model's compute rate (640 of 1280 img/s)" in message
    assert "data.num_workers=4" in message and "data.decode=fast" in message
    at_limit = input_bound_warning(0.02, 0.1, workers=8, decode="fast", cores=8)
    assert "data.num_workers" not in at_limit and "data.decode" not in at_limit and "storage" in at_limit
    assert "data.num_workers=2" in input_bound_warning(0.5, 1.0, workers=0, decode="not JPEG", cores=2)
    # 12 busy workers give a batch per 116.3 ms where the model needs one per 79 ms: 12 x 116.3 / 79 = 17.7
    starved = input_bound_warning(0.0373, 0.1163, workers=12, decode="fast", cores=16, batch_size=256)
    assert "about 18 loader cores for this rank (16 here)" in starved
    assert "data.num_workers=16" in starved and "more CPU cores per rank" in starved
    assert cores_needed(4, 0.1, 0.05) == 8 and cores_needed(4, 0.1, 0.099) == 5


def test_slowed_loader_is_reported_input_bound():
    """A loader 30 ms a batch against a step of 30 ms: input-bound; a ready batch is not. The step waits 30 ms
    so that a busy machine's preemption during the fast case's data fetch (it took 0.4 of a 1.6 ms step at
    a load of 7) stays far below the 10% that counts as input-bound."""
    slow = profiling.profile_window(_parts(step_s=0.03), Batches(delay_s=0.03), torch.device("cpu"), warmup=1,
                                    steps=3)
    fast = profiling.profile_window(_parts(step_s=0.03), Batches(), torch.device("cpu"), warmup=1, steps=3)
    warn = [input_bound_warning(r["breakdown"]["data_ms"] / 1e3, r["breakdown"]["step_ms"] / 1e3,
                                          workers=1, decode="plain", cores=4) for r in (slow, fast)]
    assert warn[0] is not None and "waits for data" in warn[0]
    assert warn[1] is None


def test_nsys_command_reruns_the_same_arguments_capturing_profile(tmp_path):
    line = nsys_command(["profile", "bench", "--model", "resnet50", "--trace-steps", "3"],
                                  out_dir=tmp_path, python="python")
    assert line.startswith("NSYS_NVTX_PROFILER_REGISTER_ONLY=0 nsys profile -o ")
    assert "--trace=cuda,nvtx --capture-range=nvtx --nvtx-capture=PROFILE" in line
    assert line.endswith("python -m dlscale profile bench --model resnet50 --trace-steps 0")
    multi = nsys_command(["profile", "train", "--config", "cpu:digits", "--trace-steps=2"],
                                   out_dir=tmp_path, world_size=4, local_world_size=2, num_nodes=2,
                                   rendezvous="node1:29500", python="python")
    assert ("python -m torch.distributed.run --nnodes 2 --rdzv-backend c10d --rdzv-endpoint node1:29500 "
            "--nproc_per_node 2 -m dlscale profile train --config cpu:digits --trace-steps 0") in multi


def _overlap_on_two_ranks(rank, world_size):
    import torch

    from dlscale import profiling
    from dlscale.config import StrategyConfig
    from dlscale.distributed import DistEnv
    from dlscale.precision import build_precision
    from dlscale.strategies.allreduce import AllreduceStrategy
    from dlscale.train.step import StepParts

    torch.manual_seed(0)
    strategy = AllreduceStrategy(StrategyConfig(), DistEnv(rank=rank, world_size=world_size))
    model = strategy.wrap(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                        nn.Linear(256, 10)), torch.device("cpu"))
    parts = StepParts(model, torch.optim.SGD(model.parameters(), lr=0.01),
                      build_precision("fp32", torch.device("cpu")), strategy, nn.CrossEntropyLoss())
    images, labels = torch.randn(16, 64), torch.randint(0, 10, (16,))

    class Fixed:
        epoch = 0

        def __call__(self):
            return images, labels

    result = profiling.profile_window(parts, Fixed(), torch.device("cpu"), warmup=2, steps=4)
    return profiling.gather_breakdowns(result["breakdown"], torch.device("cpu"))


@pytest.mark.slow
@pytest.mark.distributed
def test_allreduce_overlap_is_measured_per_rank_and_gathered():
    from multiproc import run_ranks

    results = run_ranks(_overlap_on_two_ranks, 2)
    assert results[0] == results[1]  # every rank holds every rank's row
    rows = results[0]
    assert [row["rank"] for row in rows] == [0, 1]
    for row in rows:
        assert row["comm_ms"] > 0 and row["exposed_comm_ms"] >= 0  # exposed includes waiting for the other rank
        assert 0 <= row["overlap_pct"] <= 100
    assert "slowest=" in profiling.format_breakdown(rows, warmup=2, steps=4, timing="test")


@pytest.mark.parametrize("accumulation_steps", [1, 2])
def test_the_profiled_step_is_the_trained_step(accumulation_steps):
    """Three profiled steps leave exactly the weights of three train_step calls on the same batches."""
    from dlscale.train.step import train_step

    generator = torch.Generator().manual_seed(3)
    data = [(torch.randn(4, 8, generator=generator), torch.randint(0, 3, (4,), generator=generator))
            for _ in range(3 * accumulation_steps)]

    class InOrder:
        epoch = 0

        def __init__(self):
            self.served = 0

        def __call__(self):
            self.served += 1
            return data[self.served - 1]

    profiled, trained = _parts(), _parts()
    for parts in (profiled, trained):  # momentum and weight decay: any difference in the step shows
        parts.optimizer = torch.optim.SGD(parts.model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    profiling.profile_window(profiled, InOrder(), torch.device("cpu"), warmup=1, steps=2,
                             accumulation_steps=accumulation_steps)
    for step in range(3):
        train_step(trained, data[step * accumulation_steps:(step + 1) * accumulation_steps])
    for a, b in zip(profiled.model.parameters(), trained.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_gradients_are_ready_in_backward_order():
    result = profiling.profile_window(_parts(), Batches(), torch.device("cpu"), warmup=1, steps=3)
    ready = result["grad_ready"]
    names = [r["name"] for r in sorted(ready, key=lambda r: r["ready_ms"])]
    assert names[:2] == ["2.bias", "2.weight"] and names[-2:] in (["0.bias", "0.weight"], ["0.weight", "0.bias"])
    assert {r["name"]: r["numel"] for r in ready} == {"0.weight": 128, "0.bias": 16, "2.weight": 48, "2.bias": 3}


def test_the_nsys_rerun_goes_into_a_run_directory_of_its_own(tmp_path, monkeypatch):
    """A run directory holds one run: the nsys line's rerun writes into the profile's nsys/run, never over it."""
    from dlscale.cli import profile

    monkeypatch.setattr("sys.argv", ["dlscale", "profile", "bench", "--steps", "3", "--out", "prof", "--name", "x"])
    assert profile._rerun_argv(tmp_path / "prof") == ["profile", "bench", "--steps", "3",
                                                      "--out", str(tmp_path / "prof" / "nsys" / "run")]
