"""Joining the processes of a job onto one timeline.

join(inputs, output) writes every process onto one timeline, labelled (``rank
N``, ``DataLoader worker N``, multiprocessing's process name, or the program
name), on CLOCK_MONOTONIC (one host; other hosts through their realtime
anchors), in the format output's name picks (formats.py). joined_trace gives
that Trace of several processes, streamed from the processes' own traces. It
never waits for a process: one still running is joined as far as its files go
and reported as such.
"""
import json
import os
import warnings

from .. import formats
from .._core import ffi, lib
from ..errors import TraceFormatError, TraceWarning
from ..model.streams import CallStreams
from ..model.walk import batches as thread_batches
from ..model.trace import Mark, Trace
from .jobs import _read_all
from .live import live_parts

RANK_FACTS = ("rank", "local_rank", "world_size")


def _sort_key(item):
    result, (trace, facts) = item
    if facts.get("root"):
        group = 0
    elif isinstance(facts.get("rank"), int):
        group = 1
    else:
        group = 2
    return (group, facts.get("rank") or 0, trace.start_ns if trace else 0, result.pid or 0)


def join(inputs, output):
    """Writes the processes of inputs (trace directories, process directories or
    saved traces) onto one timeline at output, in the format its name picks:
    Chrome JSON (.json, .json.gz) with a pid lane per process, named by its label,
    ordered root first, then ranks, then the rest by start; .pftrace with a
    process track per process (threads under it, in that order); .html with the
    lanes grouped by process; any other name: a saved-trace directory holding
    every process (docs/FORMAT.md), which pytrace_cffi.load reads back as a Trace
    of several processes. Times on the first process's CLOCK_MONOTONIC (other
    hosts' mapped through their realtime anchors). Returns a ProcessResult per
    process."""
    trace, results = joined_trace(inputs)
    write_any(trace, os.fspath(output))
    return results


def write_any(trace, path):
    """Writes trace to path in the format its name picks (as `export` does)."""
    formats.write(trace, path)


def joined_trace(inputs):
    """(Trace, [ProcessResult]): the processes of inputs as one Trace of several
    processes (Trace.processes: pid -> label and facts, in lane order; each
    thread's pid), times aligned as join aligns them. It streams from the
    processes' own traces (no temporary file, no slice table: see _JoinedStreams)."""
    items, traced = _traced(inputs)
    return _joined(traced, _host_shifts(traced)), [r for r, _ in items]


def _traced(inputs):
    """(every (ProcessResult, (trace, facts)) in lane order, the (result, trace,
    facts) of those that could be read)."""
    items = sorted(_read_all(inputs), key=_sort_key)
    traced = [(r, t, f) for r, (t, f) in items if t is not None]
    if not traced:
        raise TraceFormatError("no process in " + ", ".join(map(str, [inputs]))
                               + " could be read")
    return items, traced


LANE_STEP = 1 << 22       # above any Linux pid or tid (pid_max is at most 2**22)


def _lane_ids(traced):
    """Per process: (its lane pid, {OS tid: lane tid}). A joined trace keys
    processes, lanes and Chrome/Perfetto pids by pid, and marks find their thread by
    tid, so every process needs its own pid and every thread its own tid across
    the join. The OS ids are kept where they are unique; a process sharing its pid
    with an earlier one (another host's, often the same small pid in containers;
    a pid reused, or the image after an exec) gets pid + k * LANE_STEP, as do its
    threads' tids that an earlier process used. Processes.os_pid keeps the OS pid."""
    pids, tids, out = set(), set(), []

    def unused(number, used):
        lane = number
        while lane in used:
            lane += LANE_STEP
        used.add(lane)
        return lane

    for _, trace, _ in traced:
        lane_pid = unused(trace.pid, pids)
        own = {thread.native_id for thread in trace.threads if thread.native_id}
        own.update(mark.thread for mark in trace.marks)
        out.append((lane_pid, {tid: unused(tid, tids) for tid in sorted(own)}))
    return out


def _joined(traced, shifts):
    """The Trace of several processes: threads in lane order (numbered across
    processes, each with its process's lane pid and tid: see _lane_ids), one key
    per (name, kind, args) over all processes, every time moved by its
    process's host shift; its calls streamed from the processes' traces."""
    names, kinds, key_args, key_of = [], [], {}, {}

    def union_key(name, kind, args):
        identity = (name, kind, json.dumps(args, sort_keys=True) if args else "")
        key = key_of.get(identity)
        if key is None:
            key = key_of[identity] = len(names)
            names.append(name)
            kinds.append(kind)
            if args:
                key_args[key] = dict(args)
        return key

    threads, parts, stats, marks, processes = [], [], [], [], {}
    live, used_sequences = [], set()
    for (result, trace, facts), shift, (lane_pid, lane_tid) in zip(traced, shifts,
                                                                     _lane_ids(traced)):
        key_map = ffi.new("uint32_t[]", [
            union_key(name, kind, trace.key_args.get(key))
            for key, (name, kind) in enumerate(zip(trace.names, trace.key_kinds))] or [0])
        processes[lane_pid] = {"label": result.label, "state": result.state,
                               "host": facts.get("host"), "ppid": facts.get("ppid"),
                               "argv": facts.get("argv")}
        # a torchrun worker's place in the job (the HTML page shows ranks first)
        processes[lane_pid].update((name, facts[name]) for name in RANK_FACTS
                                   if type(facts.get(name)) is int)
        if lane_pid != trace.pid:
            processes[lane_pid]["os_pid"] = trace.pid
        own_live = (live_parts(result.directory, trace, used_sequences)
                    if not shift and result.directory else None)
        live.extend(own_live or [None] * len(trace.threads))
        for thread, n, open_at_stop, depth in trace.thread_counts():
            threads.append(thread._replace(index=len(threads), pid=lane_pid,
                                           native_id=lane_tid.get(thread.native_id,
                                                                  thread.native_id)))
            parts.append((trace, thread.index, key_map, len(trace.names), shift))
            stats.append((n, open_at_stop, depth))
        marks.extend(Mark(m.kind, m.ns + shift, lane_tid.get(m.thread, m.thread), m.name,
                          m.args) for m in trace.marks)
    root = traced[0][1]
    streams = _JoinedStreams(parts, stats)
    joined = Trace(names=names, key_kinds=kinds, key_args=key_args, threads=threads,
                   slices=None, streams=streams, build_slices=streams.table,
                   start_ns=min(t.start_ns + shift for (_, t, _), shift in zip(traced, shifts)),
                   stop_ns=max(t.stop_ns + shift for (_, t, _), shift in zip(traced, shifts)),
                   pid=root.pid, python_version=root.python_version, backend=root.backend,
                   clock=root.clock, params={"modules": [], "optimizer_steps": []},
                   marks=marks, dropped_events=sum(t.dropped_events for _, t, _ in traced),
                   realtime_anchor=root.realtime_anchor)
    joined.processes = processes
    if any(live):
        streams.encoded_parts = live            # threads encoded while they ran
    return joined


class _JoinedStreams(CallStreams):
    """The streams of a joined trace (see model/trace.py and model/walk.py): per
    joined thread, its process's batches (from that trace's own walk, or its
    slice table) remapped in C (pt_remap_slices) onto the union keys and the
    shifted clock, REMAP_BATCH slices at a time into a scratch buffer; each
    batch valid until the next is asked for. No records: a .pftrace encodes
    the slice batches."""

    REMAP_BATCH = 1 << 16

    def __init__(self, parts, stats):
        self.parts = parts          # per thread: (trace, its index there, key map, keys, shift)
        self.stats = stats          # per thread: (calls, open at stop, deepest depth)

    def slices(self, index):
        trace, local, key_map, n_map, shift = self.parts[index]
        scratch = None
        for slices, n, first in thread_batches(trace, local):
            if scratch is None:
                scratch = ffi.new("pt_slice[]", min(self.REMAP_BATCH, max(1, n)))
                capacity = len(scratch)
            elif n > capacity and capacity < self.REMAP_BATCH:
                scratch = ffi.new("pt_slice[]", min(self.REMAP_BATCH, n))
                capacity = len(scratch)
            for at in range(0, n, capacity):
                count = min(capacity, n - at)
                if lib.pt_remap_slices(slices + at, count, key_map, n_map, shift,
                                       scratch) != lib.PT_OK:
                    raise TraceFormatError(
                        f"pid {trace.pid}, thread {local}: a call names a function its "
                        f"trace does not know, or its time overflows when shifted by "
                        f"{shift} ns")
                yield scratch, count, first + at


def _realtime_offset(trace):
    """CLOCK_REALTIME minus CLOCK_MONOTONIC on the trace's host, from its start
    anchor, or None when the trace has none."""
    anchor = (trace.realtime_anchor or {}).get("start")
    if not anchor:
        return None
    return anchor["realtime_ns"] - anchor["monotonic_ns"]


def _host_shifts(traced):
    """Per process, the ns added to its CLOCK_MONOTONIC times to put them on the
    first process's host clock. Processes on one host share CLOCK_MONOTONIC (0);
    another host's are mapped through CLOCK_REALTIME with each trace's realtime
    anchor, as good as the hosts' clocks agree (NTP: typically well under a ms).
    Without anchors they stay unshifted, and a TraceWarning says so."""
    hosts = sorted({f.get("host") for _, _, f in traced if f.get("host")})
    reference_host = traced[0][2].get("host")
    reference = _realtime_offset(traced[0][1])
    shifts, unaligned = [], set()
    for _, trace, facts in traced:
        host = facts.get("host")
        offset = _realtime_offset(trace)
        if host == reference_host or len(hosts) < 2:
            shifts.append(0)
        elif offset is None or reference is None:
            shifts.append(0)
            unaligned.add(host)
        else:
            shifts.append(offset - reference)
    if len(hosts) > 1:
        detail = (f"lanes of {', '.join(sorted(map(str, unaligned)))} are not aligned "
                  "(no realtime anchor)" if unaligned else
                  "lanes are aligned through CLOCK_REALTIME, as closely as the hosts' "
                  "clocks agree")
        warnings.warn(f"the processes ran on {len(hosts)} hosts ({', '.join(hosts)}): "
                      f"CLOCK_MONOTONIC differs between hosts; {detail}", TraceWarning,
                      stacklevel=3)
    return shifts

