"""neighbor_allreduce and friends on gloo ranks, checked with BlueFog's own test rules.

The rules and the derived concrete values are those of docs/references.md#bluefog-test-values (BlueFog's
test/torch_ops_test.py and torch_hierarchical_test.py), x_r = r unless said otherwise.
Spawning costs seconds on the CI's two cores, so each world size is spawned once (a
module-scoped fixture) and every check reads its own part of the per-rank results.
"""

import math
import os

import pytest
from multiproc import run_ranks

from dlscale.decentralized import topology

pytestmark = pytest.mark.distributed

EPSILON = 1e-5  # BlueFog's tolerance for float32/float64
LOOSE = 1e-3  # ... and for float16
DTYPES = ["float16", "float32", "float64"]


# --------------------------------------------------------------------------- rank functions


def _span(y):
    """[min, max] of a tensor as floats: equal when every element got the same value."""
    return [y.double().min().item(), y.double().max().item()]


def _catch(fn):
    """Run fn; return the ValueError/RuntimeError it raised as 'Type: message', else None."""
    try:
        fn()
    except (ValueError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _default_topology_checks(rank, size, dc, torch):
    ring = (rank - 1) % size, (rank + 1) % size
    in_nbrs = topology.in_neighbors(topology.exponential_graph(size), rank)
    out_nbrs = topology.out_neighbors(topology.exponential_graph(size), rank)
    k = len(in_nbrs)
    res = {"in_nbrs": in_nbrs}
    res["avg"] = {f"{dt}-{dim}": _span(dc.neighbor_allreduce(
                      torch.full([5] * dim, float(rank), dtype=getattr(torch, dt))))
                  for dt in DTYPES for dim in (1, 2, 3)}
    ones = dict.fromkeys(in_nbrs, 1.0)
    res["sum"] = _span(dc.neighbor_allreduce(torch.full((5, 5), float(rank), dtype=torch.float64),
                                             self_weight=1.0, src_weights=ones))
    tiny = torch.full((5,), 2.0**-256, dtype=torch.float64)
    res["avg_precision_exact"] = bool((dc.neighbor_allreduce(tiny) == 2.0**-256).all())
    summed = dc.neighbor_allreduce(tiny, self_weight=1.0, src_weights=ones)
    res["sum_precision_exact"] = bool((summed == (k + 1) * 2.0**-256).all())
    x = torch.full((5,), float(rank), dtype=torch.float64)
    res["input_untouched"] = bool((x == rank).all())
    w = 1.0 / (k + 1)
    res["dynamic_avg"] = _span(dc.neighbor_allreduce(x, self_weight=w, src_weights=dict.fromkeys(in_nbrs, w),
                                                     dst_weights=out_nbrs))
    res["move"] = _span(dc.neighbor_allreduce(x, self_weight=0.0, src_weights={ring[0]: 1.0}, dst_weights=[ring[1]]))
    res["move_outside"] = _span(dc.neighbor_allreduce(x, self_weight=0.0, src_weights={ring[1]: 1.0},
                                                      dst_weights=[ring[0]]))
    if rank % 2 == 0:
        empty = dc.neighbor_allreduce(x, self_weight=1.0, src_weights={}, dst_weights=[rank + 1])
    else:
        empty = dc.neighbor_allreduce(x, self_weight=1.0, src_weights={rank - 1: 1.0}, dst_weights=[])
    res["empty_send"] = _span(empty)
    res["dst_weight"] = _span(dc.neighbor_allreduce(x, self_weight=0.5, src_weights=ones,
                                                    dst_weights=dict.fromkeys(out_nbrs, 0.5)))
    res["no_check"] = _span(dc.neighbor_allreduce(x, self_weight=0.0, src_weights={ring[0]: 1.0},
                                                  dst_weights=[ring[1]], enable_topo_check=False))
    return res


def _set_topology_checks(rank, size, dc, torch):
    x = torch.full((3, 4), float(rank), dtype=torch.float64)
    res = {}
    for style in (0, 1, 2):
        dc.set_topology(topology.ring_graph(size, style))
        res[f"ring{style}"] = _span(dc.neighbor_allreduce(x))
    res["star"] = []
    for center in range(size):
        dc.set_topology(topology.star_graph(size, center))
        res["star"].append(_span(dc.neighbor_allreduce(x)))
    dc.set_topology(topology.star_graph(size), is_weighted=True)
    res["star_weighted"] = _span(dc.neighbor_allreduce(x))
    res["is_weighted"] = dc.is_topology_weighted()
    for weighted in (False, True):
        dc.set_topology(topology.mesh_grid_2d_graph(size), is_weighted=weighted)
        res[f"mesh_weighted={weighted}"] = _span(dc.neighbor_allreduce(x))
    dc.set_topology(topology.fully_connected_graph(size))
    torch.manual_seed(rank)
    r = torch.randn(7, 3, dtype=torch.float64)
    expected = r.clone()
    torch.distributed.all_reduce(expected)
    res["full_vs_allreduce"] = (dc.neighbor_allreduce(r) - expected / size).abs().max().item()
    for name, graph, steps in (("expo", topology.exponential_two_graph(size), 50),
                               ("ring", topology.ring_graph(size), 100)):
        dc.set_topology(graph)
        y = torch.tensor([float(rank)], dtype=torch.float64)
        for _ in range(steps):
            y = dc.neighbor_allreduce(y)
        res[f"converged_{name}"] = y.item()
    return res


def _error_checks(rank, size, dc, torch):
    dc.set_topology(topology.exponential_graph(size))
    x = torch.full((4,), float(rank))
    ring = (rank - 1) % size, (rank + 1) % size
    in_nbrs = topology.in_neighbors(dc.get_topology(), rank)
    res = {
        "self_without_src": _catch(lambda: dc.neighbor_allreduce(x, self_weight=0.5)),
        "src_without_self": _catch(lambda: dc.neighbor_allreduce(x, src_weights={in_nbrs[0]: 0.5})),
        "src_not_in_neighbor": _catch(lambda: dc.neighbor_allreduce(x, self_weight=0.5, src_weights={ring[1]: 0.5})),
        "duplicate_dst": _catch(lambda: dc.neighbor_allreduce(x, self_weight=0.0, src_weights={ring[0]: 1.0},
                                                             dst_weights=[ring[1], ring[1]])),
        "dst_without_weights": _catch(lambda: dc.neighbor_allreduce(x, dst_weights=[ring[1]])),
        "topo_check": _catch(lambda: dc.neighbor_allreduce(x, self_weight=0.0, src_weights={ring[0]: 1.0},
                                                          dst_weights=[(rank + 2) % size])),
        "set_topology_mismatch": _catch(lambda: dc.set_topology(topology.ring_graph(size) if rank == 1
                                                                else topology.exponential_graph(size))),
        "set_topology_bad_on_one_rank": _catch(lambda: dc.set_topology([[1.0, 2.0]] if rank == 0
                                                                       else topology.ring_graph(size))),
        "set_topology_wrong_size": _catch(lambda: dc.set_topology(topology.ring_graph(size + 1))),
    }
    res["topology_kept"] = bool(torch.equal(dc.get_topology(), topology.exponential_graph(size)))
    res["still_works"] = _span(dc.neighbor_allreduce(x))  # no stray message left behind
    return res


def _hierarchical_checks(rank, size, dc, torch):
    local_size = int(os.environ["LOCAL_WORLD_SIZE"])
    machines, machine = size // local_size, rank // local_size
    local_rank = rank % local_size
    x = torch.full((3, 5), (rank - (local_size - 1) / 2) / local_size, dtype=torch.float64)  # machine mean = m
    res = {"default": _span(dc.hierarchical_neighbor_allreduce(x))}
    dc.set_machine_topology(topology.exponential_graph(machines))
    res["expo"] = _span(dc.hierarchical_neighbor_allreduce(x))
    nxt, prv = (machine + 1) % machines, (machine - 1) % machines
    hierarchical = dc.hierarchical_neighbor_allreduce
    if machines > 2:  # ExponentialGraph(4): m + 1 is no in-neighbor, m - 1 no out-neighbor (BlueFog raises)
        res["not_neighbors"] = _catch(lambda: hierarchical(
            x, self_weight=0.0, src_machine_weights={nxt: 1.0}, dst_machine_weights=[prv]))
    res["static_weights"] = _catch(lambda: hierarchical(x, self_weight=0.5, src_machine_weights={prv: 0.5}))
    res["empty_send"] = _catch(lambda: hierarchical(x, self_weight=1.0, src_machine_weights={}, dst_machine_weights=[]))
    res["int_self_weight"] = _catch(lambda: hierarchical(
        x, self_weight=0, src_machine_weights={prv: 1.0}, dst_machine_weights=[nxt]))
    dc.set_machine_topology(topology.ring_graph(machines))  # both ways: m - 1 and m + 1 are neighbours
    res["move"] = _span(hierarchical(
        x, self_weight=0.0, src_machine_weights={nxt: 1.0}, dst_machine_weights=[prv], enable_topo_check=True))
    res["move_dst_weight"] = _span(hierarchical(
        x, self_weight=0.0, src_machine_weights={nxt: 0.5}, dst_machine_weights={prv: 2.0}))
    if machines > 2:  # everyone sends to m + 1 and expects m + 1: neighbours, but unmatched
        res["machine_topo_check"] = _catch(lambda: hierarchical(
            x, self_weight=0.0, src_machine_weights={nxt: 1.0}, dst_machine_weights=[nxt], enable_topo_check=True))
    dc.reset_comm_stats()
    dc.hierarchical_neighbor_allreduce(x)
    res["stats"] = dc.comm_stats()
    res["local_rank"] = local_rank
    res["wrong_local_size"] = _catch(lambda: dc.set_machine_topology(topology.exponential_graph(2), local_size=3))
    dc.set_machine_topology(topology.exponential_graph(size), local_size=1)
    res["local_size_one"] = _catch(lambda: dc.hierarchical_neighbor_allreduce(x))
    return res


def _misc_checks(rank, size, dc, torch):
    res = {}
    x = torch.full((10,), float(rank), dtype=torch.float32)
    dc.set_topology(topology.exponential_graph(size))
    dc.reset_comm_stats()
    dc.neighbor_allreduce(x)
    res["stats_after_one"] = dc.comm_stats()
    res["allreduce_avg"] = dc.allreduce(x).tolist()[0]
    res["allreduce_sum"] = dc.allreduce(x, average=False).tolist()[0]
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3))
    model[0].weight.data = model[0].weight.data.to(memory_format=torch.channels_last)
    model[1].running_mean += rank
    model[1].num_batches_tracked += rank
    root_state = [t.flatten().tolist() for t in model.state_dict().values()] if rank == 1 else None
    dc.broadcast_parameters(model, root=1)
    res["state"] = [t.flatten().tolist() for t in model.state_dict().values()]
    res["root_state"] = root_state
    res["bad_root"] = _catch(lambda: dc.broadcast_parameters(model, root=size))
    return res


def _four_ranks(rank, size):
    import torch

    from dlscale import decentralized as dc

    return {
        "default": _default_topology_checks(rank, size, dc, torch),
        "set": _set_topology_checks(rank, size, dc, torch),
        "errors": _error_checks(rank, size, dc, torch),
        "hier": _hierarchical_checks(rank, size, dc, torch),
        "misc": _misc_checks(rank, size, dc, torch),
    }


def _eight_ranks(rank, size):
    import torch

    from dlscale import decentralized as dc

    x = torch.full((4,), float(rank), dtype=torch.float64)
    res = {"default": _span(dc.neighbor_allreduce(x)), "hier": _hierarchical_checks(rank, size, dc, torch)}
    dc.set_topology(topology.symmetric_exponential_graph(size))
    res["symmetric"] = _span(dc.neighbor_allreduce(x))
    for weighted in (False, True):
        dc.set_topology(topology.mesh_grid_2d_graph(size), is_weighted=weighted)
        res[f"mesh_weighted={weighted}"] = _span(dc.neighbor_allreduce(x))
    dc.set_topology(topology.exponential_two_graph(size))
    schedule = topology.dynamic_one_peer_schedule(dc.get_topology(), rank)
    res["one_peer"] = []
    for _ in range(4):
        send, recv = next(schedule)
        w = 1.0 / (len(recv) + 1)
        y = dc.neighbor_allreduce(x, self_weight=w, src_weights=dict.fromkeys(recv, w), dst_weights=send)
        res["one_peer"].append([send, recv, _span(y)])
    inner_outer = topology.inner_outer_exp2_schedule(size, 4, rank)  # two machines of four
    res["inner_outer"] = []
    for _ in range(4):  # as BlueFog's benchmark weighs it: 1 / (len(recv) + 1), no topology check
        send, recv = next(inner_outer)
        w = 1.0 / (len(recv) + 1)
        y = dc.neighbor_allreduce(x, self_weight=w, src_weights=dict.fromkeys(recv, w), dst_weights=send,
                                  enable_topo_check=False)
        res["inner_outer"].append([send, recv, _span(y)])
    return res


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def four():
    return run_ranks(_four_ranks, 4, env={"LOCAL_WORLD_SIZE": "2"})  # hang guards: multiproc.hang_guard_s


@pytest.fixture(scope="module")
def eight():
    return run_ranks(_eight_ranks, 8, env={"LOCAL_WORLD_SIZE": "2"})  # hang guards: multiproc.hang_guard_s


def _assert_all(values, expected, tol=EPSILON):
    """values: per-rank [min, max] spans; expected: per-rank numbers."""
    assert len(values) == len(expected)
    for rank, ((low, high), want) in enumerate(zip(values, expected, strict=True)):
        assert low == pytest.approx(want, abs=tol) and high == pytest.approx(want, abs=tol), (rank, low, high, want)


# --------------------------------------------------------------------------- default topology


def test_default_average_follows_bluefog_rule(four):
    n = 4
    k = math.ceil(math.log2(n))
    for rank, result in enumerate(four):
        want = (rank + sum((rank - 2**i) % n for i in range(k))) / (k + 1)
        assert result["default"]["in_nbrs"] == sorted((rank - 2**i) % n for i in range(k))
        for key, (low, high) in result["default"]["avg"].items():
            tol = LOOSE if key.startswith("float16") else EPSILON
            assert low == pytest.approx(want, abs=tol) and high == pytest.approx(want, abs=tol), (rank, key)


def test_default_average_concrete_values(four, eight):
    _assert_all([r["default"]["avg"]["float64-1"] for r in four], [5 / 3, 4 / 3, 1, 2])
    _assert_all([r["default"] for r in eight], [4.25, 3.25, 2.25, 3.25, 2.25, 3.25, 4.25, 5.25])


def test_unit_weights_give_exact_sums(four):
    assert [r["default"]["sum"] for r in four] == [[s, s] for s in (5.0, 4.0, 3.0, 6.0)]


def test_tiny_values_come_back_bit_exact(four):
    assert all(r["default"]["avg_precision_exact"] for r in four)
    assert all(r["default"]["sum_precision_exact"] for r in four)


def test_input_tensor_is_not_modified(four):
    assert all(r["default"]["input_untouched"] for r in four)


def test_dynamic_weights_equal_to_static_average(four):
    _assert_all([r["default"]["dynamic_avg"] for r in four], [5 / 3, 4 / 3, 1, 2])


def test_dynamic_move_inside_and_outside_static_topology(four):
    _assert_all([r["default"]["move"] for r in four], [(r - 1) % 4 for r in range(4)])
    _assert_all([r["default"]["no_check"] for r in four], [(r - 1) % 4 for r in range(4)])
    _assert_all([r["default"]["move_outside"] for r in four], [(r + 1) % 4 for r in range(4)])


def test_empty_send_neighbors(four):
    _assert_all([r["default"]["empty_send"] for r in four], [r if r % 2 == 0 else 2 * r - 1 for r in range(4)])


def test_destination_weights_applied_by_sender(four):
    _assert_all([r["default"]["dst_weight"] for r in four], [0.5 * s for s in (5, 4, 3, 6)])


# --------------------------------------------------------------------------- set_topology


def test_ring_styles(four):
    _assert_all([r["set"]["ring0"] for r in four], [4 / 3, 1, 2, 5 / 3])
    _assert_all([r["set"]["ring1"] for r in four], [0.5, 1.5, 2.5, 1.5])
    _assert_all([r["set"]["ring2"] for r in four], [1.5, 0.5, 1.5, 2.5])


def test_star_every_center(four):
    n = 4
    for center in range(n):
        want = [(n - 1) / 2 if r == center else (r + center) / 2 for r in range(n)]
        _assert_all([r["set"]["star"][center] for r in four], want)
    _assert_all([r["set"]["star"][0] for r in four], [1.5, 0.5, 1.0, 1.5])


def test_weighted_star_uses_matrix_columns(four):
    _assert_all([r["set"]["star_weighted"] for r in four], [1.5, 0.75, 1.5, 2.25])
    assert all(r["set"]["is_weighted"] for r in four)


def test_mesh_uniform_and_weighted(four):
    _assert_all([r["set"]["mesh_weighted=False"] for r in four], [1, 4 / 3, 5 / 3, 2])
    _assert_all([r["set"]["mesh_weighted=True"] for r in four], [1, 4 / 3, 5 / 3, 2])  # 2x2: MH = uniform


def test_mesh_eight_ranks_uniform_and_weighted(eight):
    W = topology.mesh_grid_2d_graph(8)  # 2 x 4: degrees 3 and 4 (self counted), so MH weights differ
    uniform = [sum(topology.in_neighbors(W, r) + [r]) / (len(topology.in_neighbors(W, r)) + 1) for r in range(8)]
    weighted = [sum(W[s, r].item() * s for s in range(8)) for r in range(8)]
    assert uniform != pytest.approx(weighted)
    _assert_all([r["mesh_weighted=False"] for r in eight], uniform)
    _assert_all([r["mesh_weighted=True"] for r in eight], weighted)


def test_fully_connected_equals_allreduce_average(four):
    assert max(r["set"]["full_vs_allreduce"] for r in four) < 1e-12


def test_repeated_averaging_converges_to_global_mean(four):
    assert [r["set"]["converged_expo"] for r in four] == pytest.approx([1.5] * 4, abs=1e-9)
    assert [r["set"]["converged_ring"] for r in four] == pytest.approx([1.5] * 4, abs=1e-9)


def test_symmetric_exponential_and_one_peer_schedule(eight):
    n = 8
    _assert_all([r["symmetric"] for r in eight],
                [(r + (r + 1) % n + (r - 1) % n + (r + 4) % n) / 4 for r in range(n)])
    assert [step[:2] for step in eight[0]["one_peer"]] == [[[1], [7]], [[2], [6]], [[4], [4]], [[1], [7]]]
    for rank, result in enumerate(eight):  # each step averages with the one rank that sent here
        for distance, (_, recv, span) in zip((1, 2, 4, 1), result["one_peer"], strict=True):
            assert recv == [(rank - distance) % n]
            assert span == pytest.approx([(rank + (rank - distance) % n) / 2] * 2)


def test_inner_outer_exp2_exchanges_average_pairs(eight):
    # Two machines of four: at each step every rank has exactly one peer (one local rank crosses to the
    # same local rank of the other machine, the rest pair inside), so y = (r + peer) / 2. Step 0: local 0
    # crosses, 0 <-> 4; inside machine 0 distance 1 skipping local 0: 1 -> 2 -> 3 -> 1 (from 3, 1, 2).
    first = [r["inner_outer"][0] for r in eight]
    assert [step[:2] for step in first[:4]] == [[[4], [4]], [[2], [3]], [[3], [1]], [[1], [2]]]
    for rank, result in enumerate(eight):
        for step, (send, recv, span) in enumerate(result["inner_outer"]):
            assert eight[send[0]]["inner_outer"][step][1] == [rank]  # the peer expects this rank
            assert span == pytest.approx([(rank + recv[0]) / 2] * 2)


# --------------------------------------------------------------------------- errors


def test_validation_errors_match_the_reference(four):
    for result in four:
        errors = result["errors"]
        assert errors["self_without_src"] == (
            "ValueError: Arguments self_weight and src_weights have to be presented at the same time"
        )
        assert errors["src_without_self"] == errors["self_without_src"]
        message = errors["src_not_in_neighbor"]
        assert message.startswith("ValueError:") and "in-neighbors" in message
        assert errors["duplicate_dst"].startswith("ValueError:") and "twice" in errors["duplicate_dst"]
        assert errors["dst_without_weights"].startswith("ValueError:")


def test_mismatched_sends_and_receives_raise_on_every_rank(four):
    for result in four:
        assert result["errors"]["topo_check"].startswith("ValueError: sends and receives do not match")


def test_set_topology_mismatch_raises_on_every_rank_instead_of_hanging(four):
    for result in four:
        errors = result["errors"]
        assert errors["set_topology_mismatch"].startswith(
            "ValueError: set_topology: ranks passed different matrices or settings: [0, 2, 3] | [1]")
        assert errors["set_topology_bad_on_one_rank"].startswith(
            "ValueError: set_topology: ranks passed different matrices or settings: [0] | [1, 2, 3]")
        assert "world_size=4" in errors["set_topology_wrong_size"]
        assert result["errors"]["topology_kept"]
    _assert_all([r["errors"]["still_works"] for r in four], [5 / 3, 4 / 3, 1, 2])


# --------------------------------------------------------------------------- hierarchical


def test_hierarchical_two_machines(four):
    hier = [r["hier"] for r in four]
    _assert_all([h["default"] for h in hier], [0.5] * 4)  # machines hold 0 and 1; ExponentialGraph(2)
    _assert_all([h["expo"] for h in hier], [0.5] * 4)
    _assert_all([h["move"] for h in hier], [1, 1, 0, 0])
    _assert_all([h["move_dst_weight"] for h in hier], [1, 1, 0, 0])
    assert [h["local_rank"] for h in hier] == [0, 1, 0, 1]
    leaders = [h["stats"] for h in hier if h["local_rank"] == 0]
    others = [h["stats"] for h in hier if h["local_rank"] != 0]
    assert all(s["p2p_messages_sent"] == 1 and s["p2p_bytes_sent"] == 15 * 8 for s in leaders)
    assert all(s["p2p_messages_sent"] == 0 and s["collective_calls"] == 2 for s in others)
    for h in hier:
        assert h["wrong_local_size"].startswith("ValueError:") and "local_size=3" in h["wrong_local_size"]
        assert h["local_size_one"].startswith("RuntimeError:") and "neighbor_allreduce" in h["local_size_one"]
        _assert_bluefog_refusals(h)


def _assert_bluefog_refusals(h):
    """Where BlueFog's hierarchical_neighbor_allreduce raises, every rank raises ValueError."""
    assert h["static_weights"] == ("ValueError: Arguments self_weight, src_machine_weights, dst_machine_weights "
                                   "have to be presented at the same time")
    assert h["empty_send"].startswith("ValueError:") and "should not be empty" in h["empty_send"]
    assert h["int_self_weight"].startswith("ValueError: Argument self_weight has to be a float")


def test_hierarchical_four_machines(eight):
    hier = [r["hier"] for r in eight]
    per_machine = [5 / 3, 4 / 3, 1, 2]  # docs/references.md#bluefog-test-values: ExponentialGraph(4) over machines
    _assert_all([h["default"] for h in hier], [v for v in per_machine for _ in range(2)])
    _assert_all([h["expo"] for h in hier], [v for v in per_machine for _ in range(2)])
    _assert_all([h["move"] for h in hier], [(m + 1) % 4 for m in range(4) for _ in range(2)])
    _assert_all([h["move_dst_weight"] for h in hier], [(m + 1) % 4 for m in range(4) for _ in range(2)])
    for h in hier:
        assert h["machine_topo_check"].startswith("ValueError: sends and receives do not match: machine")
        assert h["not_neighbors"].startswith("ValueError: src_machine_weights keys")
        assert "not in-neighbor machines" in h["not_neighbors"]
        _assert_bluefog_refusals(h)


# --------------------------------------------------------------------------- misc


def test_comm_stats_count_neighbor_bytes(four):
    for result in four:
        stats = result["misc"]["stats_after_one"]
        assert stats == {"p2p_bytes_sent": 2 * 10 * 4, "p2p_messages_sent": 2,
                         "collective_calls": 0, "collective_payload_bytes": 0}


def test_allreduce(four):
    assert [r["misc"]["allreduce_avg"] for r in four] == [1.5] * 4
    assert [r["misc"]["allreduce_sum"] for r in four] == [6.0] * 4


def test_broadcast_parameters_makes_every_tensor_equal_to_root(four):
    root_state = four[1]["misc"]["root_state"]
    assert root_state is not None
    for result in four:
        assert result["misc"]["state"] == root_state
        assert result["misc"]["bad_root"].startswith("ValueError: root must be a rank")


def test_state_follows_the_process_group(tmp_path):
    """In this process, world size 1: a new process group starts from the default topology."""
    import torch
    import torch.distributed as dist

    from dlscale import decentralized as dc

    for attempt in range(2):
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store{attempt}", rank=0, world_size=1)
        try:
            assert not dc.is_topology_weighted()  # fresh state, also on the second group
            dc.set_topology(topology.ring_graph(1), is_weighted=True)
            x = torch.arange(6.0).view(2, 3)
            assert torch.equal(dc.neighbor_allreduce(x), x)
            with pytest.raises(RuntimeError, match="use neighbor_allreduce directly"):
                dc.set_machine_topology(topology.ring_graph(1), local_size=1)
                dc.hierarchical_neighbor_allreduce(x)
        finally:
            dist.destroy_process_group()
    with pytest.raises(RuntimeError, match="not initialised"):
        dc.get_topology()
