"""Decentralized averaging (BlueFog's semantics on torch.distributed): topologies and ops.

`topology` builds weight matrices (W[i, j] = weight of the edge i -> j) and one-peer schedules;
`ops` runs neighbor_allreduce and its hierarchical form with point-to-point messages.
"""

from dlscale.decentralized.ops import (
    allreduce,
    broadcast_parameters,
    comm_stats,
    get_machine_topology,
    get_topology,
    hierarchical_neighbor_allreduce,
    is_topology_weighted,
    neighbor_allreduce,
    reset_comm_stats,
    set_machine_topology,
    set_topology,
)
from dlscale.decentralized.topology import (
    dynamic_machine_one_peer_schedule,
    dynamic_one_peer_schedule,
    exponential_graph,
    exponential_two_graph,
    fully_connected_graph,
    in_neighbors,
    inner_outer_exp2_schedule,
    inner_outer_ring_schedule,
    is_regular,
    mesh_grid_2d_graph,
    out_neighbors,
    recv_weights,
    ring_graph,
    star_graph,
    symmetric_exponential_graph,
)

__all__ = [
    "allreduce",
    "broadcast_parameters",
    "comm_stats",
    "dynamic_machine_one_peer_schedule",
    "dynamic_one_peer_schedule",
    "exponential_graph",
    "exponential_two_graph",
    "fully_connected_graph",
    "get_machine_topology",
    "get_topology",
    "hierarchical_neighbor_allreduce",
    "in_neighbors",
    "inner_outer_exp2_schedule",
    "inner_outer_ring_schedule",
    "is_regular",
    "is_topology_weighted",
    "mesh_grid_2d_graph",
    "neighbor_allreduce",
    "out_neighbors",
    "recv_weights",
    "reset_comm_stats",
    "ring_graph",
    "set_machine_topology",
    "set_topology",
    "star_graph",
    "symmetric_exponential_graph",
]
