"""Shared checks: calls by (name, parent name, kind), and exact nesting."""
import os
from collections import Counter, defaultdict

from pytrace_cffi._names import path_prefixes, trim_path


def trimmed(path):
    """A file name as traces show it now: sys.path and site prefixes stripped."""
    return trim_path(os.path.abspath(path), path_prefixes())


def in_files(files):
    """keep(name, parent, kind): Python calls of functions in `files`, and built-in
    calls made directly by them. Names start with the file path."""
    prefixes = tuple(f"{trimmed(path)}(" for path in files)

    def keep(name, parent, kind):
        if kind == "python":
            return name.startswith(prefixes)
        return parent is not None and parent.startswith(prefixes)
    return keep


def trace_counts(trace, keep):
    """The same Counter as ReferenceTracer.counts, from one of our traces. Only
    calls made while tracing count: a frame seeded at start is no call."""
    calls = list(trace)
    by_id = {call.id: call for call in calls}
    counts = Counter()
    for call in calls:
        parent = by_id[call.parent].name if call.parent is not None else None
        if keep(call.name, parent, call.kind):
            counts[(call.name, parent, call.kind)] += 1
    return counts


def strip_outside_parents(counts, keep_parent):
    """Parents outside the compared files become None: the oracle starts in the
    test harness, we seed the harness's frames."""
    out = Counter()
    for (name, parent, kind), n in counts.items():
        out[(name, parent if parent is not None and keep_parent(parent) else None, kind)] += n
    return out


def diff(ours, reference):
    lines = []
    for key in sorted(set(ours) | set(reference), key=str):
        if ours[key] != reference[key]:
            lines.append(f"  {key}: ours {ours[key]}, oracle {reference[key]}")
    return "\n".join(lines)


def assert_nested(trace):
    """On each thread every call lies inside its parent, and siblings never overlap."""
    calls = list(trace)
    by_id = {call.id: call for call in calls}
    children = defaultdict(list)
    for call in calls:
        assert call.start_ns <= call.end_ns, call
        if call.parent is not None:
            parent = by_id[call.parent]
            assert parent.thread == call.thread, (parent, call)
            assert parent.start_ns <= call.start_ns and call.end_ns <= parent.end_ns, (parent, call)
        children[(call.thread, call.parent)].append(call)
    for siblings in children.values():
        siblings.sort(key=lambda c: (c.start_ns, c.id))
        for before, after in zip(siblings, siblings[1:]):
            assert before.end_ns <= after.start_ns, (before, after)


def chrome_crossings(events):
    """Pairs (earlier, later) of a Chrome trace's complete events on one (pid, tid)
    that overlap without nesting, as names; [] when every track nests strictly.
    Each track's events in start order (the longer first at a tie), times in whole
    nanoseconds; a stack holds the chain of events still open: an event that ends
    after the innermost one open at its start crosses it."""
    tracks = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            start = round(e["ts"] * 1000)
            tracks[(e["pid"], e["tid"])].append((start, start + round(e["dur"] * 1000),
                                                 e["name"]))
    crossings = []
    for spans in tracks.values():
        spans.sort(key=lambda span: (span[0], -span[1]))
        open_spans = []
        for start, end, name in spans:
            while open_spans and open_spans[-1][1] <= start:
                open_spans.pop()
            if open_spans and end > open_spans[-1][1]:
                crossings.append((open_spans[-1][2], name))
            open_spans.append((start, end, name))
    return crossings


# The start of a memory test's script (run in a subprocess, on Linux): status(field)
# is a /proc/self/status size in bytes, e.g. VmRSS, or VmHWM, the peak since the
# process began or since "5" was written to /proc/self/clear_refs.
PROC_STATUS = """
def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
"""
