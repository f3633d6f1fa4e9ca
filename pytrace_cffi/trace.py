"""The trace a stop() returns: per-thread call trees walked in C, named here."""
import os
import sys
import threading
from collections import defaultdict, namedtuple

from . import _clock
from ._core import ffi, lib
from ._names import name_for_source, path_inputs, path_prefixes, program_name
from ._progress import counted
from ._torch import REGION_ENTER, REGION_EXIT, is_fast_region_code
from .annotations import WRAPPER_CODE
from ._tracer import USE_MONITORING, check

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# _boot: processes.py; render: an export made while tracing (by the program)
_OWN_DIRS = (_PACKAGE_DIR, os.path.join(_PACKAGE_DIR, "_boot"),
             os.path.join(_PACKAGE_DIR, "render"))

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


# id -> (code object (kept alive, so its id stays its own), how its seeded frames hide)
_launcher_codes = {}


def hide_launcher_frames(codes, with_callees=False):
    """Frames of these code objects that are already running when tracing starts
    are left out of traces, alone (what they call is kept), or with_callees with
    what they call until they return; calls of the same code made during the
    trace are kept. The command line names the frames below the program it runs
    (runpy's, under `python -m pytrace_cffi`); a followed child's bootstrap the
    interpreter's start-up it runs in (site's, importlib's: with_callees)."""
    hide = lib.PT_HIDE_STARTUP if with_callees else lib.PT_HIDE_SEEDED
    _launcher_codes.clear()
    _launcher_codes.update((id(code), (code, hide)) for code in codes)


def forget_startup_frames():
    """Drops hide_launcher_frames' with_callees codes: the start-up they name ran
    under one trace, this process's first (importlib's code runs again in the
    program's imports: a frame of it seeded later, in a fork made inside an
    import or a trace started there, is the program's)."""
    for key, (_, hide) in list(_launcher_codes.items()):
        if hide == lib.PT_HIDE_STARTUP:
            del _launcher_codes[key]


def codes_below(frame):
    """The code of frame and of each frame below it (its caller's, ...)."""
    codes = []
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    return codes


_hidden_alone = {}       # see hide_alone: id -> code (kept alive: its id stays its own)


def hide_alone(code):
    """Calls of code (a wrapper of ours around the program's own calls, see
    processes._spawnv_passfds) are left out of traces alone: its callees stay."""
    _hidden_alone[id(code)] = code


def hiding_rules():
    """A snapshot of the rules _hiding reads that the program may change after
    stop() (which launcher frames, which wrappers): the trace keeps stop()'s."""
    return dict(_launcher_codes), dict(_hidden_alone)


def _hiding(source, rules=None):
    """Our own start/stop machinery is left out of traces with what it calls; the
    record_function decorator's wrapper is left out alone; a launcher's frames
    (see hide_launcher_frames) are left out when seeded; FastRegion's __enter__ and
    __exit__ are left out alone once their regions exist. rules: a hiding_rules()
    snapshot (default: the rules now)."""
    launcher_codes, hidden_alone = rules or (_launcher_codes, _hidden_alone)
    if source is WRAPPER_CODE:
        return lib.PT_HIDE_ALONE
    if is_fast_region_code(source):
        return lib.PT_HIDE_CARRIER      # their regions replace them
    filename = getattr(source, "co_filename", None)
    if filename is not None and _is_own_file(filename):
        # ours, with what it calls; our wrappers of the program's calls alone (hide_alone)
        alone = hidden_alone.get(id(source)) is source
        return lib.PT_HIDE_ALONE if alone else lib.PT_HIDE_SUBTREE
    code, hide = launcher_codes.get(id(source), (None, 0))
    return hide if code is source else 0


_own_files = {}          # absolute co_filename -> whether it is one of ours


def _is_own_file(filename):
    """Whether code of this file is pytrace_cffi's own (start() asks for each of
    its frames: remembered per file; a relative name depends on the cwd)."""
    own = _own_files.get(filename)
    if own is None:
        own = os.path.dirname(os.path.abspath(filename)) in _OWN_DIRS
        if os.path.isabs(filename) and len(_own_files) < 4096:
            _own_files[filename] = own
    return own


def _kind(source):
    if isinstance(source, tuple):
        return "c"
    return "annotation" if isinstance(source, str) else "python"


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
    _pending_keys = None              # a stopped session's keys to make (_from_session)
    _process_id_texts = None          # (the processes it was made from, lane -> text)
    # A trace of several processes (a job's, see processes.py): pid -> dict with
    # "label" and, when known, "host", "ppid", "argv", "state"; in lane order (root
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
        self._pending_keys = None     # see _from_session
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

    @classmethod
    def _from_session(cls, session):
        """The trace of a stopped session, made in O(threads): its events stay where
        they are. The keys' names (O(keys), in Python) are made when first read,
        and each thread is scanned (O(events), in C) when first counted; exports
        and iteration stream from the events, and the slice table is made only
        when something asks for it (thread_slices())."""
        ptr = session.ptr
        facts = _stop_facts(session)
        trace = cls(names=None, key_kinds=None, key_args=None,
                    threads=list(facts["threads"]), slices=None, start_ns=facts["start_ns"],
                    stop_ns=facts["stop_ns"], pid=facts["pid"], python_version=facts["python"],
                    backend=facts["backend"], clock=facts["clock_name"],
                    params=facts["params"], marks=facts["marks"],
                    realtime_anchor=facts["realtime_anchor"])
        trace._ptr = ptr                      # keeps the raw events alive with the trace
        trace._pending_keys = (session, facts)     # (no cycle through the trace)
        trace.label = facts["label"]
        return trace

    def _settle_keys(self):
        # Once, whichever thread asks first (exports may run on several at once):
        # the others wait, and see _pending_keys cleared only once all is set.
        with _SETTLE_LOCK:
            if self._pending_keys is not None:
                _held_keys(self, *self._pending_keys)
                self._pending_keys = None

    # A stopped session's names, kinds and streams: made on first use (_held_keys).
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
        from .render.chrome import _thread_batches
        names, kinds = self.names, self.key_kinds
        first_id = 0
        counts = [n for _, n, _, _ in self.thread_counts()]
        for (thread, batches), count in zip(_thread_batches(self), counts):
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

    def export_chrome_trace(self, path):
        """Writes Chrome Trace Event JSON (.json, or gzip for .json.gz) that opens in
        Perfetto and chrome://tracing. On failure the trace is kept for a retry."""
        from .formats import write_chrome_json as write_chrome_trace
        write_chrome_trace(self, path)
        return path

    def export_perfetto(self, path, compress=True):
        """Writes Perfetto's native TrackEvent protobuf (.pftrace): several times
        smaller than JSON and lighter for ui.perfetto.dev, the format for big traces.
        compress: deflate-compressed packets (about ten times smaller again). On
        failure the trace is kept for a retry."""
        from .render.perfetto import write_perfetto
        write_perfetto(self, path, compress=compress)
        return path

    def save(self, directory):
        """Writes the trace as a directory (see docs/FORMAT.md):
        meta.json, hashes.json, params.json and slices.bin. Load it back with
        pytrace_cffi.load(directory)."""
        from .render.saved import save
        save(self, directory)
        return directory

    def __repr__(self):
        processes = (f" in {counted(len(self.processes), 'process')}" if self.processes
                     else "")
        return (f"<pytrace_cffi.Trace {counted(len(self), 'call')}, "
                f"{counted(len(self.threads), 'thread')}"
                f"{processes}, {(self.stop_ns - self.start_ns) / 1e6:.3f} ms>")


class TorchRegions:
    """torch's record_function regions as slices of their own (category
    user_annotation, named as torch.profiler names them): each tagged
    record_function.__enter__ call gets a region slice around it, spanning to the
    end of the matching __exit__ call and enclosing the calls made in between.
    keys: per tag, the region's key (PT_REGION_EXIT for __exit__) for the walk's
    tables (walk.KeyPlan); None when no tag opens a region."""

    def __init__(self, tags, names, key_kinds):
        self.keys = None
        if not any(t and t.get("kind") == REGION_ENTER for t in tags):
            return
        key_for_name = {}
        keys = [0] * len(tags)
        for tag, info in enumerate(tags):
            if not info:
                continue
            if info.get("kind") == REGION_EXIT:
                keys[tag] = lib.PT_REGION_EXIT
            elif info.get("kind") == REGION_ENTER:
                key = key_for_name.get(info["name"])
                if key is None:
                    key = key_for_name[info["name"]] = len(names)
                    names.append(info["name"])
                    key_kinds.append("annotation")
                keys[tag] = key
        self.keys = ffi.new("uint32_t[]", keys)
        self.n_tags = len(keys)


def _held_keys(trace, session, facts):
    """The rest of a stopped session's trace (see Trace._from_session): key names,
    kinds and hiding, the KeyPlan, and the streams over the held events, which scan
    each thread when first counted (at once when record_function args need keys of
    their own: the names are then complete when first read)."""
    from .render.walk import HeldEvents, KeyPlan, Streams
    ptr = session.ptr
    facts.update(_key_facts(session, facts))
    clock = facts["clock"]
    names, key_kinds = list(facts["names"]), list(facts["key_kinds"])
    key_args = {}
    plan = KeyPlan(names, key_kinds, key_args, facts["hidden"], facts["tags"],
                   facts["annotation_args"])
    sources = [HeldEvents(ptr, thread.index) for thread in facts["threads"]]
    min_duration_ns = session.min_duration_ns
    streams = Streams(plan, sources, clock, clock["stop_ticks"], min_duration_ns,
                      keep_alive=ptr, lazy=not plan.annotation_args)
    trace.names, trace.key_kinds, trace.key_args, trace._streams = names, key_kinds, key_args, streams
    trace._build_slices = streams.table


def session_facts(session):
    """Everything a stopped session knows besides its events: clock mapping, key
    names, kinds and hiding, threads, tags, marks. Shared by the in-memory trace
    and the spilled one."""
    facts = _stop_facts(session)
    facts.update(_key_facts(session, facts))
    return facts


def _stop_facts(session):
    """What stop() needs of a stopped session, in O(threads): clock mapping,
    threads, tags, marks."""
    ptr = session.ptr
    stopped = ffi.new("pt_stop_facts *")
    check(lib.pt_get_stop_facts(ptr, _clock.USE_TSC, stopped), ptr, "stop facts")
    start_ns, tick0, stop_ticks = stopped.start_ns, stopped.start_ticks, stopped.stop_ticks
    ns_per_tick = _clock.ns_per_tick((stopped.now_ticks, stopped.now_ns))

    def to_ns(ticks):
        # Same arithmetic as the C walk (double product, truncated), so calls
        # closed at stop end exactly at stop_ns.
        return start_ns + int(float(ticks - tick0) * ns_per_tick)

    threads = []
    infos = ffi.new("pt_thread_info[]", stopped.n_threads)
    check(lib.pt_thread_infos(ptr, infos, stopped.n_threads), ptr, "thread info")
    for index, info in enumerate(infos):
        native_id = info.native_id or session.thread_native_id(info.ident)
        threads.append(ThreadInfo(index, native_id, info.ident, _thread_name(session, info),
                                  info.n_events, info.dropped))
    watcher = session.watcher
    return {
        "clock": {"tick0": tick0, "ns0": start_ns, "ns_per_tick": ns_per_tick,
                  "stop_ticks": stop_ticks},
        "start_ns": start_ns,
        "stop_ns": to_ns(stop_ticks),
        "threads": threads,
        "infos": infos,
        "tags": watcher.tags if watcher else [None],
        "annotation_args": session.annotation_args,
        "params": ({"modules": watcher.modules, "optimizer_steps": watcher.optimizer_steps}
                   if watcher else {"modules": [], "optimizer_steps": []}),
        "marks": [Mark(kind, to_ns(ticks), threads[index].native_id, name, payload)
                  for kind, ticks, index, name, payload in session.marks],
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "label": program_name(),
        # what naming and hiding read when the keys are settled, as they were now
        "path_inputs": path_inputs() if session.trim_paths else None,
        "hiding_rules": hiding_rules(),
        "backend": "sys.monitoring" if USE_MONITORING else "PyEval_SetProfile",
        "clock_name": "tsc" if _clock.USE_TSC else "monotonic",
        "min_duration_ns": session.min_duration_ns,
        "realtime_anchor": _clock.anchor_from(stopped.anchor),
    }


def _key_facts(session, facts):
    """A stopped session's keys, in O(keys): names, kinds and how traces hide them."""
    ptr = session.ptr
    sources = []
    check(lib.pt_key_sources(ptr, 1, ffi.cast("void *", id(sources))), ptr, "key sources")
    sources.insert(0, None)
    prefixes = path_prefixes(facts["path_inputs"]) if session.trim_paths else ()
    # Code the filters left out can still have frames seeded at start (its key was
    # classified just after): they are left out alone.
    flags = ffi.new("uint8_t[]", len(sources))
    lib.pt_key_flags(ptr, flags, len(sources))
    rules = facts["hiding_rules"]
    hidden = [_hiding(source, rules) or (lib.PT_HIDE_ALONE if flags[key] & lib.PT_KEY_SKIPPED else
                                  lib.PT_HIDE_CARRIER if flags[key] & lib.PT_KEY_NAMED else 0)
              for key, source in enumerate(sources)]
    return {
        "names": [name_for_source(source, prefixes) for source in sources],
        "key_kinds": [_kind(source) for source in sources],
        "hidden": hidden,
    }


def _thread_name(session, info):
    thread = session.thread_objects.get(info.tstate_id)
    if thread is not None:
        return thread.name
    thread = session.known_thread(info.ident)
    if thread is not None:
        return thread.name
    return f"Thread {info.native_id or info.ident}"
