"""The trace a stop() returns: per-thread call trees walked in C, named here."""
import threading
from collections import defaultdict, namedtuple

from .._core import lib
from .._progress import counted

Call = namedtuple("Call", "id name start_ns end_ns thread parent kind")
Call.__doc__ = """One traced call.

id       index of the call in the trace (unique across threads)
name     "<path>(<first line>): <function>" for Python, e.g. "builtins.len" for C,
         "nn.Module: Linear_0" for a torch module call
start_ns, end_ns  monotonic nanoseconds (time.monotonic_ns clock)
thread   OS thread id
parent   id of the enclosing call on the same thread, or None
kind     "python", "c", or "annotation" (a record_function region)
"""

Mark = namedtuple("Mark", "kind ns thread name args")
Mark.__doc__ = """An instant ("i") or a counter sample ("C") at ns on thread (OS thread id).

args is always a dict: an instant's args ({} when none were given; a .shape
recorded as its list of integer sizes), or a counter's series -> number
(counter(name, 3) gives {name: 3}). See docs/FORMAT.md."""

ThreadInfo = namedtuple("ThreadInfo", "index native_id ident name n_events dropped pid",
                        defaults=(None,))
ThreadInfo.__doc__ = """A thread of a trace. pid: the process it ran in, for a trace of
several processes (see Trace.processes); None means the trace's own pid."""

# An asyncio task's lane (log_async) is a thread of the trace with an id no OS
# thread has (c_src/pt_runtime.c: PT_LANE_TID_BASE and up) and the name "task <name>".
TASK_LANE_TID_BASE = 1 << 30


def is_task_lane(thread):
    return (thread.native_id or 0) >= TASK_LANE_TID_BASE and str(thread.name).startswith("task ")


def threads_text(threads):
    """"3 threads", or "1 thread and 1000 async task lanes": threads counted
    apart from asyncio tasks' lanes."""
    return lanes_text(len(threads), sum(map(is_task_lane, threads)))


def lanes_text(n_threads, n_tasks):
    """threads_text of n_threads lanes, n_tasks of them asyncio tasks'."""
    if not n_tasks:
        return counted(n_threads, "thread")
    return f"{counted(n_threads - n_tasks, 'thread')} and {counted(n_tasks, 'async task lane')}"


_SETTLE_LOCK = threading.RLock()


def _settled(slot):
    """A Trace attribute that a stopped session's trace makes when first read
    (Trace._settle_keys); otherwise a plain attribute, kept in `slot`."""
    def read(trace):
        if trace._pending_keys is not None:
            trace._settle_keys()
        return trace.__dict__.get(slot)

    def write(trace, value):
        trace.__dict__[slot] = value
    return property(read, write)


class StoredTrace:
    """What stop() returns when the trace went to disk rather than into memory:
    its events spilled to a directory (spill.SpilledTrace: .directory), or the
    file start(output=FILE) wrote (follow/written.WrittenTrace: .path; .written
    False when it could not be, lines on stderr said why and where the rest is).
    Both have threads and dropped_events; load() reads the trace back, and
    iterating and export() go through it."""
    directory = None
    path = None
    written = True

    def load(self):
        raise NotImplementedError

    def __iter__(self):
        return iter(self.load())

    def export(self, path):
        """The trace in the format path's name picks (read back first)."""
        return self.load().export(path)


class Trace:
    """Calls recorded between start() and stop(), grouped by thread.

    Iterating yields Call tuples, thread by thread, each thread's calls in start
    order (a parent before its children). `names[key]` names every function;
    `key_args[key]` holds extra args for some (torch modules); `params` holds the
    parameter metadata recorded with record_params=True; `realtime_anchor` pairs
    the monotonic clock of start_ns/stop_ns with wall-clock (CLOCK_REALTIME) time
    at start and at stop. `hook_lost` lists where
    another profiler took the hook while tracing (dicts: scope, thread, native_id,
    after_ms, noticed_ms, taken_by, calls, events; see stop()), empty when none.
    `processes` describes the processes of a trace of a whole job (each thread's
    `pid` says whose it is); None for one process.
    """

    hook_lost = ()
    # A stopped session's keys to make: (make, *facts), make(trace, *facts) sets
    # names, key_kinds, key_args, _streams and _build_slices (the recorder's
    # _stopped.trace_from_session; the model never reads a session itself)
    _pending_keys = None
    _process_id_texts = None          # (the processes it was made from, lane -> text)
    # A trace of several processes (a job's, see processes.py): pid -> dict with
    # "label" and, when known, "host", "ppid", "argv", "state" (and a torchrun
    # worker's "rank", "local_rank", "world_size"); in lane order (root
    # first, then ranks, then by start). None for a trace of one process. The pid
    # is the process's lane; "os_pid" is its OS pid when that differs (an earlier
    # process of the join had it: see processes._lane_ids).
    processes = None
    # What the traced process ran, as its user names it (a script's file name,
    # a `python -m` module, torchrun: _names.program_name; a followed process's
    # label), or None when not known (files written before it was kept). A
    # .pftrace names a single process's track after it.
    label = None

    def __init__(self, *, names, key_kinds, key_args, threads, slices, start_ns, stop_ns,
                 pid, python_version, backend, clock, params, marks=(), dropped_events=None,
                 realtime_anchor=None, streams=None, build_slices=None):
        self._pending_keys = None     # see the class attribute
        self.names = names
        self.key_kinds = key_kinds
        self.key_args = key_args
        self.threads = threads
        # per thread: (cffi pt_slice array, count); None until something needs it,
        # when the trace streams from its events (streams: a walk.Streams)
        self._slice_table = slices
        self._build_slices = build_slices
        self._streams = streams
        self.start_ns = start_ns
        self.stop_ns = stop_ns
        self.pid = pid
        self.python_version = python_version
        self.backend = backend
        self.clock = clock
        self.params = params
        self.marks = list(marks)
        # {"start": {...}, "stop": {...}}, each {"monotonic_ns", "realtime_ns",
        # "spread_ns"}: wall-clock time of the trace (None for files written before)
        self.realtime_anchor = realtime_anchor
        self.dropped_events = (sum(t.dropped for t in threads)
                               if dropped_events is None else dropped_events)

    def _settle_keys(self):
        # Once, whichever thread asks first (exports may run on several at once):
        # the others wait, and see _pending_keys cleared only once all is set.
        with _SETTLE_LOCK:
            if self._pending_keys is not None:
                make, *facts = self._pending_keys
                make(self, *facts)
                self._pending_keys = None

    # A stopped session's names, kinds and streams: made on first use (_pending_keys).
    names = _settled("_names")
    key_kinds = _settled("_key_kinds")
    key_args = _settled("_key_args")
    _streams = _settled("_stream_source")

    @property
    def _slices(self):
        if self._slice_table is None:
            if self._pending_keys is not None:
                self._settle_keys()
            self._slice_table = self._build_slices()
            self._build_slices = None
        return self._slice_table

    def slices_built(self):
        """Whether the slice table exists (exports stream without it)."""
        return self._slice_table is not None

    def thread_counts(self):
        """(ThreadInfo, calls, calls open at stop, deepest depth) per thread,
        without building the slice table."""
        if self._slice_table is None and self._streams is not None:
            for thread, (n, open_at_stop, depth) in zip(self.threads, self._streams.stats):
                yield thread, n, open_at_stop, depth
            return
        for thread, (slices, n) in zip(self.threads, self._slices):
            yield (thread, n, lib.pt_open_at_stop(slices, n),
                   lib.pt_max_depth(slices, n) if n else 0)

    def __len__(self):
        return sum(n for _, n, _, _ in self.thread_counts())

    def process_id_text(self, pid):
        """How lane pid is shown: "pid N" with its OS pid; "#k" when other lanes
        of the trace had that pid on the same host (an exec'd image, a reused
        pid), k counting them in lane order; "on HOST" when the processes ran on
        several hosts."""
        cached = self._process_id_texts
        if cached is None or cached[0] is not self.processes:
            # All lanes in one pass, once: outputs ask per thread, and a job may
            # have thousands of processes.
            cached = self._process_id_texts = (self.processes, self._all_process_id_texts())
        return cached[1].get(pid) or f"pid {pid}"

    def _all_process_id_texts(self):
        processes = self.processes or {}
        identity = {}                   # lane -> (OS pid, host)
        for lane, facts in processes.items():
            os_pid = facts.get("os_pid")
            identity[lane] = (os_pid if type(os_pid) is int else lane, str(facts.get("host")))
        holders = defaultdict(list)     # (OS pid, host) -> lanes, in order
        for lane, key in identity.items():
            holders[key].append(lane)
        several_hosts = len({host for _, host in identity.values()}) > 1
        texts = {}
        for lane, (os_pid, host) in identity.items():
            text = f"pid {os_pid}"
            same = holders[(os_pid, host)]
            if len(same) > 1:
                text += f" #{same.index(lane) + 1}"
            if several_hosts and isinstance(processes[lane].get("host"), str):
                text += f" on {host}"
            texts[lane] = text
        return texts

    def thread_pid(self, thread):
        """The pid of the process thread (a ThreadInfo of this trace) ran in."""
        return self.pid if thread.pid is None else thread.pid

    def __iter__(self):
        # Without the slice table, the calls come from the streaming walk, a batch
        # at a time: iterating holds one Call, not one per call.
        from .walk import thread_batches     # (when used: import pytrace_cffi stays small)
        names, kinds = self.names, self.key_kinds
        first_id = 0
        counts = [n for _, n, _, _ in self.thread_counts()]
        for (thread, batches), count in zip(thread_batches(self), counts):
            tid = thread.native_id
            for slices, n, index_base in batches:
                first = first_id + index_base
                for i in range(n):
                    s = slices[i]
                    parent = s.parent
                    yield Call(first + i, names[s.key], s.start, s.end, tid,
                               None if parent < 0 else first_id + parent, kinds[s.key])
            first_id += count

    def thread_slices(self):
        """(ThreadInfo, cffi pt_slice array, count) per thread: the slice table,
        for exporters that want speed over convenience."""
        for thread, (slices, n) in zip(self.threads, self._slices):
            yield thread, slices, n

    def export(self, path):
        """Writes the trace in the format path's name picks, as `export -o PATH`
        does: .json, .json.gz, .pftrace, .html, .speedscope.json, .folded,
        .pprof, ... or a saved directory (docs/OUTPUTS.md). On failure the trace is
        kept for a retry."""
        from .. import formats       # the format path's name picks; it names the writers
        formats.whole_or_nothing(path, lambda: formats.write(self, path))
        return path

    def export_chrome_trace(self, path):
        """Writes Chrome Trace Event JSON (.json, or gzip for .json.gz) that opens in
        Perfetto and chrome://tracing. On failure the trace is kept for a retry."""
        from ..formats import write_chrome_json     # gzip-compressed when named .gz
        write_chrome_json(self, path)
        return path

    def export_perfetto(self, path, compress=True):
        """Writes Perfetto's native TrackEvent protobuf (.pftrace): several times
        smaller than JSON and lighter for ui.perfetto.dev, the format for big traces.
        compress: deflate-compressed packets (about ten times smaller again). On
        failure the trace is kept for a retry."""
        from ..formats import write_perfetto
        write_perfetto(self, path, compress=compress)
        return path

    def save(self, directory):
        """Writes the trace as a directory (see docs/FORMAT.md):
        meta.json, hashes.json, params.json and slices.bin. Load it back with
        pytrace_cffi.load(directory)."""
        from ..formats import save
        save(self, directory)
        return directory

    def __repr__(self):
        processes = (f" in {counted(len(self.processes), 'process')}" if self.processes
                     else "")
        return (f"<pytrace_cffi.Trace {counted(len(self), 'call')}, "
                f"{threads_text(self.threads)}"
                f"{processes}, {(self.stop_ns - self.start_ns) / 1e6:.3f} ms>")


