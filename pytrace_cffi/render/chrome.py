"""Chrome Trace Event JSON renderer (Perfetto, chrome://tracing).

Each call becomes a complete ("X") slice in category "python_function" (a
record_function region: "user_annotation"; instants and counters are "i" and "C"
events) with
ts/dur in microseconds at nanosecond precision (three decimals), pid = process
id, tid = OS thread id, and the args torch's profiler writes ("Python id",
"Python parent id", "Python thread"). Each thread gets a "thread_name" metadata
("M") event with its Python name. Names are JSON-escaped once per function.
"""
import json
import os

from .._core import ffi, lib
from .._files import replaced_atomically
from .._jsontext import dumps_utf8, utf8_text
from .._progress import Progress
from ..model.walk import dropped_by_thread, thread_batches, warn_if_too_deep


CHUNK_BYTES = 1 << 20       # the C formatter fills it; bigger only costs memory
RECORD_ROOM = 1024          # a record's bytes besides its name and extra args (C: < 256 + prefix)
_CATEGORY = {"python": "python_function", "c": "python_function",
             "annotation": "user_annotation"}


def _us(ns):
    """Nanoseconds as a microsecond JSON number with exactly three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


class KeyStrings:
    """What the C formatter (pt_format_slices) writes per key, formatted once: the
    category and JSON-escaped name, and the extra args (e.g. "Python module id")
    with a leading comma, as C arrays pointing into bytes held here."""

    def __init__(self, trace):
        self._escaped = [f'"cat":"{_CATEGORY[kind]}","name":{json.dumps(utf8_text(name))}'
                         .encode("utf-8") for name, kind in zip(trace.names, trace.key_kinds)]
        self._extras = [b"" for _ in trace.names]
        for key, args in trace.key_args.items():
            if args:            # {} adds nothing: a lone "," would break the JSON
                self._extras[key] = b"," + dumps_utf8(args)[1:-1].encode("utf-8")
        self.count = len(self._escaped)
        self.names = ffi.new("char *[]", [ffi.from_buffer(e) for e in self._escaped])
        self.name_lens = ffi.new("uint32_t[]", [len(e) for e in self._escaped])
        self.extras = ffi.new("char *[]", [ffi.from_buffer(e) for e in self._extras])
        self.extra_lens = ffi.new("uint32_t[]", [len(e) for e in self._extras])
        # the C formatter writes a call only when its whole record fits
        self.longest = max((len(e) + len(x) for e, x in zip(self._escaped, self._extras)),
                           default=0)

    def buffer(self):
        """(buffer, its size) for pt_format_slices_from: CHUNK_BYTES, or room for the
        longest record (a name of megabytes) when that is more."""
        cap = max(CHUNK_BYTES, self.longest + RECORD_ROOM)
        return ffi.new("char[]", cap), cap


def format_slices(slices, n, next_index, keys, prefix, base, first_id, index_base,
                  thread_index, out, cap, written):
    """pt_format_slices_from on from next_index[0]: at least one call formatted
    (the buffer has room for the longest: see KeyStrings.buffer)."""
    before = next_index[0]
    lib.pt_format_slices_from(slices, n, next_index, keys.names, keys.name_lens, keys.extras,
                              keys.extra_lens, keys.count, prefix, len(prefix), base, first_id,
                              index_base, thread_index, out, cap, written)
    if next_index[0] == before:
        raise RuntimeError("pytrace_cffi: a call's JSON did not fit the formatter's buffer")


def process_lanes(trace):
    """A trace of several processes: a lane per process, named and ranked (as
    processes.join writes them): its metadata events."""
    for order, (process_pid, facts) in enumerate((trace.processes or {}).items()):
        for name, args in (("process_name", {"name": facts.get("label", "")}),
                           ("process_sort_index", {"sort_index": order})):
            yield {"ph": "M", "name": name, "pid": process_pid, "tid": 0, "args": args}


def _chunks(trace, progress):
    """The JSON text in pieces of about CHUNK_BYTES: metadata here, the slices
    formatted by the C core from names escaped once here. Times count from the
    trace's start; "Python id"s and "Python thread"s from 0."""
    pid = trace.pid
    base = trace.start_ns
    first_id = 0
    keys = KeyStrings(trace)
    out, cap = keys.buffer()
    next_index = ffi.new("uint64_t *")
    written = ffi.new("uint64_t *")
    head = {
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": "pytrace_cffi",
            "python": trace.python_version,
            "backend": trace.backend,
            "clock": trace.clock,
            "start_monotonic_ns": base,
            "stop_monotonic_ns": trace.stop_ns,
            "dropped_events": trace.dropped_events,
            "realtime_anchor": trace.realtime_anchor,
        },
    }
    head["otherData"].update(dropped_by_thread(trace))
    if trace.processes:
        head["otherData"]["processes"] = [dict(facts, pid=process_pid)
                                          for process_pid, facts in trace.processes.items()]
    if trace.label is not None:
        head["otherData"]["label"] = trace.label
    yield ('{' + dumps_utf8(head)[1:-1] + ',\n"traceEvents":[\n').encode("utf-8")
    first = True
    for event in process_lanes(trace):
        meta = dumps_utf8(event)
        yield (meta if first else ",\n" + meta).encode("utf-8")
        first = False
    pid_of_tid = {}
    for thread, batches in thread_batches(trace):
        tid = thread.native_id or thread.ident
        pid = trace.thread_pid(thread)
        pid_of_tid.setdefault(thread.native_id, pid)
        meta = dumps_utf8({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": thread.name}})
        yield (meta if first else ",\n" + meta).encode("utf-8")
        first = False
        prefix = f',\n{{"ph":"X","pid":{pid},"tid":{tid},'
        prefix = prefix.encode("utf-8")
        total = 0
        for slices, n, index_base in batches:
            next_index[0] = 0
            while next_index[0] < n:
                before = next_index[0]
                format_slices(slices, n, next_index, keys, prefix, base, first_id, index_base,
                              thread.index, out, cap, written)
                progress.advance(next_index[0] - before)
                yield ffi.buffer(out, written[0])[:]
            total = index_base + n
        first_id += total
    for mark in trace.marks:
        event = {"ph": mark.kind, "name": mark.name,
                 "pid": pid_of_tid.get(mark.thread, trace.pid), "tid": mark.thread,
                 "ts": float(_us(mark.ns - base)), "args": mark.args}
        if mark.kind == "i":
            event["s"] = "t"
        yield (",\n" + dumps_utf8(event)).encode("utf-8")
    yield b"\n]}\n"


def write_chrome_trace(trace, path, compress=False):
    """Writes trace to path as Chrome JSON, gzip-compressed with compress
    (formats.py decides it from the name: .json.gz).

    Writes to a temporary file beside path and renames it, so a failed export
    leaves neither a truncated file nor a damaged trace: retry at will."""
    path = os.fspath(path)
    warn_if_too_deep(trace)
    # gzip level 6: most of level 9's size at several times its speed
    if compress:
        import gzip     # only for .json.gz: .json writes import nothing (a Ctrl-C
        opener = lambda tmp: gzip.open(tmp, "wb", compresslevel=6)  # noqa: E731
    else:               # in an import lands in importlib's callbacks)
        opener = lambda tmp: open(tmp, "wb")  # noqa: E731
    with replaced_atomically(path, opener) as out, \
            Progress(f"writing {path}", len(trace)) as progress:
        for chunk in _chunks(trace, progress):
            out.write(chunk)
