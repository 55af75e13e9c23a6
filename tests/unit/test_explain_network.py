"""dlscale explain --comm-run: a dlscale comm run's all_reduce busbw at its largest size against what
dlscale predict's model of the platform expects. The comm runs are summary.json files in the format
bench/comm.py writes (its keys and rows as a real 2-rank gloo run wrote them), with chosen timings; the
expected bandwidths are worked out here from the platforms' figures (references/platforms.json)."""

import json
from dataclasses import replace

import pytest

from dlscale.cli import main
from dlscale.explain.build import explain
from dlscale.predict import inputs
from dlscale.predict.model import Strategy, predict
from dlscale.predict.network import fit_latency_bandwidth
from dlscale.predict.platforms import platform, platforms

MIB = 2**20
SIZES = [MIB, 16 * MIB, 256 * MIB]


def _comm_run(path, *, ranks, per_node, device_name, busbw_gbs, latency_us=50.0, backend="nccl"):
    """A dlscale comm run whose all_reduce takes latency + S x 2(n-1)/n / busbw at every size."""
    factor = 2 * (ranks - 1) / ranks
    rows = []
    for size in SIZES:
        time_us = latency_us + size * factor / (busbw_gbs * 1e9) * 1e6
        algbw = size / (time_us * 1e-6) / 1e9
        column = {"time_us": time_us, "algbw_gbs": algbw, "busbw_gbs": algbw * factor, "wrong": 0}
        rows.append({"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": -1,
                     "out-of-place": column, "in-place": dict(column)})
    fit = fit_latency_bandwidth(SIZES, [r["out-of-place"]["time_us"] * 1e-6 for r in rows], factor)
    fits = {mode: {"latency_us": fit.latency_us, "busbw_gbs": fit.busbw_gbs, "points": fit.points,
                   "rms_relative_error": fit.rms_relative_error} for mode in ("out-of-place", "in-place")}
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "kind": "comm", "world_size": ranks, "num_nodes": ranks // per_node, "local_world_size": per_node,
        "launcher": "torchrun", "backend": backend, "device": "cuda" if backend == "nccl" else "cpu",
        "device_name": device_name, "ops": ["all_reduce"], "topology": "exp2", "sizes": SIZES, "warmup_iters": 1,
        "iters": 20, "mode": "both", "wrong": 0,
        "results": {"world": {"all_reduce": {"ranks": ranks, "rows": rows, "fit": fits}}}}))
    return rows[-1]["out-of-place"]["busbw_gbs"]


def _bench(path, *, world, per_device, device_name, nodes=1):
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "kind": "bench", "model": "resnet50", "precision": "amp_fp16", "world_size": world, "num_nodes": nodes,
        "device": "cuda", "device_name": device_name, "batch_size": 256, "image_size": 224, "num_classes": 1000,
        "width": 64, "img_per_sec_total_mean": per_device * world, "img_per_sec_total_ci95": 1.0,
        "compute_ips": per_device * world, "num_iters": 10, "num_batches_per_iter": 10, "num_warmup_batches": 10,
        "dist_optimizer": "allreduce", "iterations_per_rank": [[per_device] * 10] * world}))


def _ring_busbw(size, ranks, nodes, bandwidth_gbs, nvlink_hop_us=3.4, net_hop_us=14.0, base_us=8.4):
    """NCCL's ring: its base latency, 2(n-m) steps over NVLink and 2(m-1) across nodes (NCCL's tuning.cc),
    2(n-1)/n x S at the slower level's bandwidth; busbw = 2(n-1)/n x S / t."""
    factor = 2 * (ranks - 1) / ranks
    t = (base_us + 2 * (ranks - nodes) * nvlink_hop_us + 2 * (nodes - 1) * net_hop_us) * 1e-6 + \
        factor * size / (bandwidth_gbs * 1e9)
    return factor * size / t / 1e9


def test_a_slow_network_between_two_dgx1_nodes_is_named_with_its_cost_to_the_step(tmp_path):
    # 16 V100s on two DGX-1s measure 6 GB/s; the DGX-1's 4 EDR NICs give 4 x 100 / 8 x 0.96 = 48 GB/s per
    # node, below NVLink's 6 x 20 = 120, so a ring across the nodes runs at 48.
    measured = _comm_run(tmp_path / "comm", ranks=16, per_node=8, device_name="Tesla V100-SXM2-16GB", busbw_gbs=6.0)
    _bench(tmp_path / "one", world=1, per_device=1200.0, device_name="Tesla V100-SXM2-16GB")
    _bench(tmp_path / "sixteen", world=16, nodes=2, per_device=700.0, device_name="Tesla V100-SXM2-16GB")
    dgx1 = platform("dgx1-v100")
    (e,) = explain(tmp_path / "sixteen", "none", baseline=tmp_path / "one", comm_run=tmp_path / "comm",
                   platform=dgx1, network=inputs.network_from_comm_run(tmp_path / "comm"))
    (found,) = [f for f in e.findings if f.cause.startswith("network slower than the platform")]
    expected = _ring_busbw(256 * MIB, 16, 2, 48.0)
    assert found.cause == (f"network slower than the platform: {measured:.2f} GB/s busbw, dgx1-v100 expects "
                           f"{expected:.2f}")
    assert f"all_reduce busbw {measured:.2f} GB/s at 256 MiB" in found.evidence and "16 nccl ranks" in found.evidence
    assert "NCCL_DEBUG=INFO" in found.change
    assert "`torchrun --nnodes 2 --nproc_per_node 8 -m dlscale comm --op all_reduce -e 268435456`" in found.change
    # The effect: the run's step on the measured network over its step on the DGX-1's, by dlscale predict.
    workload, _ = inputs.workload_from_run(tmp_path / "one")
    slow, fast = (predict([1, 16], workload, Strategy("allreduce"), replace(n, devices_per_node=8))[-1]
                  for n in (inputs.network_from_comm_run(tmp_path / "comm"), dgx1.network()))
    assert found.effect.factor == pytest.approx(slow.step_ms / fast.step_ms) and found.effect.factor > 1.0
    assert "1-rank run one" in found.effect.source


def test_the_platform_is_found_from_the_device_when_one_matches_and_a_fast_network_is_no_cause(tmp_path):
    # 8 H100s in one node: only dgx-h100 has H100s; NVLink 18 x 20.6 = 370.8 GB/s inside it.
    expected = _ring_busbw(256 * MIB, 8, 1, 370.8)
    _comm_run(tmp_path / "slow", ranks=8, per_node=8, device_name="NVIDIA H100 80GB HBM3", busbw_gbs=150.0)
    _bench(tmp_path / "run", world=8, per_device=2000.0, device_name="NVIDIA H100 80GB HBM3")
    (e,) = explain(tmp_path / "run", "none", comm_run=tmp_path / "slow")
    (found,) = [f for f in e.findings if f.cause.startswith("network slower")]
    assert found.cause.endswith(f"dgx-h100 expects {expected:.2f}")
    assert "the one shipped platform with H100s" in found.evidence
    # No 1-rank run: the run's own step stands in for compute.
    assert found.effect.factor > 1.0 and "the run's own step taken as compute" in found.effect.source
    # Within 10% of the platform: checked, not a cause.
    _comm_run(tmp_path / "fast", ranks=8, per_node=8, device_name="NVIDIA H100 80GB HBM3", busbw_gbs=365.0)
    (e,) = explain(tmp_path / "run", "none", comm_run=tmp_path / "fast")
    assert not [f for f in e.findings if f.cause.startswith("network slower")]
    assert any(f"expects {expected:.2f} GB/s" in r.evidence for r in e.ruled_out)


def test_with_no_platform_of_the_device_the_evidence_says_so(tmp_path):
    _comm_run(tmp_path / "gloo", ranks=2, per_node=2, device_name="x86_64", busbw_gbs=0.3, backend="gloo")
    _bench(tmp_path / "v100", world=2, per_device=1000.0, device_name="Tesla V100-SXM2-16GB")
    (e,) = explain(tmp_path / "v100", "none", comm_run=tmp_path / "gloo")
    (said,) = [r.evidence for r in e.ruled_out if r.evidence.startswith("comm run")]
    v100s = [p.id for p in platforms().values() if p.device == "V100"]  # which of them: the user names one
    assert f"not compared: {len(v100s)} shipped platforms have V100s ({', '.join(v100s)}): name one with --platform" \
        in said
    cpu_run = tmp_path / "cpu"
    cpu_run.mkdir()
    (cpu_run / "summary.json").write_text(json.dumps({"kind": "bench", "model": "resnet18", "precision": "fp32",
                                                      "world_size": 2, "device": "cpu", "device_name": "x86_64",
                                                      "batch_size": 8, "img_per_sec_total_mean": 10.0}))
    (e,) = explain(cpu_run, "none", comm_run=tmp_path / "gloo")
    (said,) = [r.evidence for r in e.ruled_out if r.evidence.startswith("comm run")]
    assert "all_reduce busbw 0.30 GB/s" in said and "not compared: no shipped platform has a x86_64" in said


def test_explain_takes_a_comm_run_and_a_platform_together(tmp_path, capsys):
    _comm_run(tmp_path / "comm", ranks=16, per_node=8, device_name="Tesla V100-SXM2-16GB", busbw_gbs=6.0)
    _bench(tmp_path / "run", world=16, nodes=2, per_device=700.0, device_name="Tesla V100-SXM2-16GB")
    code = main(["explain", str(tmp_path / "run"), "--reference", "none", "--comm-run", str(tmp_path / "comm"),
                 "--platform", "dgx1-v100", "--json", str(tmp_path / "e.json")])
    assert code == 0
    (explained,) = json.loads((tmp_path / "e.json").read_text())
    assert any(f["cause"].startswith("network slower than the platform") for f in explained["findings"])
    assert "[communication] network slower than the platform" in capsys.readouterr().out
    assert main(["explain", str(tmp_path / "run"), "--comm-run", str(tmp_path / "run")]) == 2
    assert "is a bench run; give a run directory of dlscale comm" in capsys.readouterr().err
