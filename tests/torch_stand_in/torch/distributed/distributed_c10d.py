"""torch.distributed's shapes, named and argued as torch 2.13's
(torch/distributed/distributed_c10d.py).

Process groups carry torch's names and sequence counts (a collective counts as it
is issued), which the flight recorder reads (pytrace_cffi/_collectives.py). A
collective waits while its group's `gate` (a threading.Event, None by default) is
not set: a rank waiting for the others, in one process.

A job of processes: init_process_group() with no rank takes RANK and WORLD_SIZE
from the environment, and the ranks share $STAND_IN_DIST_DIR, a directory. A rank
enters the default group's n-th collective by creating the file n.<rank> there
and waits, polling, until the n-th file of every rank is there (gloo's wait is a
C call; here the waiting shows as calls inside the collective), so the ranks'
steps end together as under DDP."""
import os
import time


class ProcessGroup:
    def __init__(self, name, description, directory=None):
        self.group_name = name
        self.group_desc = description
        self.gate = None
        self.directory = directory      # the job's shared directory, or None
        self._seq = 0

    def _get_sequence_number_for_group(self):
        return self._seq

    def _issue(self):
        self._seq += 1
        if self.gate is not None:
            self.gate.wait()
        if self.directory is not None:
            self._wait_for_every_rank()

    def _wait_for_every_rank(self):
        mine = f"{self._seq}."
        open(os.path.join(self.directory, mine + str(_world.rank)), "w").close()
        while sum(name.startswith(mine) for name in os.listdir(self.directory)) \
                < _world.world_size:
            time.sleep(0.0005)


class _World:
    def __init__(self):
        self.pg_group_ranks = {}        # group -> {global rank: group rank}
        self.default_pg = None
        self.rank = None
        self.world_size = None


_world = _World()


def init_process_group(backend="gloo", rank=None, world_size=None):
    directory = None
    if rank is None:                    # a job's rank, as torchrun starts it
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        directory = os.environ["STAND_IN_DIST_DIR"]
    _world.default_pg = ProcessGroup("0", "default_pg", directory)
    _world.pg_group_ranks[_world.default_pg] = {r: r for r in range(world_size)}
    _world.rank, _world.world_size = rank, world_size
    if directory is not None:
        barrier()


def destroy_process_group(group=None):
    if _world.default_pg is not None and _world.default_pg.directory is not None:
        barrier()
    _world.pg_group_ranks.clear()
    _world.default_pg = None


def is_initialized():
    return _world.default_pg is not None


def get_rank():
    return _world.rank


def get_world_size():
    return _world.world_size


def _get_default_group():
    if _world.default_pg is None:
        raise ValueError("Default process group has not been initialized")
    return _world.default_pg


def new_group(ranks):
    group = ProcessGroup(str(len(_world.pg_group_ranks)), "undefined")
    _world.pg_group_ranks[group] = {r: i for i, r in enumerate(sorted(ranks))}
    return group


def _group(group):
    return group if group is not None else _get_default_group()


def all_reduce(tensor, op=None, group=None, async_op=False):
    _group(group)._issue()


def broadcast(tensor, src, group=None, async_op=False):
    _group(group)._issue()


def barrier(group=None, async_op=False, device_ids=None):
    _group(group)._issue()
