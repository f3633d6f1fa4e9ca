"""What the HTML page takes from the calls aggregated per distinct stack (a
stacks.StackAggregator, fed in the page's survey pass): each thread's flame
graph, bounded, and the top-functions table's "imports" row.

The flame graph of a thread is its tree of distinct stacks, embedded as a flat
array of five integers per stack in preorder, a stack's children by total time,
most first: depth below the thread (0: a call without a parent), key (one key
of the frame's name), calls, total ns (its calls' time with their callees') and
self ns (as the summary counts it). It covers every call, however reduced the
timeline is. Above FLAME_NODE_BUDGET stacks over all threads, the stacks whose
total is under a fraction of their thread's total are left out with what they
call: the smallest fraction of FLAME_FRACTIONS_PPM that fits the budget (and,
should even the largest not, nothing deeper than the depth that fits). A kept
stack's total still counts the time of callees left out; the page says what
was left out.

The import machinery (importlib's _find_and_load and its kin) leads the
top-functions table of most programs. Its functions are the Python functions of
importlib's bootstrap (frozen or not) and zipimport, importlib.import_module,
__import__ and _imp's built-ins, and the built-ins only they call (marshal.loads
under _compile_bytecode, posix.stat under _path_stat, exec running a module's
code). The page can show them as one row: its calls are theirs, its self time
theirs, its total the time inside any of them counted once (so the imported
modules' code run at import time is in it).
"""
import bisect
import re
from collections import Counter

from .stacks import NO_NODE

# Python functions of the import machinery, and its built-ins ("builtins.__import__")
IMPORT_MACHINERY = re.compile(
    r"<frozen (importlib\._bootstrap(_external)?|zipimport)>\(\d+\): "
    r"|(^|[/\\])importlib[/\\](_bootstrap|_bootstrap_external)\.py\(\d+\): "
    r"|(^|[/\\])importlib[/\\]__init__\.py\(\d+\): import_module$"
    r"|^builtins\.__import__$|^_imp\.", re.S)

FLAME_NODE_BUDGET = 10_000
# Fractions of a thread's total time, in parts per million, tried smallest first.
FLAME_FRACTIONS_PPM = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000,
                       10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)


class StackShape:
    """An aggregator's stacks (stacks.StackAggregator) in preorder (c_src's
    pt_stacks_preorder: a node's children by total time, most first), with each
    node's frame, calls and self time: what both uses read, worked out once. The
    loops here go over the stacks kept and the subtrees left out, or are
    comprehensions: tens of thousands of distinct stacks take milliseconds."""

    def __init__(self, aggregator):
        self.frames = aggregator.frames
        self.thread_roots = aggregator.thread_roots
        self.parents, self.frame_of, self.calls, self.self_ns = aggregator.columns()
        self.order, self.depth, self.span, self.total, self.position = aggregator.preorder()

    def thread_range(self, root):
        """(first, end) positions of the stacks below a thread's root, and its total."""
        at = self.position[root]
        return at + 1, at + 1 + self.span[at], self.total[at]


def _choose_pruning(shape, budget):
    """(fraction in ppm or 0, depth limit or None) keeping at most budget stacks."""
    ranges = [shape.thread_range(root) for root in shape.thread_roots]
    if sum(end - first for first, end, _ in ranges) <= budget:
        return 0, None
    total = shape.total
    # per stack, the largest ppm that keeps it: total * 1e6 >= ppm * thread total
    keeps_up_to = sorted(value for first, end, thread_total in ranges for value in (
        [t * 1_000_000 // thread_total for t in total[first:end]] if thread_total > 0
        else [1_000_000] * (end - first)))
    for ppm in FLAME_FRACTIONS_PPM:
        if len(keeps_up_to) - bisect.bisect_left(keeps_up_to, ppm) <= budget:
            return ppm, None
    ppm = FLAME_FRACTIONS_PPM[-1]
    per_depth = Counter()
    for first, end, thread_total in ranges:
        base = shape.depth[first - 1] + 1
        per_depth.update(shape.depth[p] - base for p in range(first, end)
                         if _kept(total[p], thread_total, ppm))
    depth_limit, kept = 0, 0
    while depth_limit in per_depth and kept + per_depth[depth_limit] <= budget:
        kept += per_depth[depth_limit]
        depth_limit += 1
    return ppm, depth_limit


def _kept(total, thread_total, ppm):
    return ppm == 0 or thread_total <= 0 or total * 1_000_000 >= ppm * thread_total


def flame_data(shape, budget=FLAME_NODE_BUDGET):
    """The page's flame graphs of a StackShape (see the module's doc): {"min_ppm",
    "max_depth", "threads": [{"nodes", "stacks", "shown", "total_ns", "left_out_ns"}]}."""
    ppm, depth_limit = _choose_pruning(shape, budget)
    key_of_frame = shape.frames.first_keys()
    order, depth, span, total = shape.order, shape.depth, shape.span, shape.total
    threads = []
    for root in shape.thread_roots:
        first, end, thread_total = shape.thread_range(root)
        base = depth[first - 1] + 1
        flat, shown, left_out_ns = [], 0, 0
        at = first
        while at < end:
            below = depth[at] - base
            if _kept(total[at], thread_total, ppm) and (depth_limit is None
                                                        or below < depth_limit):
                node = order[at]
                flat += (below, key_of_frame[shape.frame_of[node]], shape.calls[node],
                         total[at], shape.self_ns[node])
                shown += 1
                at += 1
            else:                   # left out, with its whole subtree
                left_out_ns += total[at]
                at += span[at] + 1
        threads.append({"nodes": flat, "stacks": end - first, "shown": shown,
                        "total_ns": thread_total, "left_out_ns": left_out_ns})
    return {"min_ppm": ppm, "max_depth": depth_limit, "threads": threads}


def import_frames(shape):
    """The frames of the import machinery (see the module's doc): its functions by
    name, and the built-ins whose every stack has one of them for its caller."""
    frames = shape.frames
    machinery = {frame for frame in range(frames.n_functions)
                 if IMPORT_MACHINERY.search(frames.names[frame])}
    builtins = {frame for frame in range(frames.n_functions)
                if frame not in machinery and frames.is_builtin(frame)}
    frame_of = shape.frame_of
    called_by = [(frame, frame_of[parent] if parent != NO_NODE else None)
                 for frame, parent in zip(frame_of, shape.parents) if frame in builtins]
    elsewhere = {frame for frame, caller in called_by if caller not in machinery}
    return machinery | ({frame for frame, _ in called_by} - elsewhere)


def import_rows(shape, group):
    """Per thread, [calls, total ns, self ns] of the frames of group (import_frames)
    taken as one function: their calls and self time, and the time inside any of
    them counted once (a member's total, unless it is inside an earlier one's span)."""
    order, span, total, frame_of = shape.order, shape.span, shape.total, shape.frame_of
    rows = []
    for root in shape.thread_roots:
        first, end, _ = shape.thread_range(root)
        members = [at for at in range(first, end) if frame_of[order[at]] in group]
        calls = sum(shape.calls[order[at]] for at in members)
        self_ns = sum(shape.self_ns[order[at]] for at in members)
        outside_until, inside = 0, 0
        for at in members:
            if at >= outside_until:
                inside += total[at]
                outside_until = at + span[at] + 1
        rows.append([calls, inside, self_ns])
    return rows
