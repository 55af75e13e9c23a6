"""`dlscale profile` on the GPU: NVTX ranges with SC20's names go to CUDA's NVTX API, balanced and
nested as docs/profiling.md draws them; the torch.profiler trace holds CUDA kernels and the same
names; and, where Nsight Compute can run (nsys cannot on the CUDA machine this was written for),
a kernel filtered by the PROFILE range is profiled, so the ranges reach NVIDIA's tools."""

import json
import subprocess
import sys

import pytest
import torch
from gpu_helpers import ROOT, find_ncu, subprocess_env

from dlscale import cli

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]

TINY = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "8", "--num-classes", "10"]
STEP_RANGES = {"data", "forward/loss/backward", "forward", "backward", "optimizer.step", "zero_grad"}


class RecordingNvtx:
    """Stands in for torch.cuda.nvtx's push and pop, and checks every pop has its push."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.pushed: list[tuple[str, ...]] = []  # the whole stack at every push

    def range_push(self, name: str) -> int:
        self.stack.append(name)
        self.pushed.append(tuple(self.stack))
        return len(self.stack) - 1

    def range_pop(self) -> int:
        assert self.stack, "range_pop without a range open"
        self.stack.pop()
        return len(self.stack)


def test_profile_bench_sends_nvtx_ranges_and_writes_a_cuda_trace(tmp_path, monkeypatch, capsys):
    nvtx = RecordingNvtx()
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", nvtx.range_push)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", nvtx.range_pop)
    out = tmp_path / "prof"
    assert cli.main(["profile", "bench", *TINY, "--warmup", "2", "--steps", "3", "--trace-steps", "2",
                     "--out", str(out)]) == 0
    assert nvtx.stack == [], f"ranges left open: {nvtx.stack}"
    names = {stack[-1] for stack in nvtx.pushed}
    assert "PROFILE" in names and names >= STEP_RANGES, sorted(names)
    timed = [stack for stack in nvtx.pushed if stack[0] == "PROFILE"]
    assert any(stack[-1] == "forward" and stack[1].startswith("epoch ") and stack[2].startswith("iteration ")
               for stack in timed), "forward is not nested in PROFILE > epoch > iteration"
    assert sum(1 for stack in timed if stack[-1] == "optimizer.step") == 3  # one per timed step

    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"] == "cuda" and summary["sync"] is True
    row = summary["breakdown"][0]
    parts = ("data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms")
    assert sum(row[p] for p in parts) == pytest.approx(row["step_ms"], rel=1e-6) and row["forward_ms"] > 0
    events = json.loads((out / summary["trace"]).read_text())["traceEvents"]
    categories = {event.get("cat") for event in events}
    assert "kernel" in categories, f"no CUDA kernels in the trace: {sorted(filter(None, categories))}"
    assert {"forward", "backward", "optimizer.step"} <= {event.get("name") for event in events}
    assert (out / "trace" / "rank0.ops.txt").read_text().strip()
    assert "regions end with a device sync" in capsys.readouterr().out


def test_nsight_compute_sees_the_profile_range(tmp_path):
    """ncu profiles one kernel launched inside the NVTX range PROFILE (push/pop ranges are written
    with a trailing slash in ncu's filter syntax); with no range of that name it would profile none."""
    ncu = find_ncu()
    if ncu is None:
        pytest.skip("Nsight Compute (ncu) is not installed here")
    command = [ncu, "--nvtx", "--nvtx-include", "PROFILE/", "--launch-count", "1", "--metrics",
               "gpu__time_duration.sum", "--csv", sys.executable, "-m", "dlscale", "profile", "bench", *TINY,
               "--warmup", "1", "--steps", "2", "--trace-steps", "0", "--out", str(tmp_path / "prof")]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240, env=subprocess_env())
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text[-3000:]  # dlscale itself failed under ncu
    if "gpu__time_duration.sum" in out.stdout:
        assert out.returncode == 0, text[-3000:]
        return
    errors = [line for line in text.splitlines() if "==ERROR==" in line]
    if errors:  # the tool could not profile (counters, permissions, the machine): not dlscale's ranges
        pytest.skip(f"ncu cannot profile on this machine: {errors[0]}")
    pytest.fail(f"ncu ran but profiled no kernel inside the PROFILE range:\n{text[-3000:]}")
