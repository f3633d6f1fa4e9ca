"""What both merges with torch.profiler (merge.py: Chrome JSON, merge_perfetto.py:
.pftrace) share: torch's record_function regions and ops on our threads read from
its trace and the C filters that keep our slices strictly nested around them
(pt_merge.c), and the realtime anchor as the C clock maps take it.

Why ops too: our times and torch's reach CLOCK_REALTIME by two mappings (ours by
clock pairs read at start and stop, torch's by its own), and a call of ours holds
the aten op it runs by a few hundred ns only (350-600 ns for Parameter.add_ on the
test machine). A clock pair read across an interrupt (1 in 40000 readings took
over 0.4 us there, with or without load) moves our calls by that much: they then
cross torch's ops. A call of ours crossing an op's edge is left out, alone, and
counted (our_calls_crossing_torchs_ops_left_out)."""
import math
from array import array

from .formats import torch_compressed

# torch.profiler(with_stack=True) records Python calls itself; ours replace them,
# on a thread of ours up to its last call of ours: on 3.9-3.11 torch.profiler
# takes our hook, and recording of the thread ends there (torch's calls after it
# stay). Their clocks differ by microseconds: a call of torch's up to this long
# after our last one is the same call.
TORCH_PYTHON_CATEGORY = "python_function"
SAME_CALL_NS = 50_000


def replaced_by_ours(start, end, first, last_start, ns_per_unit=1):
    """Whether a python_function event of torch's (start, end) on a thread of ours
    is one of ours: within our trace (from first on) and starting no later than
    our last call on its thread (last_start; None: no call of ours there). Times
    in one unit (ns_per_unit ns each)."""
    return (last_start is not None and start <= last_start + SAME_CALL_NS / ns_per_unit
            and end > first)


def noting_last_start(batches, key, last_starts):
    """A thread's batches of slices (in start order), as they come, noting in
    last_starts[key] the start (ns) of its last call."""
    for batch in batches:
        slices, n, _ = batch
        if n:
            last_starts[key] = slices[n - 1].start
        yield batch
# Slices moved onto CLOCK_REALTIME (or filtered) at a time: the scratch copy stays
# this small (40 bytes each) whatever the batch (a slice table's batch is a whole
# thread).
SCRATCH_SLICES = 1 << 16


def is_finite_number(value):
    """A finite JSON number (not a bool, not NaN or an infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def anchor_clocks(anchor):
    """(mono0, off0, mono1, off1): a realtime anchor as pt_slices_to_realtime and
    pt_region_edges_on_monotonic take it."""
    start, stop = anchor["start"], anchor["stop"]
    return (start["monotonic_ns"], start["realtime_ns"] - start["monotonic_ns"],
            stop["monotonic_ns"], stop["realtime_ns"] - stop["monotonic_ns"])


class TorchProfilerRegions:
    """torch's record_function regions (user_annotation complete events) and its
    other complete events (ops, runtime calls) on our threads, per (pid, tid), on
    CLOCK_REALTIME ns, and the C filters (pt_merge.c) that keep our slices strictly
    nested around them: one per thread written."""

    def __init__(self, by_thread, seen_names):
        # (pid, tid) -> (starts, ends, names) as arrays, in the torch file's order
        # (20 bytes an event: a thread may hold millions of ops); a name is
        # 1 + its index in seen_names, 0 for an op
        self.by_thread = by_thread
        self.names = sorted(seen_names)
        ids = {name: number for number, name in enumerate(self.names, 1)}
        self._sorted_id = [None] + [ids[name] for name in seen_names]
        self._filters = []

    @classmethod
    def read(cls, torch_path, base, threads=None):
        """threads: the (pid, tid)s of ours (None: every thread); torch's ops
        elsewhere are not kept."""
        by_thread, seen = {}, {}
        from .readers.torch_chrome import TorchChromeReader     # only when merging
        compressed = torch_compressed(torch_path)
        with TorchChromeReader(torch_path, "torch trace", compressed) as reader:
            reader.read_head()
            for event, _ in reader.events():
                region = _torch_region(event, base)
                if region is None or (threads is not None and region[0] not in threads):
                    continue
                found = by_thread.get(region[0])
                if found is None:
                    found = by_thread[region[0]] = (array("q"), array("q"), array("I"))
                found[0].append(region[1])
                found[1].append(region[2])
                found[2].append(0 if region[3] is None else seen.setdefault(region[3],
                                                                            len(seen) + 1))
        return cls(by_thread, list(seen))

    def name_ids(self, names, kinds):
        """Per key of ours: the id (1 + index in self.names) of the torch region
        name its region slices bear, 0 for other keys."""
        from ._core import ffi
        ids = {name: number for number, name in enumerate(self.names, 1)}
        return ffi.new("uint32_t[]", [ids.get(name, 0) if kind == "annotation" else 0
                                      for name, kind in zip(names, kinds)] or [0])

    def edges(self, pid, tid, on_monotonic=None):
        """The filter of thread (pid, tid), None when torch has no region there.
        on_monotonic: anchor_clocks(anchor) when the slices it filters stay on
        CLOCK_MONOTONIC (see pt_region_edges_on_monotonic)."""
        found = self.by_thread.get((pid, tid))
        if not found:
            return None
        from ._core import lib
        sorted_id = self._sorted_id
        names = array("I", (sorted_id[n] if n else lib.PT_EDGE_OP for n in found[2]))
        edges = _RegionEdges(found[0], found[1], names)
        if on_monotonic is not None:
            from ._core import lib
            lib.pt_region_edges_on_monotonic(edges._c, *on_monotonic)
        self._filters.append(edges)
        return edges

    def counts(self):
        """What the filters left out, for the merged file's pytrace_cffi entry."""
        replaced = crossing = crossing_ops = 0
        for edges in self._filters:
            r, c, o = edges.counts()
            replaced, crossing, crossing_ops = replaced + r, crossing + c, crossing_ops + o
        return {"our_regions_replaced_by_torchs": replaced,
                "our_calls_crossing_torchs_regions_left_out": crossing,
                "our_calls_crossing_torchs_ops_left_out": crossing_ops}


def _torch_region(event, base):
    """((pid, tid), start ns, end ns, name) of a torch complete event on
    CLOCK_REALTIME: name is the region's for a user_annotation, None for another
    (an op); None for other events, for its Python calls (ours replace them) and
    for one without numbers."""
    if not (isinstance(event, dict) and event.get("ph") == "X"
            and event.get("cat") != TORCH_PYTHON_CATEGORY
            and is_finite_number(event.get("ts")) and is_finite_number(event.get("dur"))
            and type(event.get("pid")) is int and type(event.get("tid")) is int):
        return None
    region = event.get("cat") == "user_annotation" and isinstance(event.get("name"), str)
    start = base + round(event["ts"] * 1000)
    end = start + round(event["dur"] * 1000)
    if not (-2 ** 63 <= start <= end < 2 ** 63):
        return None
    return (event["pid"], event["tid"]), start, end, event["name"] if region else None


class _RegionEdges:
    """One thread's pt_region_edges: torch's regions there, our slices filtered
    batch by batch (pt_region_edges_filter)."""

    def __init__(self, starts, ends, names):
        from ._core import ffi, lib
        self._c = ffi.gc(lib.pt_region_edges_new(ffi.from_buffer("int64_t[]", starts),
                                                 ffi.from_buffer("int64_t[]", ends),
                                                 ffi.from_buffer("uint32_t[]", names),
                                                 len(starts)),
                         lib.pt_region_edges_free)
        if self._c == ffi.NULL:
            raise MemoryError("out of memory while merging with torch's trace")

    def filter(self, slices, n, first_index, region_name_of_key):
        """The kept slices of the batch, moved up in place: how many."""
        from ._core import lib
        kept = lib.pt_region_edges_filter(self._c, slices, n, first_index, region_name_of_key,
                                          len(region_name_of_key))
        if kept > n:
            raise MemoryError("out of memory while merging with torch's trace")
        return kept

    def kept(self, batches, region_name_of_key):
        """A thread's batches of (pt_slice *, n, index of the first), filtered:
        each piece copied into a scratch buffer (the trace's own slices stay as
        they are) and its kept slices handed on, numbered over the kept ones;
        each valid until the next is asked for."""
        from ._core import ffi
        scratch, room, kept = None, 0, 0
        for slices, n, first in batches:
            for at in range(0, n, SCRATCH_SLICES):
                piece = min(SCRATCH_SLICES, n - at)
                if piece > room:
                    scratch, room = ffi.new("pt_slice[]", piece), piece
                ffi.memmove(scratch, slices + at, piece * ffi.sizeof("pt_slice"))
                piece = self.filter(scratch, piece, first + at, region_name_of_key)
                if piece:
                    yield scratch, piece, kept
                    kept += piece

    def counts(self):
        from ._core import ffi, lib
        replaced, crossing, ops = (ffi.new("uint64_t *") for _ in range(3))
        lib.pt_region_edges_counts(self._c, replaced, crossing, ops)
        return replaced[0], crossing[0], ops[0]
