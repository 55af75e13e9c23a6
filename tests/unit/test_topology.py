"""Topology generators and schedules against BlueFog's definitions (docs/references.md#bluefog-topologies)."""

import itertools

import pytest
import torch

from dlscale.decentralized import topology as T

GENERATORS = [
    T.exponential_two_graph,
    T.exponential_graph,
    lambda n: T.exponential_graph(n, base=3),
    T.symmetric_exponential_graph,
    T.mesh_grid_2d_graph,
    T.star_graph,
    T.ring_graph,
    lambda n: T.ring_graph(n, 1),
    lambda n: T.ring_graph(n, 2),
    T.fully_connected_graph,
]


@pytest.mark.parametrize("make", GENERATORS)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 12, 16])
def test_every_generator_gives_a_row_stochastic_float64_matrix(make, n):
    W = make(n)
    assert W.dtype == torch.float64 and W.shape == (n, n)
    assert (W >= 0).all()
    assert torch.allclose(W.sum(dim=1), torch.ones(n, dtype=torch.float64), atol=1e-12)
    assert (W.diagonal() > 0).all()  # every rank keeps part of its own value


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16])
def test_exponential_two_graph_links_powers_of_two(n):
    W = T.exponential_two_graph(n)
    k = (n - 1).bit_length()  # ceil(log2 n)
    for r in range(n):
        assert T.out_neighbors(W, r) == sorted({(r + 2**i) % n for i in range(k)} - {r})
        assert T.in_neighbors(W, r) == sorted({(r - 2**i) % n for i in range(k)} - {r})
    assert torch.allclose(W[W > 0], torch.full_like(W[W > 0], 1 / (k + 1)))
    assert torch.equal(W, T.exponential_graph(n, 2))  # same adjacency and weights


def test_exponential_graph_base_three():
    assert T.out_neighbors(T.exponential_graph(10, base=3), 0) == [1, 3, 9]
    assert T.out_neighbors(T.exponential_graph(30, base=3), 2) == [3, 5, 11, 29]  # 2 + {1, 3, 9, 27}


def test_symmetric_exponential_in_neighbors():
    assert T.in_neighbors(T.symmetric_exponential_graph(8), 0) == [1, 4, 7]
    assert T.in_neighbors(T.symmetric_exponential_graph(16), 0) == [1, 4, 12, 15]
    W = T.symmetric_exponential_graph(16)
    assert torch.equal(W, W.T)


@pytest.mark.parametrize(("n", "shape"), [(4, (2, 2)), (6, (2, 3)), (12, (3, 4)), (24, (4, 6)),
                                          (16, (4, 4)), (7, (1, 7)), (1, (1, 1))])
def test_mesh_default_shape(n, shape):
    W = T.mesh_grid_2d_graph(n)
    rows, cols = shape
    for r in range(n):
        row, col = divmod(r, cols)
        grid = {(row + dr, col + dc) for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0))}
        want = sorted(a * cols + b for a, b in grid if 0 <= a < rows and 0 <= b < cols)
        assert T.out_neighbors(W, r) == want


def test_mesh_metropolis_hastings_weights():
    W = T.mesh_grid_2d_graph(6)  # 2 x 3: corners have 2 neighbours, the middle column 3
    assert torch.equal(W, W.T)
    assert torch.allclose(W.sum(dim=0), torch.ones(6, dtype=torch.float64))
    assert torch.allclose(W.sum(dim=1), torch.ones(6, dtype=torch.float64))
    assert W[0, 1].item() == pytest.approx(1 / 4)  # max(3, 4) counting self
    assert W[0, 3].item() == pytest.approx(1 / 3)
    assert W[0, 0].item() == pytest.approx(1 - 1 / 4 - 1 / 3)
    explicit = T.mesh_grid_2d_graph(6, shape=(3, 2))
    assert T.out_neighbors(explicit, 0) == [1, 2]


def test_mesh_shape_must_hold_n():
    with pytest.raises(ValueError, match="holds 6 ranks, not n=8"):
        T.mesh_grid_2d_graph(8, shape=(2, 3))


@pytest.mark.parametrize("center", range(5))
def test_star_graph(center):
    n = 5
    W = T.star_graph(n, center)
    for r in range(n):
        if r == center:
            assert T.out_neighbors(W, r) == [s for s in range(n) if s != center]
            assert W[r, r].item() == pytest.approx(1 / n)  # BlueFog's overwritten centre weight
        else:
            assert T.in_neighbors(W, r) == [center] and T.out_neighbors(W, r) == [center]
            assert W[r, r].item() == pytest.approx(1 - 1 / n)
    assert torch.allclose(W.sum(dim=0), torch.ones(n, dtype=torch.float64))


def test_ring_styles():
    both, left, right = (T.ring_graph(5, s) for s in (0, 1, 2))
    assert T.in_neighbors(both, 0) == [1, 4]
    assert T.in_neighbors(left, 0) == [1]  # style 1: W[i, i-1] = 1/2, so r receives from r + 1
    assert T.in_neighbors(right, 0) == [4]
    assert torch.allclose(both[both > 0], torch.full_like(both[both > 0], 1 / 3))
    assert torch.equal(T.ring_graph(1), torch.ones(1, 1, dtype=torch.float64))
    assert torch.equal(T.ring_graph(2, 1), torch.full((2, 2), 0.5, dtype=torch.float64))
    with pytest.raises(ValueError, match="connect_style"):
        T.ring_graph(4, 3)


def test_fully_connected():
    W = T.fully_connected_graph(4)
    assert torch.equal(W, torch.full((4, 4), 0.25, dtype=torch.float64))
    assert T.in_neighbors(W, 2) == [0, 1, 3]


def test_recv_weights_reads_the_column():
    W = T.star_graph(4)
    assert T.recv_weights(W, 0) == (0.25, {1: 0.25, 2: 0.25, 3: 0.25})
    assert T.recv_weights(W, 2) == (0.75, {0: 0.25})
    W = [[0.5, 0.5, 0.0], [0.0, 0.2, 0.8], [0.1, 0.0, 0.9]]  # nested lists work too
    assert T.recv_weights(W, 1) == (0.2, {0: 0.5})
    assert T.in_neighbors(W, 2) == [1] and T.out_neighbors(W, 2) == [0]


@pytest.mark.parametrize(("W", "regular"), [
    (T.exponential_two_graph(8), True),
    (T.ring_graph(5), True),
    (T.fully_connected_graph(3), True),
    (T.symmetric_exponential_graph(16), True),
    (T.star_graph(4), False),
    (T.mesh_grid_2d_graph(9), False),  # 3 x 3: corners have 2 neighbours, the centre 4
    (T.mesh_grid_2d_graph(7), False),  # a line: the ends have 1
])
def test_is_regular(W, regular):
    assert T.is_regular(W) == regular


def test_one_peer_schedule_exponential_two_graph_8():
    schedule = T.dynamic_one_peer_schedule(T.exponential_two_graph(8), 0)
    steps = list(itertools.islice(schedule, 7))
    assert steps == [([1], [7]), ([2], [6]), ([4], [4]), ([1], [7]), ([2], [6]), ([4], [4]), ([1], [7])]


@pytest.mark.parametrize("make", [T.exponential_two_graph, T.ring_graph, T.star_graph, T.mesh_grid_2d_graph,
                                  lambda n: T.exponential_graph(n, 3)])
def test_one_peer_schedule_sends_match_receives(make):
    n = 9
    schedules = [T.dynamic_one_peer_schedule(make(n), r) for r in range(n)]
    W = make(n)
    for _ in range(6):
        steps = [next(s) for s in schedules]
        for r, (send, recv) in enumerate(steps):
            assert len(send) == 1 and send[0] in T.out_neighbors(W, r)
            for src in recv:
                assert steps[src][0] == [r]
        assert sum(len(recv) for _, recv in steps) == n


def test_one_peer_schedule_without_out_neighbors():
    assert next(T.dynamic_one_peer_schedule(T.ring_graph(1), 0)) == ([], [])


def test_machine_one_peer_schedule():
    steps = list(itertools.islice(T.dynamic_machine_one_peer_schedule(5, 1), 4))
    assert steps == [([2], [0]), ([3], [4]), ([0], [2]), ([2], [0])]  # distances 1, 2, 4, 1
    assert list(itertools.islice(T.dynamic_machine_one_peer_schedule(2, 0), 2)) == [([1], [1]), ([1], [1])]
    assert [s for s, _ in itertools.islice(T.dynamic_machine_one_peer_schedule(4, 0), 3)] == [[1], [2], [1]]
    with pytest.raises(ValueError, match="num_machines >= 2"):
        next(T.dynamic_machine_one_peer_schedule(1, 0))
    with pytest.raises(ValueError, match="machine_rank"):
        next(T.dynamic_machine_one_peer_schedule(4, 4))


def _peers(schedule_fn, world, local, steps):
    """Per step, every rank's one peer [(send, recv), ...]."""
    schedules = [schedule_fn(world, local, r) for r in range(world)]
    return [[tuple(x[0] for x in next(s)) for s in schedules] for _ in range(steps)]


def test_inner_outer_exp2_by_hand_two_machines_of_three():
    # Step t: local rank t % 3 of each machine pairs with the same local rank of the other machine
    # (distance 2**0 = 1: floor(log2(2 - 1)) + 1 = 1 distance); the other two exchange inside the
    # machine at distance 1, skipping the outgoing rank: they pair with each other.
    got = _peers(T.inner_outer_exp2_schedule, 6, 3, 4)
    pairs = [[3, 2, 1, 0, 5, 4], [2, 4, 0, 5, 1, 3], [1, 0, 5, 4, 3, 2], [3, 2, 1, 0, 5, 4]]
    assert got == [[(p, p) for p in row] for row in pairs]


def test_inner_outer_exp2_by_hand_three_machines_of_four():
    # 3 machines: outer distances 1, 2 (floor(log2 2) + 1 = 2); 4 ranks: inner distances 1, 2
    # (floor(log2(4 - 2)) + 1 = 2). Step 1: local rank 1 goes out at distance 2 (1 -> 9, from 5);
    # inside machine 0, distance 2 counted around {0, 2, 3} skipping 1: 0 -> 3 -> 2 -> 0.
    step0, step1 = _peers(T.inner_outer_exp2_schedule, 12, 4, 2)
    assert step0[0] == (4, 8)  # distance 1: machine 1 and machine 2 (= -1)
    assert step1[:4] == [(3, 2), (9, 5), (0, 3), (2, 0)]


def test_inner_outer_ring_by_hand_three_machines_of_four():
    # Step 0: local rank 0 passes to the next machine and takes from the previous one (0 -> 4, from 8);
    # locals 1, 2, 3 pass around their machine skipping local 0: 1 -> 2 -> 3 -> 1.
    (step0,) = _peers(T.inner_outer_ring_schedule, 12, 4, 1)
    assert step0[:4] == [(4, 8), (2, 3), (3, 1), (1, 2)]


@pytest.mark.parametrize("make", [T.inner_outer_exp2_schedule, T.inner_outer_ring_schedule])
def test_inner_outer_sends_match_receives(make):
    for local in (3, 4, 5):
        for machines in (2, 3, 5):
            world = local * machines
            for step in _peers(make, world, local, 2 * local * machines):
                for rank, (send, _) in enumerate(step):
                    assert step[send][1] == rank and send != rank  # the receiver expects exactly this sender


@pytest.mark.parametrize(("world", "local", "message"), [
    (8, 2, "more than 2 ranks per machine"),
    (4, 4, "at least 2 machines"),
    (10, 4, "does not divide"),
])
def test_inner_outer_preconditions(world, local, message):
    for make in (T.inner_outer_exp2_schedule, T.inner_outer_ring_schedule):
        with pytest.raises(ValueError, match=message):
            next(make(world, local, 0))


@pytest.mark.parametrize("call", [
    lambda: T.exponential_two_graph(0),
    lambda: T.ring_graph(-1),
    lambda: T.fully_connected_graph(2.0),
    lambda: T.exponential_graph(4, base=1),
    lambda: T.star_graph(4, center=4),
    lambda: T.in_neighbors(T.ring_graph(4), 4),
    lambda: T.out_neighbors(T.ring_graph(4), -1),
    lambda: T.recv_weights([[1.0, 0.0]], 0),
    lambda: next(T.dynamic_one_peer_schedule(T.ring_graph(4), 7)),
])
def test_input_checks(call):
    with pytest.raises(ValueError):
        call()


# --------------------------------------------------------------------------- exchange plans


def test_default_plan_is_uniform_over_in_neighbors():
    plan = T.plan_exchange(T.exponential_two_graph(8), 0)
    assert plan.sends == {1: 1.0, 2: 1.0, 4: 1.0} and plan.recvs == [4, 6, 7]
    assert plan.uniform and not plan.dynamic
    assert plan.self_weight == 0.25 and plan.src_weights == {4: 0.25, 6: 0.25, 7: 0.25}


def test_weighted_plan_reads_the_column():
    plan = T.plan_exchange(T.star_graph(4), 2, is_weighted=True)
    assert (plan.self_weight, plan.src_weights, plan.uniform) == (0.75, {0: 0.25}, False)


def test_explicit_weights_keep_the_static_sends():
    plan = T.plan_exchange(T.ring_graph(4), 0, self_weight=0.5, src_weights={1: 0.5})
    assert plan.sends == {1: 1.0, 3: 1.0} and plan.recvs == [1, 3]  # every in-neighbor still sends
    assert plan.src_weights == {1: 0.5} and not plan.dynamic


def test_dynamic_plan_follows_dst_weights():
    plan = T.plan_exchange(T.ring_graph(4), 0, self_weight=0.0, src_weights={2: 1}, dst_weights={2: 0.5})
    assert plan.sends == {2: 0.5} and plan.recvs == [2] and plan.dynamic
    plan = T.plan_exchange(T.ring_graph(4), 0, self_weight=0.0, src_weights={}, dst_weights=[1, 2])
    assert plan.sends == {1: 1.0, 2: 1.0} and plan.recvs == []


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"self_weight": 0.5}, "Arguments self_weight and src_weights have to be presented at the same time"),
    ({"src_weights": {3: 0.5}}, "Arguments self_weight and src_weights have to be presented at the same time"),
    ({"self_weight": 0.5, "src_weights": {2: 0.5}}, r"keys \[2\] are not in-neighbors \[1, 3\]"),
    ({"self_weight": 0.0, "src_weights": {3: 1.0}, "dst_weights": [1, 1]}, "lists a destination twice"),
    ({"dst_weights": [1]}, "needs self_weight and src_weights"),
    ({"self_weight": 0.0, "src_weights": {0: 1.0}}, "calling rank 0 itself"),
    ({"self_weight": 0.0, "src_weights": {}, "dst_weights": {4: 1.0}}, "not a rank in"),
    ({"self_weight": "half", "src_weights": {}}, "self_weight has to be a float"),
    ({"self_weight": 1, "src_weights": {1: 0.5}}, r"self_weight has to be a float for self rank, got 1 \(int\)"),
    ({"self_weight": 0, "src_weights": {2: 1.0}, "dst_weights": [2]}, "self_weight has to be a float"),
    ({"self_weight": 0.5, "src_weights": [1]}, "has to be a dict"),
])
def test_plan_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        T.plan_exchange(T.ring_graph(4), 0, **kwargs)


def test_plan_error_names_the_machine_arguments():
    with pytest.raises(ValueError, match="self_weight and src_machine_weights"):
        T.plan_exchange(T.ring_graph(4), 0, self_weight=0.5, names=("src_machine_weights", "dst_machine_weights"))


@pytest.mark.parametrize(("weighted", "want"), [
    (False, [4 / 3, 1.75, 8 / 3, 7 / 3, 3.25, 11 / 3]),
    (True, [1.25, 1.75, 2.75, 2.25, 3.25, 3.75]),
])
def test_mesh_six_concrete_averages(weighted, want):
    """Derived values (docs/references.md#bluefog-test-values) for MeshGrid2DGraph(6), x_r = r, from the plans alone."""
    W = T.mesh_grid_2d_graph(6)
    got = []
    for r in range(6):
        plan = T.plan_exchange(W, r, is_weighted=weighted)
        got.append(plan.self_weight * r + sum(w * s for s, w in plan.src_weights.items()))
    assert got == pytest.approx(want)


# --------------------------------------------------------------------------- hierarchical plans

MACHINE_W = T.exponential_graph(4)  # machine m sends to m + 1, m + 2 and receives from m - 1, m - 2


@pytest.mark.parametrize(("kwargs", "message"), [
    # BlueFog's _hierarchical_neighbor_allreduce_nonblocking: static weights are not supported
    ({"self_weight": 0.5, "src_machine_weights": {3: 0.5}},
     "Arguments self_weight, src_machine_weights, dst_machine_weights have to be presented at the same time"),
    ({"dst_machine_weights": [1]}, "self_weight, src_machine_weights, dst_machine_weights have to be presented"),
    ({"self_weight": 0.5}, "Arguments self_weight and src_machine_weights have to be presented at the same time"),
    ({"self_weight": 1, "src_machine_weights": {3: 1.0}, "dst_machine_weights": [1]}, "has to be a float"),
    # keys outside the machine topology: m + 1 is not an in-neighbor, m - 1 not an out-neighbor
    ({"self_weight": 0.0, "src_machine_weights": {1: 1.0}, "dst_machine_weights": [1]},
     r"src_machine_weights keys \[1\] are not in-neighbor machines \[2, 3\] of machine 0"),
    ({"self_weight": 0.0, "src_machine_weights": {3: 1.0}, "dst_machine_weights": [3]},
     r"dst_machine_weights keys \[3\] are not out-neighbor machines \[1, 2\] of machine 0"),
    # mpi_controller.cc: "send_machine_neighbors should not be empty"
    ({"self_weight": 1.0, "src_machine_weights": {3: 0.0}, "dst_machine_weights": []}, "should not be empty"),
])
def test_machine_plan_errors_follow_bluefog(kwargs, message):
    with pytest.raises(ValueError, match=message):
        T.plan_machine_exchange(MACHINE_W, 0, **kwargs)


def test_machine_plans_that_bluefog_accepts():
    static = T.plan_machine_exchange(MACHINE_W, 0)
    assert static.sends == {1: 1.0, 2: 1.0} and static.recvs == [2, 3] and static.self_weight == pytest.approx(1 / 3)
    moved = T.plan_machine_exchange(MACHINE_W, 0, self_weight=0.0, src_machine_weights={3: 1.0},
                                    dst_machine_weights={2: 0.5})
    assert moved.sends == {2: 0.5} and moved.recvs == [3] and moved.dynamic
    with pytest.raises(ValueError, match="should not be empty"):  # one machine: nobody to send to
        T.plan_machine_exchange(T.exponential_graph(1), 0)
