"""One timeline with torch.profiler: our Python calls beside torch's aten ops,
record_function regions and GPU kernels.

torch.profiler's Chrome trace puts `ts` on Unix epoch time in microseconds, less
its `baseTimeNanoseconds`; ours counts CLOCK_MONOTONIC microseconds from the
trace's start. The realtime anchor every trace keeps (CLOCK_MONOTONIC and
CLOCK_REALTIME read together at start and at stop) maps one onto the other.
torch writes the OS thread id as `tid` and the process id as `pid`, as we do, so
our slices land on the same thread tracks as the aten ops they ran.
"""
import gzip
import os

from .model.realtime import checked_anchor, monotonic_to_realtime
from ._files import replaced_atomically
from ._jsontext import dumps_utf8
from .errors import TraceFormatError
from . import formats
from .merge_regions import (SCRATCH_SLICES, TORCH_PYTHON_CATEGORY, TorchProfilerRegions,
                            anchor_clocks, is_finite_number, replaced_by_ours)

OUR_CATEGORIES = ("python_function", "user_annotation")


def _event_problem(event):
    """What keeps a torch event from being placed (merge_torch reads its pid, tid
    and, for a Python call, its ts and dur), or None."""
    if not isinstance(event, dict):
        return None                     # passed through as it is
    for field in ("pid", "tid"):
        if isinstance(event.get(field), (list, dict)):
            return f"its {field} is not a number or a string"
    dur = event.get("dur")
    if event.get("cat") == TORCH_PYTHON_CATEGORY and dur is not None and (
            not isinstance(dur, (int, float)) or isinstance(dur, bool)):
        return "a python_function event whose dur is not a number"
    return None


class _Span:
    """What our events cover: their (pid, tid)s and first and last moments, in
    torch's µs."""

    def __init__(self):
        self.traced = set()
        self.first = self.last = None
        self.last_start = {}        # (pid, tid) -> its last call's start (torch's µs)
        self.named = set()          # pids whose process lanes ours name

    def add(self, first, last):
        self.first = first if self.first is None else min(self.first, first)
        self.last = last if self.last is None else max(self.last, last)


class _Out:
    """The merged file's traceEvents, comma-separated, as bytes, written in batches."""

    BATCH = 4096

    def __init__(self, out):
        self.out = out
        self.first = True
        self.parts = []

    def event(self, text):
        self.parts.append(text if self.first else b",\n" + text)
        self.first = False
        if len(self.parts) >= self.BATCH:
            self.flush()

    def formatted(self, data):
        """Events pt_format_slices wrote, each after ",\n"."""
        self.flush()
        if self.first and data:
            data = data[2:]
        self.out.write(data)
        self.first = False

    def flush(self):
        if self.parts:
            self.out.write(b"".join(self.parts))
            self.parts = []


def _other_data(trace):
    """The otherData our Chrome export writes for trace."""
    return {
        "generator": "pytrace_cffi",
        "python": trace.python_version,
        "backend": trace.backend,
        "clock": trace.clock,
        "start_monotonic_ns": trace.start_ns,
        "stop_monotonic_ns": trace.stop_ns,
        "dropped_events": trace.dropped_events,
        "realtime_anchor": trace.realtime_anchor,
    }


def _write_our_trace(trace, out, span, anchor, base, regions):
    """Our calls straight from the walked slices, streamed (walk.thread_batches:
    no slice table when the trace streams from its events): each batch, copied a
    piece at a time into a bounded scratch buffer, has its times moved onto
    CLOCK_REALTIME in C, is filtered around torch's regions on its thread (see
    TorchProfilerRegions) and is formatted by the Chrome exporter's C formatter relative
    to torch's base (a call before it at a negative ts), as chrome.py writes them."""
    from ._core import ffi, lib
    from .render.chrome import KeyStrings, format_slices, process_lanes
    from .model.walk import warn_if_too_deep
    from .model.walk import thread_batches
    clocks = anchor_clocks(anchor)
    first, last = ffi.new("int64_t *"), ffi.new("int64_t *")
    keys = KeyStrings(trace)
    region_name_of_key = regions.name_ids(trace.names, trace.key_kinds)
    buffer, cap = keys.buffer()
    pid_of_tid = {}
    next_index, written = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    scratch, room = None, 0
    slice_size = ffi.sizeof("pt_slice")
    first_id = 0
    for event in process_lanes(trace):      # (torch's names of these lanes left out)
        span.named.add(event["pid"])
        out.event(dumps_utf8(event).encode("utf-8"))
    for thread, batches in thread_batches(trace):
        tid = thread.native_id or thread.ident
        pid = trace.thread_pid(thread)      # a job's trace: the thread's own process
        pid_of_tid.setdefault(thread.native_id, pid)
        span.traced.add((pid, tid))
        out.event(dumps_utf8({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                              "args": {"name": thread.name}}).encode("utf-8"))
        prefix = f',\n{{"ph":"X","pid":{pid},"tid":{tid},'.encode("utf-8")
        edges = regions.edges(pid, tid)
        total = 0                           # slices written for the thread
        for slices, n, index_base in batches:
            for at in range(0, n, SCRATCH_SLICES):
                piece = min(SCRATCH_SLICES, n - at)
                if piece > room:
                    scratch, room = ffi.new("pt_slice[]", piece), piece
                ffi.memmove(scratch, slices + at, piece * slice_size)
                lib.pt_slices_to_realtime(scratch, piece, *clocks, first, last)
                span.add((first[0] - base) / 1000, (last[0] - base) / 1000)
                span.last_start[(pid, tid)] = (scratch[piece - 1].start - base) / 1000
                if edges is not None:
                    piece = edges.filter(scratch, piece, index_base + at, region_name_of_key)
                next_index[0] = 0
                while next_index[0] < piece:
                    format_slices(scratch, piece, next_index, keys, prefix, base, first_id,
                                  total, thread.index, buffer, cap, written)
                    out.formatted(ffi.buffer(buffer, written[0])[:])
                total += piece
        first_id += total
    warn_if_too_deep(trace, "merged trace", stacklevel=4)
    for mark in trace.marks:
        ts = round((monotonic_to_realtime(anchor, mark.ns) - base) / 1000, 3)
        pid = pid_of_tid.get(mark.thread, trace.pid)
        event = {"ph": mark.kind, "name": mark.name, "pid": pid, "tid": mark.thread,
                 "ts": ts, "args": mark.args}
        if mark.kind == "i":
            event["s"] = "t"
        span.traced.add((pid, mark.thread))
        out.event(dumps_utf8(event).encode("utf-8"))


def _write_torch_events(reader, out, span):
    """torch's events, one at a time, as torch wrote them (line breaks taken out,
    which JSON allows only between tokens: one event per line); one holding a bare
    NaN or Infinity (which strict readers refuse) written again with strings for
    them (see _jsontext); its Python events that ours replace, and its names for the
    threads we name, are left out. Returns how many Python events went."""
    dropped = 0
    reader.take_non_finite()
    for number, (event, text) in enumerate(reader.events()):
        problem = _event_problem(event)
        if problem:
            raise TraceFormatError(f"torch trace {reader.path!r}: event {number}: {problem}")
        if reader.take_non_finite():
            text = dumps_utf8(event)
        track = (event.get("pid"), event.get("tid")) if isinstance(event, dict) else None
        if track in span.traced:
            if event.get("cat") == TORCH_PYTHON_CATEGORY and is_finite_number(event.get("ts")) \
                    and span.first is not None and replaced_by_ours(
                        event["ts"], event["ts"] + (event.get("dur") or 0), span.first,
                        span.last_start.get(track), ns_per_unit=1000):
                dropped += 1
                continue
            if event.get("ph") == "M" and event.get("name") == "thread_name":
                continue            # ours names the thread after its Python name
        if isinstance(event, dict) and event.get("pid") in span.named and \
                event.get("ph") == "M" and event.get("name") in ("process_name",
                                                                  "process_sort_index"):
            continue                # ours names the process (rank N, its program)
        out.event(text.replace("\n", "").encode("utf-8"))
    return dropped


def our_tracks(trace):
    """The (pid, tid)s of trace's threads, as the merges write them."""
    return {(trace.thread_pid(thread), thread.native_id or thread.ident)
            for thread in trace.threads}


def _our_trace(trace):
    """A Trace to write from: trace itself, or what reading.read_trace makes of a
    path (a saved-trace directory, a job's directory, or our Chrome JSON read by
    the C line reader); a SpilledTrace loaded."""
    from .model.trace import Trace
    from .spill import SpilledTrace
    if isinstance(trace, (str, bytes, os.PathLike)):
        from .reading import read_trace
        return read_trace(os.fsdecode(trace))
    if isinstance(trace, Trace):
        return trace
    if isinstance(trace, SpilledTrace):
        return trace.load()
    raise TypeError(f"trace must be a Trace or a path, not {type(trace).__name__}")


def merge_torch(trace, torch_trace_path, out_path):
    """Writes to out_path one Chrome trace with torch.profiler's events (from
    torch_trace_path, its export_chrome_trace file) and ours on torch's timeline.

    trace: a Trace, or the path of a .json/.json.gz, .pftrace or saved-trace
    directory pytrace_cffi wrote. Our slices keep their pid and tid (the process id and OS
    thread id, which torch writes too), so they share thread tracks with torch's
    cpu_op and user_annotation events; GPU events stay on their device tracks. When
    torch recorded Python calls as well (with_stack=True), its python_function
    events on the threads we traced, within our trace's time, are left out: ours
    replace them. out_path: .json, or .json.gz for gzip, or .pftrace (see
    merge_perfetto: torch's events on tracks of their own). Returns out_path.

    torch's record_function regions (user_annotation) stay, once each: a region of
    ours with one of torch's of the same name within it goes, and so does each call
    of ours that crosses the edge of one of torch's regions on its thread
    (record_function's own enter and exit ops, in which torch's region begins and
    ends), alone: every slice on a thread track nests (see TorchProfilerRegions), in a
    .pftrace too.

    Both traces are read as streams (neither is held whole in memory); our calls
    are formatted in C, as by export_chrome_trace."""
    out_path = os.fspath(out_path)
    torch_path = os.fspath(torch_trace_path)
    where = trace if isinstance(trace, (str, os.PathLike)) else "trace"
    ours = _our_trace(trace)
    try:
        anchor = checked_anchor(ours.realtime_anchor)
    except ValueError as exc:
        raise TraceFormatError(f"{where}: {exc}") from None
    if anchor is None:
        raise TraceFormatError(f"{where}: has no realtime anchor (written by a pytrace_cffi "
                               "older than merge): it cannot be placed on torch's timeline")
    return formats.merge_torch(ours, torch_path, out_path, anchor)


def merge_torch_chrome(ours, torch_path, out_path, anchor):
    """merge_torch's work for a Chrome JSON out_path, gzip-compressed for .json.gz
    (ours: a Trace whose realtime anchor is checked)."""
    other = _other_data(ours)
    from .readers.torch_chrome import TorchChromeReader, check_torch   # only when merging
    compressed = formats.torch_compressed(torch_path)
    with TorchChromeReader(torch_path, "torch trace", compressed) as torch_json:
        head = torch_json.whole_head(("baseTimeNanoseconds",))
        base = check_torch(head, torch_path)
        head = dict(torch_json.head)        # the entries before traceEvents, in order
        regions = TorchProfilerRegions.read(torch_path, base, our_tracks(ours))
        opener = ((lambda tmp: gzip.open(tmp, "wb", compresslevel=6))
                  if formats.of(out_path).gzip else (lambda tmp: open(tmp, "wb")))
        # Ours first, streamed from our slices; torch's after: its reader is still
        # at the start of its events.
        with replaced_atomically(out_path, opener) as f:
            text = dumps_utf8(head)[1:-1]
            f.write(("{" + text + ("," if text else "") + '\n"traceEvents":[\n')
                    .encode("utf-8"))
            out, span = _Out(f), _Span()
            _write_our_trace(ours, out, span, anchor, base, regions)
            dropped = _write_torch_events(torch_json, out, span)   # (after ours: span known)
            out.flush()
            tail = {k: v for k, v in torch_json.tail.items() if k not in head}
            tail["pytrace_cffi"] = {
                "trace": other,
                "torch_python_function_events_replaced": dropped,
                "clock": "our CLOCK_MONOTONIC ts mapped to torch's epoch time "
                         "through otherData.realtime_anchor",
            }
            tail["pytrace_cffi"].update(regions.counts())
            f.write(("\n]," + dumps_utf8(tail)[1:] + "\n").encode("utf-8"))
    return out_path
