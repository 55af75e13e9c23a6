"""The prediction model: layer table, collective costs, fit, DDP bucket timelines, monotonicity, inputs."""

import json
import math

import pytest

from dlscale.errors import ConfigError
from dlscale.predict import graphs, timeline
from dlscale.predict.ceilings import Ceilings
from dlscale.predict.layers import forward_macs, model_parameters
from dlscale.predict.model import Strategy, expected_max_standard_normal, predict, predict_point, workload_for_model
from dlscale.predict.network import (
    BUSBW_FACTORS,
    Level,
    Network,
    allreduce_times,
    fit_latency_bandwidth,
)
from dlscale.predict.platforms import platform, platforms

MIB = 1024 * 1024


def net(intra=100.0, inter=10.0, hop_intra=2.0, hop_inter=10.0, per_node=8, base=5.0) -> Network:
    return Network("test", per_node, Level(intra, hop_intra), Level(inter, hop_inter), base_us=base)


# ----------------------------------------------------------------------------- layer table


@pytest.mark.parametrize("name,kwargs", [("resnet50", {}), ("resnet18", {}), ("resnet152", {"width": 8}),
                                         ("resnet50_cifar", {"num_classes": 100, "image_size": 32}),
                                         ("resnet34", {"image_size": 97, "width": 16})])
def test_layer_table_matches_the_torch_models(name, kwargs):
    from dlscale.models import build_model
    from dlscale.models.flops import count_macs

    image_size = kwargs.pop("image_size", 224)
    params = model_parameters(name, image_size=image_size, **kwargs)
    model = build_model(name, **kwargs)
    assert [(p.name, p.numel) for p in params] == [(n, t.numel()) for n, t in model.named_parameters()]
    assert forward_macs(params) == count_macs(model, image_size=image_size)


def test_resnet50_published_size():
    params = model_parameters("resnet50")
    assert sum(p.numel for p in params) == 25_557_032  # torchvision's model page
    assert forward_macs(params) == pytest.approx(4.09e9, rel=0.002)  # torchvision's "GFLOPS 4.09" (MACs)


def test_unknown_model_is_one_line():
    with pytest.raises(ConfigError, match="resnet50"):
        model_parameters("vgg16")


# ----------------------------------------------------------------------------- collectives


def test_busbw_factors_are_nccl_tests():
    # NVIDIA/nccl-tests doc/PERFORMANCE.md: allreduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n, broadcast 1
    assert BUSBW_FACTORS["all_reduce"](2) == 1.0
    assert BUSBW_FACTORS["all_reduce"](8) == 1.75
    assert BUSBW_FACTORS["all_gather"](4) == 0.75
    assert BUSBW_FACTORS["reduce_scatter"](8) == 0.875
    assert BUSBW_FACTORS["broadcast"](64) == 1.0


def test_ring_allreduce_matches_nccl_cost_by_hand():
    # 16 ranks on 2 nodes of 8: 2*(16-2) intra steps + 2*(2-1) inter steps, bandwidth the slower level
    n = net()
    size = 100e6
    expected = (5.0 + 28 * 2.0 + 2 * 10.0) * 1e-6 + 2 * 15 / 16 * size / 10e9
    assert allreduce_times(n, size, 16)["ring"] == pytest.approx(expected)
    # one node: NVLink-level bandwidth and only intra steps
    assert allreduce_times(n, size, 8)["ring"] == pytest.approx((5.0 + 14 * 2.0) * 1e-6 + 1.75 * size / 100e9)
    # NCCL's tree: 2((k-1) intra + log2(m) inter) steps, 2S / (0.92 B)
    tree = (5.0 + 2 * (7 * 2.0 + 1 * 10.0)) * 1e-6 + 2 * size / (0.92 * 10e9)
    assert allreduce_times(n, size, 16)["tree"] == pytest.approx(tree)
    assert allreduce_times(n, size, 1) == {"ring": 0.0, "tree": 0.0, "hierarchical": 0.0, "sharp": 0.0}


def test_fit_recovers_latency_and_bandwidth():
    sizes = [8 * 2 ** k for k in range(26)]
    factor = BUSBW_FACTORS["all_reduce"](4)
    latency, busbw = 37e-6, 12.5e9
    times = [latency + s * factor / busbw for s in sizes]
    fit = fit_latency_bandwidth(sizes, times, factor)
    assert fit.latency_us == pytest.approx(37.0, rel=1e-6)
    assert fit.busbw_gbs == pytest.approx(12.5, rel=1e-6)
    noisy = [t * (1 + 0.03 * math.sin(i)) for i, t in enumerate(times)]  # +-3%
    fit = fit_latency_bandwidth(sizes, noisy, factor)
    assert fit.latency_us == pytest.approx(37.0, rel=0.05)
    assert fit.busbw_gbs == pytest.approx(12.5, rel=0.05)
    with pytest.raises(ConfigError):
        fit_latency_bandwidth([8], [1e-5], factor)


# ----------------------------------------------------------------------------- DDP timelines


def test_ddp_buckets_first_small_then_capped():
    grads = [timeline.Gradient(int(b * MIB), 0.0) for b in (0.5, 0.6, 10, 20, 3)]
    buckets = timeline.ddp_buckets(grads)
    assert [b.gradients for b in buckets] == [2, 2, 1]  # 1.1 MiB >= 1 MiB; 30 MiB >= 25 MiB; the rest
    assert [round(b.bytes / MIB, 1) for b in buckets] == [1.1, 30.0, 3.0]


def test_overlap_all_hidden():
    buckets = [timeline.Bucket(1, t, 1) for t in (0.010, 0.020, 0.030)]
    line = timeline.overlap(buckets, lambda size: 0.005, backward_s=0.040)
    assert line.ends_s == pytest.approx((0.015, 0.025, 0.035))
    assert line.exposed_s == 0.0
    assert line.comm_s == pytest.approx(0.015)


def test_overlap_exposed_tail():
    buckets = [timeline.Bucket(1, t, 1) for t in (0.010, 0.020, 0.030)]
    line = timeline.overlap(buckets, lambda size: 0.005, backward_s=0.030)
    assert line.exposed_s == pytest.approx(0.005)  # the last bucket is ready only when backward ends


def test_overlap_comm_bound():
    buckets = [timeline.Bucket(1, t, 1) for t in (0.001, 0.002, 0.003)]
    line = timeline.overlap(buckets, lambda size: 0.010, backward_s=0.003)
    assert line.starts_s == pytest.approx((0.001, 0.011, 0.021))  # each waits for the one before
    assert line.exposed_s == pytest.approx(0.031 - 0.003)


def test_after_backward_exposes_everything():
    buckets = [timeline.Bucket(1, t, 1) for t in (0.001, 0.002)]
    line = timeline.after_backward(buckets, lambda size: 0.004, backward_s=0.010)
    assert line.exposed_s == pytest.approx(0.008)


def test_horovod_fusion_by_cycle():
    grads = [timeline.Gradient(10, t) for t in (0.0001, 0.0009, 0.0015, 0.0032)]
    buckets = timeline.fusion_buckets(grads, cycle_s=0.001, cap_bytes=15)
    # cycle 1: two gradients but 20 bytes > cap -> two messages; cycle 2: one; cycle 4: one
    assert [(b.bytes, b.ready_s) for b in buckets] == [(10, 0.001), (10, 0.001), (10, 0.002), (10, 0.004)]


def test_workload_gradients_arrive_in_backward_order():
    work = workload_for_model("resnet50", batch_per_device=32, step_s=0.1)
    fractions = [g.ready_fraction for g in work.grads]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert work.grad_bytes == 4 * 25_557_032
    assert work.grads[0].numel == 1000  # fc.bias first: the output layer's gradients are ready first


# ----------------------------------------------------------------------------- the prediction


def _workload():
    return workload_for_model("resnet50", batch_per_device=64, step_s=0.2)


@pytest.mark.parametrize("strategy", [Strategy(), Strategy(overlap="none"), Strategy("gradient_allreduce"),
                                      Strategy("neighbor_allreduce"), Strategy("neighbor_allreduce", schedule="static"),
                                      Strategy("hierarchical_neighbor_allreduce"), Strategy(algorithm="ring")])
def test_more_bandwidth_or_less_latency_never_predicts_less(strategy):
    work = _workload()
    for n in (2, 8, 64, 512):
        rates = [predict_point(n, work, strategy, net(intra=bw, inter=bw / 10)).img_per_s_per_device
                 for bw in (1, 3, 10, 30, 100, 300)]
        assert rates == sorted(rates), (strategy, n, rates)
        rates = [predict_point(n, work, strategy, net(hop_intra=h, hop_inter=5 * h)).img_per_s_per_device
                 for h in (100, 30, 10, 1, 0)]
        assert rates == sorted(rates), (strategy, n, rates)


def test_allreduce_efficiency_never_grows_with_devices_and_ceilings_bind():
    points = predict([1, 2, 8, 64, 512, 4096], _workload(), Strategy(algorithm="ring"), net(inter=1.0))
    efficiency = [p.efficiency for p in points]
    assert efficiency == sorted(efficiency, reverse=True) and efficiency[0] == 1.0
    capped = predict_point(8, _workload(), Strategy(), net(), Ceilings(input_img_per_s=100.0))
    assert capped.img_per_s_per_device == 100.0 and capped.limit == "input"
    noisy = [predict_point(n, _workload(), Strategy(), net(), Ceilings(step_cv=0.05)) for n in (1, 2, 64)]
    assert [p.stragglers_ms for p in noisy] == sorted(p.stragglers_ms for p in noisy) and noisy[0].stragglers_ms == 0


def test_expected_max_of_normals():
    assert expected_max_standard_normal(1) == 0.0
    assert expected_max_standard_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-4)  # exact: 1/sqrt(pi)
    assert expected_max_standard_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), rel=1e-4)


def test_strong_scaling_and_zero_devices():
    points = predict([8, 64], _workload(), Strategy(), net(), global_batch=3200)
    assert [p.batch_per_device for p in points] == [400, 50]
    with pytest.raises(ConfigError, match="split"):
        predict([3], _workload(), Strategy(), net(), global_batch=3200)
    with pytest.raises(ConfigError, match="positive"):
        predict([0, 8], _workload(), Strategy(), net())


def test_cpu_ranks_that_fill_the_cores_cannot_hide_communication():
    cpu = workload_for_model("resnet18", batch_per_device=16, step_s=0.2, cpu_threads=1, cpu_cores=2)
    slow = net(intra=0.5, inter=0.5, per_node=4)
    two = predict_point(2, cpu, Strategy(), slow)
    assert two.exposed_ms == pytest.approx(two.comm_ms)  # 2 ranks x 1 thread on 2 cores: none hidden
    four = predict_point(4, cpu, Strategy(), slow)
    assert four.compute_ms == pytest.approx(2 * two.compute_ms)  # 4 ranks share 2 cores


# ----------------------------------------------------------------------------- graphs and platforms


@pytest.mark.parametrize("name", ["exp2", "ring", "mesh", "star", "full"])
def test_graphs_match_decentralized_topology(name):
    from dlscale.decentralized import topology
    from dlscale.strategies import TOPOLOGIES

    for n in (2, 3, 5, 8, 12):
        matrix = TOPOLOGIES[name](n)
        for rank in range(n):
            assert sorted(graphs.out_neighbors(name, n, rank)) == topology.out_neighbors(matrix, rank), (n, rank)


def test_one_peer_and_inner_outer_traffic():
    # exp2 over 16 ranks, 8 per node: offsets 1, 2, 4 stay mostly inside, offset 8 leaves every node
    one_peer = graphs.traffic("exp2", "one_peer", 16, 8)
    assert one_peer.messages == 1 and one_peer.inter == pytest.approx((1 + 2 + 4 + 8) / 4)
    assert graphs.traffic("exp2", "static", 16, 8).inter == 1 + 2 + 4 + 8
    assert graphs.traffic("exp2", "inner_outer", 16, 8) == graphs.Traffic(1, 1, 1)
    assert graphs.traffic("full", "static", 4096, 8).inter == 8 * (4096 - 8)


def test_every_platform_figure_cites_a_source():
    known = platforms()
    assert {"dgx1-v100", "dgx-a100", "dgx-h100", "aws-p3.16xlarge", "hal-ac922", "marconi100"} <= set(known)
    h100 = platform("dgx-h100").network()
    assert h100.intra.bandwidth_gbs == pytest.approx(18 * 20.6)  # NVLink4 links x NCCL's SM90 GB/s per link
    assert h100.inter.bandwidth_gbs == pytest.approx(8 * 400 / 8 * 0.96)
    with pytest.raises(ConfigError, match="dgx-h100"):
        platform("dgx-z100")


def test_wrong_kind_of_run_directory(tmp_path):
    from dlscale.predict import inputs

    (tmp_path / "summary.json").write_text(json.dumps({"kind": "comm"}))
    with pytest.raises(ConfigError, match="is a comm run"):
        inputs.workload_from_run(tmp_path)
    with pytest.raises(ConfigError, match="no summary.json"):
        inputs.network_from_comm_run(tmp_path / "missing")


def test_profile_run_gives_the_split_and_the_gradient_times(tmp_path):
    from dlscale.predict import inputs

    breakdown = {"step_ms": 100.0, "data_ms": 10.0, "forward_ms": 30.0, "backward_ms": 55.0, "optimizer_ms": 5.0,
                 "exposed_comm_ms": 5.0}
    ready = [{"name": "fc.bias", "numel": 10, "ready_ms": 1.0}, {"name": "fc.weight", "numel": 5120, "ready_ms": 2.0},
             {"name": "conv1.weight", "numel": 9408, "ready_ms": 50.0}]
    (tmp_path / "summary.json").write_text(json.dumps({
        "kind": "profile", "model": "resnet18", "batch_size": 32, "image_size": 64, "device": "cuda",
        "breakdown": [{"rank": 0, **breakdown}], "grad_ready": ready}))
    work, spread = inputs.workload_from_run(tmp_path)
    assert spread is None
    assert work.step_s == pytest.approx(0.085)  # 100 - 10 data - 5 exposed communication
    assert work.forward_fraction == pytest.approx(30 / 85) and work.backward_fraction == pytest.approx(50 / 85)
    assert [(g.numel, g.ready_fraction) for g in work.grads] == [(10, 0.02), (5120, 0.04), (9408, 1.0)]
