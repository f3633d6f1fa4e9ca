"""The stand-in's torch.distributed: a process group of the processes that share
$STAND_IN_DIST_DIR (a directory), whose collectives wait for every rank as
gloo's do (distributed_c10d.py). Enough for a job of ranks whose steps end
together, as under DDP (tests/test_stragglers.py)."""
from .distributed_c10d import (
    all_reduce, barrier, destroy_process_group, get_rank, get_world_size,
    init_process_group)

__all__ = ["all_reduce", "barrier", "destroy_process_group", "get_rank", "get_world_size",
           "init_process_group"]
