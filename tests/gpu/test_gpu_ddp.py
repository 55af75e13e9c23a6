"""DistributedDataParallel on CUDA, with what one GPU can show.

1. Equality: two ranks share the one GPU over gloo (NCCL refuses two ranks on one device; gloo reduces CUDA
   tensors itself), each with DDP on its own batch; after 5 steps their weights equal those of one process
   that accumulates both batches, within the case's stated tolerance (benchmarks/ddp_equality.py, the
   script a user runs with `torchrun --nproc_per_node 8` on a machine with several GPUs): eager fp32,
   bf16 autocast + channels_last, and those compiled in torch.compile's default mode and in reduce-overhead.
2. The wrapper on one rank: `dlscale bench --wrap-single-rank` wraps the model in DDP in a one-rank NCCL
   group, plainly and under torchrun, and a compiled run writes its compile facts (graph breaks, CUDA-graph
   skips and replays) to summary.json, saying "not reported" instead of a rate if its graphs never replayed.
   The unwrapped compiled run, the same command without the flag, replays its graphs (the counter's check).
"""

import json
import subprocess
import sys

import pytest
import torch
from gpu_helpers import ROOT, subprocess_env
from multiproc import run_ranks

from dlscale.distributed import DistEnv

sys.path.insert(0, str(ROOT / "benchmarks"))
import ddp_equality  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]


def _cases_on_one_gpu(rank, size, names):
    torch.cuda.set_device(0)
    env = DistEnv(rank=rank, world_size=size, local_rank=rank, local_world_size=size)
    return ddp_equality.run_cases(names, env, torch.device("cuda", 0))


@pytest.mark.parametrize("case", list(ddp_equality.CASES))
def test_two_ranks_on_one_gpu_equal_one_process(case):
    # A compiled case compiles the DDP model, the reference and the control on each rank (the FX graph cache
    # serves the second and third); a rank waits in collectives for the other's compile.
    results = run_ranks(_cases_on_one_gpu, 2, [case], timeout_s=270, pg_timeout_s=200)
    assert results[0] == results[1]  # every rank returns all ranks' results
    got = results[0][case]
    print(f"{case}: distance {got['distance']:.3e}, control {got['control_distance']:.3e}, "
          f"tolerance {got['tolerance']:.0e}, ranks identical {got['ranks_identical']}")
    assert got["world_size"] == 2 and got["device"] == "cuda"
    assert got["distance"] <= got["tolerance"], got
    assert got["control_distance"] > 10 * got["tolerance"], got  # the check can tell the runs apart
    assert got["equal"]


TINY = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "16", "--num-classes", "10",
        "--num-warmup-batches", "5", "--num-batches-per-iter", "5", "--num-iters", "3"]
COMPILED = ["--precision", "amp_bf16", "--channels-last", "--compile-mode", "reduce-overhead"]


def _bench(tmp_path, name, *flags, torchrun=False):
    out = tmp_path / f"{name}.json"
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"] if torchrun else []
    command = [sys.executable, *launcher, "-m", "dlscale", "bench", *TINY, *flags, "--json", str(out),
               "--output-dir", str(tmp_path / "runs")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240, env=subprocess_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


def test_wrapped_and_bare_compiled_runs_report_their_compile_facts(tmp_path):
    bare, bare_out = _bench(tmp_path, "bare", *COMPILED)
    wrapped, wrapped_out = _bench(tmp_path, "wrapped", *COMPILED, "--wrap-single-rank")
    assert (bare["wrap_single_rank"], wrapped["wrap_single_rank"]) == (False, True)
    assert "a one-rank NCCL group" in wrapped_out and "one-rank" not in bare_out
    facts, wrapped_facts = bare["compile_facts"], wrapped["compile_facts"]
    print("bare:", json.dumps(facts), "\nwrapped:", json.dumps(wrapped_facts))
    # The bare model: one graph, no break, its CUDA graphs replayed at least forward and backward each step.
    assert (facts["traced_graphs"], facts["graph_breaks"], facts["cudagraphs"]) == (1, 0, True)
    assert facts["cudagraphs_replayed"] and facts["cudagraph_replays_per_step"] >= 2
    assert facts["compile_s"] > 0 and facts["inductor_cache"] in ("cold", "warm", "partly warm")
    assert "Total img/sec on 1 GPU(s)" in bare_out and "Compiling: " in bare_out
    # Under DDP: the wrapper's own breaks; the rate printed only if the graphs replayed.
    assert wrapped_facts["graph_breaks"] > 0 and wrapped_facts["cudagraphs"] is True
    assert isinstance(wrapped_facts["cudagraphs_replayed"], bool)
    if wrapped_facts["cudagraphs_replayed"]:
        assert "Total img/sec on 1 GPU(s)" in wrapped_out
    else:
        assert "Img/sec: not reported" in wrapped_out and "Total img/sec" not in wrapped_out


def test_wrapped_single_rank_under_torchrun(tmp_path):
    summary, out = _bench(tmp_path, "torchrun", "--wrap-single-rank", torchrun=True)
    assert (summary["world_size"], summary["launcher"], summary["wrap_single_rank"]) == (1, "torchrun", True)
    assert "a one-rank NCCL group" in out and "Total img/sec on 1 GPU(s)" in out
    assert summary["compile_facts"] is None
