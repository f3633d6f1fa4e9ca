"""The straggler of a distributed job: the rank that waits least in collectives.

Collectives (all_reduce, barrier, ...) end on every rank at once, so under DDP
every rank's step lasts as long as the slowest one's, and the step times cannot
tell which rank holds the others up. The time each rank spends *outside*
collectives can: the straggler works longest and arrives last, so it waits
least.

Per rank (a column of the steps table, render/steps.py), on its step thread:
the outermost calls of a collective (COLLECTIVE_NAMES: torch.distributed's
Python functions and its C calls, the wait on a work handle or future, DDP's
bucket rebuild and parameter checks, and, when the trace holds DDP's reducer,
the autograd engine's run_backward, inside which DDP's gradient all-reduce is
waited for) and of imports. Per step, the time inside collectives and the rest
(outside). Skipped: the first step (it holds start-up), a step some rank spent a
quarter or more of importing (IMPORT_SHARE), and steps not every rank has. Over
the steps left (counted), the rank with the most time outside collectives is
the straggler; then, per function, its self time outside collectives less the
median of the other ranks' (the C summarizer over the counted steps less the
collectives' calls), and for the first three that the straggler spends more in
(by at least 5% of its excess time outside collectives), the function that
called it most on the straggler (time.sleep is named with its caller,
load_batch): a walk in Python over those functions' calls.
"""
import re
from bisect import bisect_right
from collections import namedtuple

from .._core import ffi
from .summary import Summarizer
from ..model.walk import batches

KEY_WORD = 4                # a pt_slice's key, in uint32 words from its start
PARENT_WORD = 6             # its parent's index (int64, -1 for none)
SLICE_WORDS = 10            # a pt_slice is 40 bytes
IMPORT_SHARE = 0.25         # a step this much spent importing on some rank is skipped
TOP_DIFFERENCES = 10
CALLERS = 3                 # the first differences named with their caller, when they are
CALLER_SHARE = 0.05         # at least this share of the straggler's excess time outside

_PYTHON_COLLECTIVES = (
    "all_reduce|all_reduce_coalesced|all_gather|all_gather_into_tensor|all_gather_coalesced"
    "|all_gather_object|all_gather_tensor|_all_gather_base|reduce_scatter"
    "|reduce_scatter_tensor|_reduce_scatter_base|all_to_all|all_to_all_single|broadcast"
    "|broadcast_object_list|barrier|monitored_barrier|reduce|gather|gather_object|scatter"
    "|scatter_object_list|send|recv|send_object_list|recv_object_list|batch_isend_irecv"
    "|wait|wait_tensor")
_C_COLLECTIVES = (
    "allreduce|allreduce_coalesced|allgather|allgather_coalesced"
    "|allgather_into_tensor_coalesced|_allgather_base|reduce_scatter"
    "|reduce_scatter_tensor_coalesced|_reduce_scatter_base|alltoall|alltoall_base|broadcast"
    "|barrier|monitored_barrier|reduce|gather|scatter|send|recv|recv_anysource|wait"
    "|_rebuild_buckets|_broadcast_coalesced|_verify_params_across_processes")
COLLECTIVE_NAMES = re.compile(
    # torch.distributed's Python functions (and torch.futures' wait), by file and name
    r"(?:.*/)?torch/(?:distributed/(?:distributed_c10d|_functional_collectives)"
    rf"|futures/__init__)\.py\(\d+\): (?:{_PYTHON_COLLECTIVES})"
    # their C calls: a process group's collectives, a work handle's or future's wait
    rf"|torch\._C\._distributed_c10d\.(?:\w+\.)?(?:{_C_COLLECTIVES})"
    r"|torch\._C\.(?:Future\.)?wait")
DDP_REDUCER = "torch._C._distributed_c10d.prepare_for_backward"
DDP_BACKWARD = "torch._C._EngineBase.run_backward"
IMPORT_NAME = re.compile(r"<frozen importlib\._bootstrap>\(\d+\): _find_and_load")

Stragglers = namedtuple("Stragglers", "counted skipped outside inside straggler others_ns "
                        "collectives differences callers ddp")
Stragglers.__doc__ = """counted: the step numbers compared; skipped: (step, why)
pairs; outside, inside: per column, ns outside and inside collectives over the
counted steps; straggler: the column with most time outside; others_ns: the
median of the other columns' time outside; collectives: whether the trace holds
any; differences: (name, straggler's ns, others' median ns) by size; callers:
name -> the function that called it most on the straggler; ddp: whether DDP's
backward counts as a collective."""


def scan_calls(trace, index, keys):
    """(the start of the thread's first call or None, [(start, end, key)] of its
    calls whose key is in keys, an enclosing call first). Without keys only the
    first batch is read."""
    first, found = None, []
    for slices, n, _ in batches(trace, index):
        if not n:
            continue
        if first is None:
            first = slices[0].start
        if not keys:
            break
        for at, key in _positions(slices, n, keys):
            found.append((slices[at].start, slices[at].end, key))
    found.sort(key=lambda call: (call[0], -call[1]))
    return first, found


def _positions(slices, n, keys):
    """(index in the batch, key) of its slices whose key is in keys: the batch's
    keys as a list, searched in C (most batches hold none)."""
    words = memoryview(ffi.buffer(slices, n * SLICE_WORDS * 4)).cast("I")
    batch_keys = words[KEY_WORD::SLICE_WORDS].tolist()
    for key in keys.intersection(batch_keys):
        at = batch_keys.index(key)
        while True:
            yield at, key
            try:
                at = batch_keys.index(key, at + 1)
            except ValueError:
                break


def _outermost(calls):
    """The calls not inside another of them, as (start, end)."""
    found, last_end = [], None
    for start, end, _ in calls:
        if last_end is None or start >= last_end:
            found.append((start, end))
            last_end = end
    return found


def _overlap(window, spans, starts):
    """ns of window (start, end) covered by spans (sorted, disjoint; starts
    their starts)."""
    low, high = window
    total = 0
    at = max(0, bisect_right(starts, low) - 1)
    while at < len(spans) and spans[at][0] < high:
        total += max(0, min(spans[at][1], high) - max(spans[at][0], low))
        at += 1
    return total


def _cut(windows, spans):
    """windows (sorted, disjoint) less spans (sorted, disjoint)."""
    left, at = [], 0
    for low, high in windows:
        while at < len(spans) and spans[at][1] <= low:
            at += 1
        k = at
        while k < len(spans) and spans[k][0] < high:
            if spans[k][0] > low:
                left.append((low, spans[k][0]))
            low = max(low, spans[k][1])
            k += 1
        if low < high:
            left.append((low, high))
    return left


def collective_keys(trace):
    """(collective keys, import keys, whether DDP's backward counts) of the
    trace's names."""
    names = trace.names
    ddp = DDP_REDUCER in names
    collective = {key for key, name in enumerate(names)
                  if COLLECTIVE_NAMES.fullmatch(name) or (ddp and name == DDP_BACKWARD)}
    imports = {key for key, name in enumerate(names) if IMPORT_NAME.fullmatch(name)}
    return collective, imports, ddp


def find_stragglers(trace, columns, rows, title, top=TOP_DIFFERENCES):
    """The Stragglers of the steps table's columns (ProcessSteps) and rows, or
    None with under two columns. title(column) names a column."""
    if len(columns) < 2:
        return None
    collective, imports, ddp = collective_keys(trace)
    spans, share = [], {}
    for column, steps in enumerate(columns):
        _, calls = scan_calls(trace, steps.thread, collective | imports)
        waits = _outermost([c for c in calls if c[2] in collective])
        loads = _outermost([c for c in calls if c[2] in imports])
        spans.append(waits)
        starts = [s for s, _ in loads]
        for number, window in enumerate(steps.windows, 1):
            if window[1] > window[0]:
                part = _overlap(window, loads, starts) / (window[1] - window[0])
                if part >= share.get(number, (0,))[0]:
                    share[number] = (part, column)
    counted, skipped = [], []
    for row in rows:
        if any(d is None for d in row.durations):
            skipped.append((row.step, "not on every rank"))
        elif row.step == 1 and len(rows) > 1:
            skipped.append((row.step, "the first, holding start-up"))
        elif share.get(row.step, (0,))[0] >= IMPORT_SHARE:
            part, column = share[row.step]
            skipped.append((row.step, f"imports took {part:.0%} of "
                                      f"{title(columns[column])}'s step"))
        else:
            counted.append(row.step)
    outside, inside, kept = [], [], []
    for steps, waits in zip(columns, spans):
        windows = [steps.windows[number - 1] for number in counted]
        starts = [s for s, _ in waits]
        waited = sum(_overlap(window, waits, starts) for window in windows)
        inside.append(waited)
        outside.append(sum(high - low for low, high in windows) - waited)
        kept.append(_cut(windows, waits))
    straggler = max(range(len(columns)), key=lambda column: (outside[column], -column))
    others = sorted(outside[c] for c in range(len(columns)) if c != straggler)
    differences, callers = [], {}
    if counted:
        differences = _differences(trace, columns, kept, straggler, top)
        excess = outside[straggler] - others[(len(others) - 1) // 2]
        callers = _callers(trace, columns[straggler].thread, kept[straggler],
                           {name for name, mine, median in differences[:CALLERS]
                            if mine - median >= CALLER_SHARE * excess > 0})
    return Stragglers(counted, skipped, outside, inside, straggler,
                      others[(len(others) - 1) // 2], bool(collective), differences,
                      callers, ddp)


def _differences(trace, columns, kept, straggler, top):
    """(name, straggler's self ns, the others' median) outside collectives in the
    counted steps, the largest differences either way first."""
    summarizer = Summarizer(trace.names)
    n_names = max(1, summarizer.n_names)
    tables = []
    for steps, windows in zip(columns, kept):
        table = ffi.new("int64_t[]", n_names)
        if windows:
            bounds = ffi.new("int64_t[]", [ns for window in windows for ns in window])
            groups = ffi.new("uint32_t[]", len(windows))
            thread = trace.threads[steps.thread]
            for slices, n, first_index in batches(trace, steps.thread):
                summarizer.add_windows(thread, slices, n, first_index, bounds, groups,
                                       len(windows), table)
            summarizer.end_thread()
        tables.append(ffi.unpack(table, n_names))
    mine = tables[straggler]
    others = [table for column, table in enumerate(tables) if column != straggler]
    middle = (len(others) - 1) // 2
    found = []
    for name in range(summarizer.n_names):
        values = [table[name] for table in others]
        if not mine[name] and not any(values):
            continue
        median = sorted(values)[middle]
        if mine[name] != median:
            found.append((summarizer.unique_names[name], mine[name], median))
    found.sort(key=lambda d: (-abs(d[1] - d[2]), d[0]))
    return found[:top]


def _callers(trace, index, windows, names):
    """name -> (its caller holding most of its time in windows on thread index,
    that share), for the names given."""
    keys = {key for key, name in enumerate(trace.names) if name in names}
    if not keys:
        return {}
    starts = [low for low, _ in windows]
    time = {}                    # (key, ("key", caller's key) or ("index", its index)) -> ns
    wanted = set()               # callers' indices before their callee's batch
    for slices, n, first_index in batches(trace, index):
        if not n:
            continue
        words = memoryview(ffi.buffer(slices, n * SLICE_WORDS * 4)).cast("q")
        for at, key in _positions(slices, n, keys):
            ns = _overlap((slices[at].start, slices[at].end), windows, starts)
            if not ns:
                continue
            parent = words[at * SLICE_WORDS // 2 + PARENT_WORD // 2]
            if parent >= first_index:            # most callers: in the same batch
                caller = ("key", slices[parent - first_index].key)
            else:
                caller = ("index", parent)
                if parent >= 0:
                    wanted.add(parent)
            time[key, caller] = time.get((key, caller), 0) + ns
    parent_key = {}
    for slices, n, first_index in (batches(trace, index) if wanted else ()):
        for parent in [p for p in wanted if first_index <= p < first_index + n]:
            parent_key[parent] = slices[parent - first_index].key
            wanted.discard(parent)
        if not wanted:
            break
    by_name = {}                 # name -> caller name -> ns
    for (key, (kind, value)), ns in time.items():
        if kind == "index":
            value = parent_key.get(value)
        caller = trace.names[value] if value is not None else None
        mine = by_name.setdefault(trace.names[key], {})
        mine[caller] = mine.get(caller, 0) + ns
    found = {}
    for name, callers in by_name.items():
        caller, ns = max(callers.items(), key=lambda item: (item[1], item[0] or ""))
        if caller is not None:
            found[name] = (caller, ns / sum(callers.values()))
    return found
