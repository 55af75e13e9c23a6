"""dlscale predict's machines and what they add to a step: PCIe inside a node, another fabric, in-network
reduction (SHARP), the 2D scheme, BatchNorm groups, the default spread of step times per kind of machine and its
order-statistics term, and the end-to-end rate; each against hand arithmetic from the sources' constants."""

import math

import pytest

from dlscale.errors import ConfigError
from dlscale.predict import platforms as platforms_file
from dlscale.predict.ceilings import Ceilings
from dlscale.predict.endtoend import Schedule, end_to_end
from dlscale.predict.model import (
    Strategy,
    expected_max_standard_normal,
    norm_group_time,
    predict,
    predict_point,
    workload_for_model,
)
from dlscale.predict.network import Level, Network, allreduce_time, allreduce_times
from dlscale.predict.platforms import platform, platforms
from dlscale.predict.spread import cloud_tcp, dedicated, default_spread

MS = 1e-3


def test_pcie_platforms_from_nccl_lane_and_socket_figures():
    # NCCL: a link is width x speed / 80 GB/s (Gen4: 120, Gen3: 60 per lane); a ring across two Skylake-class
    # sockets runs at SKL_QPI_BW = 10 GB/s.
    r750 = platform("r750xa-a100-pcie")
    assert r750.intra_kind == "pcie" and r750.intra_gbs == pytest.approx(min(16 * 120 / 80, 10.0))
    assert platform("dss8440-a100-pcie").intra_gbs == pytest.approx(min(16 * 60 / 80, 10.0))
    assert r750.network().intra.hop_us == 5.7  # NCCL's PCI step latency, not NVLink's 3.4
    assert platform("xe8545-a100").inter_gbs == pytest.approx(2 * 200 / 8 * 0.96)  # two HDR rails
    assert platform("dgx2h").network().devices_per_node == 16 and platform("dgx2h").inter_gbs == pytest.approx(96.0)


def test_every_platform_has_a_class_a_kind_and_a_transport():
    for chosen in platforms().values():
        assert chosen.machine_class and chosen.kind in ("dedicated", "cloud-tcp") and chosen.transport in (
            "ib", "roce", "tcp"), chosen.id


@pytest.mark.parametrize("field,value,choices", [("kind", "dedicate", "dedicated, cloud-tcp"),
                                                 ("transport", "infiniband", "ib, roce, tcp")])
def test_a_platforms_kind_and_transport_are_checked_where_they_are_read(monkeypatch, field, value, choices):
    """A kind the spread does not know would silently take the stragglers out; a transport, take InfiniBand's
    figures: each is one line naming the platform, the field and its value."""
    data = platforms_file._load()
    data["platforms"][0][field] = value
    monkeypatch.setattr(platforms_file, "_load", lambda: data)
    with pytest.raises(ConfigError, match=f"^platform dgx1-v100: {field}='{value}'; choose one of {choices} in its "):
        platforms()


def test_another_fabric_is_refused_a_transport_nccl_has_not():
    with pytest.raises(ConfigError, match="^platform dgx-a100: transport='infiniband'; choose one of ib, roce, tcp"):
        platform("dgx-a100").with_fabric(None, None, "infiniband")


def test_another_fabric_for_a_platforms_nodes():
    roce = platform("dgx-a100").with_fabric(2, 100.0, "roce")
    assert roce.inter_gbs == pytest.approx(2 * 100 / 8 * 0.96) and roce.transport == "roce"
    assert roce.intra_gbs == platform("dgx-a100").intra_gbs and "fabric given" in roce.label


def test_the_transport_sets_the_fabrics_bandwidth_and_latency():
    # InfiniBand verbs, and RoCE, which NCCL runs on the same transport: 0.96 of line rate, 14 us per network step.
    for transport in ("ib", "roce"):
        chosen = platform("dgx-a100").with_fabric(2, 100.0, transport)
        assert chosen.inter_gbs == pytest.approx(2 * 100 / 8 * 0.96) and chosen.network().inter.hop_us == 14.0
    # TCP sockets: half the line rate (the median of published nccl-tests sweeps), 33.6 us per network step (a
    # published 2-node 8-byte broadcast, 42.0 us, less NCCL's 8.4 us per call).
    tcp = platform("dgx-a100").with_fabric(2, 100.0, "tcp")
    assert tcp.inter_gbs == pytest.approx(2 * 100 / 8 * 0.5) and tcp.network().inter.hop_us == pytest.approx(33.6)
    assert platform("aws-p3.16xlarge").inter_gbs == pytest.approx(25 / 8 * 0.5)
    # A ring allreduce of 100 MB over 8 nodes of 8 over TCP, by hand: 8.4 us + 2 x 56 NVLink steps of 3.4 us +
    # 2 x 7 network steps of 33.6 us, and 2 x 63/64 of the bytes through the slower level, 12.5 GB/s per node.
    expected = (8.4 + 2 * 56 * 3.4 + 2 * 7 * 33.6) * 1e-6 + 2 * 63 / 64 * 100e6 / (12.5e9)
    assert allreduce_times(tcp.network(), 100e6, 64)["ring"] == pytest.approx(expected)
    ib = platform("dgx-a100").with_fabric(2, 100.0, "ib").network()
    assert allreduce_times(ib, 100e6, 64)["ring"] < 0.55 * allreduce_times(tcp.network(), 100e6, 64)["ring"]


def net(intra=100.0, inter=10.0, hop_intra=2.0, hop_inter=10.0, per_node=8, base=5.0) -> Network:
    return Network("test", per_node, Level(intra, hop_intra), Level(inter, hop_inter), base_us=base)


def test_sharp_by_hand():
    # CollNet Direct: latency 2 (min(1, k-1) x 3.7 + (k-1) x 0.4) + 31 us; bandwidth the slower of the node's
    # reduce-scatter and all-gather over NVLink and one pass of the data through 0.9 of its NICs.
    n, size = net(), 100e6
    latency = (2 * (3.7 + 7 * 0.4) + 31.0) * 1e-6
    expected = latency + max(2 * 7 / 8 * size / 100e9, size / (0.9 * 10e9))
    assert allreduce_times(n, size, 64)["sharp"] == pytest.approx(expected)
    assert allreduce_times(n, size, 8)["sharp"] == allreduce_times(n, size, 8)["ring"]  # one node: no switch
    assert allreduce_time(n, size, 64, "auto") == min(allreduce_times(n, size, 64)[a] for a in ("ring", "tree"))


def test_hierarchical_takes_the_faster_of_ring_and_tree_across_nodes():
    n, size, m = net(), 100e6, 64
    in_node = 5e-6 + 7 * 2e-6 + 7 / 8 * size / 100e9
    ring = 2 * (m - 1) * 10e-6 + 2 * (m - 1) / m * size / 10e9
    tree = 2 * math.log2(m) * 10e-6 + 2 * size / (0.92 * 10e9)
    assert allreduce_times(n, size, 8 * m)["hierarchical"] == pytest.approx(2 * in_node + 5e-6 + min(ring, tree))


def test_batchnorm_groups_by_hand():
    work = workload_for_model("resnet18", batch_per_device=32, step_s=0.05)
    n = net()
    channels = [64] * 5 + [128] * 5 + [256] * 5 + [512] * 5  # resnet18's 20 BatchNorms, downsampling's included
    expected = sum(2 * allreduce_time(n, 8 * c, 2) for c in channels)
    assert norm_group_time(work, Strategy(norm_group=2), n, 16) == pytest.approx(expected)
    assert norm_group_time(work, Strategy(), n, 16) == 0.0
    one = predict_point(16, work, Strategy(), n)
    grouped = predict_point(16, work, Strategy(norm_group=2), n)
    assert grouped.exposed_ms - one.exposed_ms == pytest.approx(1e3 * expected)
    with pytest.raises(ConfigError, match="BatchNorm group"):
        Strategy(norm_group=0)


def test_default_spreads_from_their_sources():
    # PyTorch's DDP benchmark: p50 = p95 = 0.097 s to the millisecond, so p95 - p50 < 1 ms = 1.645 sigma.
    assert dedicated().cv == pytest.approx(0.001 / 1.6449 / 0.097)
    assert dedicated().cv == pytest.approx(0.0063, abs=5e-5) and "pytorch/pytorch@bf69c149" in dedicated().source
    # BlueFog's sample: 4,310.6 +- 146.9 img/s on 16 GPUs, iterations of 10 steps.
    assert cloud_tcp().cv == pytest.approx(146.9 * math.sqrt(16) / (1.96 * 4310.6) * math.sqrt(10))
    assert default_spread("dedicated") == dedicated() and default_spread(None) is None


def test_the_stragglers_term_is_the_expected_maximum_by_hand():
    # E[max of 2 standard normals] = 1/sqrt(pi): a step waits for the slower of two devices.
    work = workload_for_model("resnet18", batch_per_device=32, step_s=0.05)
    point = predict_point(2, work, Strategy(), net(), Ceilings(step_cv=0.01))
    assert point.stragglers_ms == pytest.approx(50.0 * 0.01 / math.sqrt(math.pi), rel=1e-4)
    assert expected_max_standard_normal(2048) == pytest.approx(3.4, abs=0.05)  # thousands: several sigma
    # Zero spread gives today's figures: the step is compute and exposed communication alone.
    for none in (Ceilings(), Ceilings(step_cv=0.0)):
        plain = predict([1, 16], work, Strategy(), net(), none)[-1]
        assert plain.stragglers_ms == 0.0 and plain.step_ms == pytest.approx(plain.compute_ms + plain.exposed_ms)


def test_end_to_end_by_hand():
    work = workload_for_model("resnet18", batch_per_device=32, step_s=0.05)
    point = predict_point(16, work, Strategy(), net())
    schedule = Schedule(8, eval_every=4, startup_s=30.0, train_images=1000, eval_images=100)
    done = end_to_end(schedule, point)
    # 2 evaluations of ceil(100 / (16 x 32)) = 1 step each, a third of the compute; 8 epochs at the step rate.
    evaluation = 2 * 1 * point.compute_ms / 1e3 / 3
    total = 30.0 + 8 * 1000 / point.img_per_s_total + evaluation
    assert done.evaluation_s == pytest.approx(evaluation) and done.time_to_train_s == pytest.approx(total)
    assert done.img_per_s == pytest.approx(8000 / total) and done.img_per_s < point.img_per_s_total
    assert "UNKNOWN, TAKEN AS ZERO" in Schedule(1).describe()
    with pytest.raises(ConfigError, match="--eval-every"):
        Schedule(1, eval_every=0)
