"""Who this process is in the job (env.py), its process group (process_group.py), and figures reduced over
the ranks by name (reductions.py)."""

from dlscale.distributed.env import DistEnv, expand_hostlist
from dlscale.distributed.process_group import (
    attempt_store,
    init_process_group,
    select_device,
    shutdown,
)
from dlscale.distributed.reductions import (
    Reduced,
    barrier,
    broadcast_from_main,
    gather_over_ranks,
    max_over_ranks,
    min_over_ranks,
    on_main,
    over_ranks,
    sum_over_ranks,
)

__all__ = ["DistEnv", "Reduced", "attempt_store", "barrier", "broadcast_from_main", "expand_hostlist",
           "gather_over_ranks", "init_process_group", "max_over_ranks", "min_over_ranks", "on_main", "over_ranks",
           "select_device", "shutdown", "sum_over_ranks"]
