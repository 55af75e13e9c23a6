"""One worker of the two-node test: torchrun starts it, it reports what hierarchical averaging gave.

Run by tests/distributed/test_two_nodes.py as
    python -m torch.distributed.run --nnodes 2 --nproc-per-node 2 ... two_node_script.py OUT_DIR
and writes OUT_DIR/rank<RANK>.json. Each machine (torchrun node) holds the value 2 * node + 1
on average, so machine averages are 1 and 3 and any mix-up of machines shows in the result.
"""

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from dlscale import decentralized as dc


def main(out_dir: Path) -> None:
    # torchrun set MASTER_ADDR/PORT, RANK, WORLD_SIZE; a lost peer fails within a minute
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    try:
        rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
        local_size, node = int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ["GROUP_RANK"])
        # spread around the machine mean 2 * node + 1 so the in-machine step matters
        x = torch.full((3, 4), 2.0 * node + 1 + (local_rank - (local_size - 1) / 2), dtype=torch.float64)
        average = dc.hierarchical_neighbor_allreduce(x)  # default machine graph: ExponentialGraph(2)
        other = (node + 1) % (dist.get_world_size() // local_size)
        moved = dc.hierarchical_neighbor_allreduce(x, self_weight=0.0, src_machine_weights={other: 1.0},
                                                   dst_machine_weights=[other], enable_topo_check=True)
        result = {
            "rank": rank, "local_rank": local_rank, "group_rank": node, "local_world_size": local_size,
            "world_size": dist.get_world_size(), "average": average.flatten().tolist(),
            "moved": moved.flatten().tolist(),
        }
    finally:
        dist.destroy_process_group()
    print(json.dumps(result), flush=True)
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
