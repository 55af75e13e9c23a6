"""Who this process is in the job (env.py) and its process group (process_group.py)."""

from dlscale.distributed.env import DistEnv, expand_hostlist
from dlscale.distributed.process_group import (
    attempt_store,
    init_process_group,
    select_device,
    shutdown,
)

__all__ = ["DistEnv", "attempt_store", "expand_hostlist", "init_process_group", "select_device", "shutdown"]
