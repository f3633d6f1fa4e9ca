"""The trace a stop() returns: per-thread call trees replayed in C, named here."""
import os
import sys
from collections import namedtuple

from . import _clock
from ._core import ffi, lib
from ._names import name_for_source
from ._tracer import USE_MONITORING, check

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

Call = namedtuple("Call", "id name start_ns end_ns thread parent kind")
Call.__doc__ = """One traced call.

id       index of the call in the trace (unique across threads)
name     "<path>(<first line>): <function>" for Python, e.g. "builtins.len" for C
start_ns, end_ns  monotonic nanoseconds (time.monotonic_ns clock)
thread   OS thread id
parent   id of the enclosing call on the same thread, or None
kind     "python" or "c"
"""

ThreadInfo = namedtuple("ThreadInfo", "index native_id ident name n_events dropped")


def _is_own_code(source):
    """Our own start/stop machinery is left out of traces."""
    filename = getattr(source, "co_filename", None)
    return filename is not None and os.path.dirname(os.path.abspath(filename)) == _PACKAGE_DIR


class Trace:
    """Calls recorded between start() and stop(), grouped by thread.

    Iterating yields Call tuples, thread by thread, each thread's calls in start
    order (a parent before its children).
    """

    def __init__(self, session):
        ptr = session.ptr
        self._ptr = ptr                 # keeps the C buffers (raw events) alive
        # Ticks -> ns, anchored at start: seeded frames start exactly at start_ns.
        self.start_ns = lib.pt_start_ns(ptr)
        tick0 = lib.pt_start_ticks(ptr)
        ns_per_tick = _clock.ns_per_tick()
        # Same arithmetic as the C replay (double product, truncated), so calls
        # closed at stop end exactly at stop_ns.
        self.stop_ns = self.start_ns + int(float(lib.pt_stop_ticks(ptr) - tick0) * ns_per_tick)
        self.clock = "tsc" if _clock.USE_TSC else "monotonic"
        self.ns_per_tick = ns_per_tick
        self.pid = os.getpid()
        self.python_version = sys.version.split()[0]
        self.backend = "sys.monitoring" if USE_MONITORING else "PyEval_SetProfile"
        sources = []
        check(lib.pt_key_sources(ptr, 1, ffi.cast("void *", id(sources))), ptr, "key sources")
        sources.insert(0, None)
        self.names = [name_for_source(source) for source in sources]
        self.key_kinds = ["c" if isinstance(source, tuple) else "python" for source in sources]
        hidden = bytes(1 if _is_own_code(source) else 0 for source in sources)
        self._sources = sources
        self.threads = []
        self._slices = []
        n_threads = lib.pt_thread_count(ptr)
        info = ffi.new("pt_thread_info *")
        n_out = ffi.new("uint64_t *")
        for index in range(n_threads):
            check(lib.pt_thread_get_info(ptr, index, info), ptr, "thread info")
            slices = ffi.new("pt_slice[]", max(1, info.n_calls))
            check(lib.pt_thread_replay(ptr, index, hidden, len(hidden), tick0, self.start_ns,
                                       ns_per_tick, slices, info.n_calls, n_out),
                  ptr, "replay")
            name = _thread_name(session, info)
            native_id = info.native_id or session.thread_native_ids.get(info.ident, 0)
            self.threads.append(ThreadInfo(index, native_id, info.ident, name,
                                           info.n_events, info.dropped))
            self._slices.append((slices, n_out[0]))
        self.dropped_events = sum(t.dropped for t in self.threads)

    def __len__(self):
        return sum(n for _, n in self._slices)

    def __iter__(self):
        names, kinds = self.names, ("python", "c")
        first_id = 0
        for thread, (slices, n) in zip(self.threads, self._slices):
            tid = thread.native_id
            for i in range(n):
                s = slices[i]
                parent = s.parent
                yield Call(first_id + i, names[s.key], s.start, s.end, tid,
                           None if parent < 0 else first_id + parent,
                           kinds[s.flags & lib.PT_SLICE_C])
            first_id += n

    def thread_slices(self):
        """(ThreadInfo, cffi pt_slice array, count) per thread: the raw replay,
        for exporters that want speed over convenience."""
        for thread, (slices, n) in zip(self.threads, self._slices):
            yield thread, slices, n

    def export_chrome_trace(self, path):
        """Writes Chrome Trace Event JSON (.json, or gzip for .json.gz) that opens in
        Perfetto and chrome://tracing. On failure the trace is kept for a retry."""
        from .chrome import write_chrome_trace
        write_chrome_trace(self, path)
        return path

    def __repr__(self):
        return (f"<pytrace_cffi.Trace {len(self)} calls, {len(self.threads)} threads, "
                f"{(self.stop_ns - self.start_ns) / 1e6:.3f} ms>")


def _thread_name(session, info):
    thread = session.thread_objects.get(info.tstate_id)
    if thread is not None:
        return thread.name
    name = session.thread_names.get(info.ident)
    if name is not None:
        return name
    return f"Thread {info.native_id or info.ident}"
