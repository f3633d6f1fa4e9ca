"""The stand-in's torch.distributed (distributed_c10d.py): process groups with
torch's names and sequence counts, and collectives that wait for every rank of a
job as gloo's do when $STAND_IN_DIST_DIR names a directory the ranks share
(tests/test_stragglers.py), or in one process for a group's `gate`
(tests/test_collectives.py)."""
from .distributed_c10d import (  # noqa: F401
    all_reduce, barrier, broadcast, destroy_process_group, get_rank, get_world_size,
    init_process_group, is_initialized, new_group)

__all__ = ["all_reduce", "barrier", "broadcast", "destroy_process_group", "get_rank",
           "get_world_size", "init_process_group", "is_initialized", "new_group"]
