"""Collectives named and placed as torch 2.13's (torch/distributed/distributed_c10d.py):
each waits until every rank of the group has entered it. A rank enters the n-th
collective by creating the file n.<rank> in $STAND_IN_DIST_DIR and waits, polling,
until the n-th file of every rank is there (gloo's wait is a C call; here the
waiting shows as calls inside the collective)."""
import os
import time

_group = None


class _Group:
    def __init__(self, rank, world_size, directory):
        self.rank, self.world_size, self.directory = rank, world_size, directory
        self.entered = 0


def init_process_group(backend="gloo"):
    global _group
    _group = _Group(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                    os.environ["STAND_IN_DIST_DIR"])
    barrier()


def get_rank():
    return _group.rank


def get_world_size():
    return _group.world_size


def _wait_for_every_rank():
    group = _group
    group.entered += 1
    mine = f"{group.entered}."
    open(os.path.join(group.directory, mine + str(group.rank)), "w").close()
    while sum(name.startswith(mine) for name in os.listdir(group.directory)) \
            < group.world_size:
        time.sleep(0.0005)


def barrier(group=None, async_op=False, device_ids=None):
    _wait_for_every_rank()


def all_reduce(tensor, op=None, group=None, async_op=False):
    """Waits for every rank; the tensor keeps its values (a sum over equal ranks
    would too, but the stand-in needs none)."""
    _wait_for_every_rank()


def destroy_process_group(group=None):
    barrier()
