"""Starting and stopping the C core: backend choice, sys.monitoring registration,
the hook that attaches threads born while tracing, another profiler taking the hook.
What a stopped session becomes is _stopped.py's; status codes -> exceptions _status.py's."""
import math
import os
import sys
import threading

from . import _clock, _runtime, _tasks
from ._memory import MemorySampler
from ._session_base import SessionBase
from ._core import ffi, lib
from ._hiding import hiding
from ._status import check
from ._hook_losses import describe_hook_losses
from ._stopped import trace_from_session
from ._torch import TorchWatcher
from .errors import TraceError, TracerConflictError
from .options import session_options

# sys.monitoring from 3.12: a C callback costs ~2.5x where PyEval_SetProfile ~4x.
USE_MONITORING = sys.version_info >= (3, 12)


def profile_unwraps_bound_builtins(version_info=sys.version_info):
    """Whether sys.setprofile, on the sys.monitoring backend of this version,
    reports calling a bound method object whose function is a built-in
    (types.MethodType(len, x)(), every pybind11 class method) as a c_call of that
    built-in. CPython gh-122029 made its legacy shim look inside such methods in
    3.12.5 and 3.13.0rc1; 3.12.0-3.12.4 report only their c_return. From 3.14 the
    CALL event itself passes the function and its self (seen on 3.14.10 and
    3.15.2), so the shim reports it with nothing to unwrap. On 3.9-3.11 the
    profile backend sees what sys.setprofile sees: nothing to do."""
    if tuple(version_info[:2]) == (3, 12):
        return tuple(version_info[:3]) >= (3, 12, 5)
    if tuple(version_info[:2]) == (3, 13):
        return tuple(version_info[:4]) >= (3, 13, 0, "candidate")
    return tuple(version_info[:2]) >= (3, 14)


def monitoring_unwraps_bound_builtins(version_info=sys.version_info):
    """Whether the sys.monitoring backend must look inside a bound method of a
    built-in itself to report it as sys.setprofile does: 3.12.5+ and 3.13, whose
    CALL passes the method object (3.14's passes the function)."""
    return (3, 12) <= tuple(version_info[:2]) < (3, 14) and \
        profile_unwraps_bound_builtins(version_info)


# This interpreter's answer, asked once (every Session needs it).
_UNWRAP_FLAG = (lib.PT_FLAG_UNWRAP_METHODS
                if USE_MONITORING and monitoring_unwraps_bound_builtins() else 0)
# record_params' optimizer steps a ring keeps (their metadata, newest first out)
STEPS_KEPT_IN_A_RING = 64
MONITORING_TOOL_NAME = "pytrace_cffi"
# The sys.monitoring tool ids start() may claim, first free first. 4 and 3 are no
# standard tool's (0 DEBUGGER_ID, 1 COVERAGE_ID, 2 PROFILER_ID, 5 OPTIMIZER_ID), so
# cProfile (PROFILER_ID from 3.12), coverage.py and debuggers run beside us; 2 (our
# id before) only when both are taken, and then cProfile cannot start while we trace.
MONITORING_TOOL_IDS = (4, 3, 2)
MONITORING_EVENTS = (
    "PY_START", "PY_RESUME", "PY_THROW", "PY_RETURN", "PY_YIELD", "PY_UNWIND",
    "CALL", "C_RETURN", "C_RAISE", "RAISE", "RERAISE", "EXCEPTION_HANDLED",
)
# registered only under log_exceptions: without it an exception costs nothing
EXCEPTION_EVENTS = frozenset(("RAISE", "RERAISE", "EXCEPTION_HANDLED"))
def min_duration_ns(min_duration_us):
    """min_duration_us as the whole-nanosecond bound a call's length is held to
    (kept when at least this long): 1.001 us is 1001 ns, though 1.001 * 1000 is
    1000.9999999999999 in floats (rounded to 1e-6 ns first), and a fraction of a
    nanosecond rounds up, calls lasting whole nanoseconds."""
    if not min_duration_us:
        return 0
    return math.ceil(round(min_duration_us * 1000, 6))


def _own_frames():
    """How many of the calling thread's innermost frames, from our caller (the
    frame calling pt_start) outward, run pytrace_cffi's own code: start()'s
    machinery, whichever way it was reached (start(), trace().__enter__, the
    CLI's windows). Traces hide those frames, so pt_start does not seed them and
    the 128 frames it seeds are all the user's."""
    count = 0
    frame = sys._getframe(1)
    while frame is not None and hiding(frame.f_code) == lib.PT_HIDE_SUBTREE:
        count += 1
        frame = frame.f_back
    return count


class Session(SessionBase):
    """One start..stop of the C core. Owns the C tracer until a Trace takes it."""

    backend_name = "sys.monitoring" if USE_MONITORING else "PyEval_SetProfile"

    def __init__(self, **given):
        # start()'s options (options.py), checked by start(); these are the defaults
        o = session_options(given)
        noop, output, max_depth = o["noop"], o["output"], o["max_depth"]
        flags = ((lib.PT_FLAG_C_CALLS if o["c_calls"] else 0) | (lib.PT_FLAG_NOOP if noop else 0)
                 | (lib.PT_FLAG_TSC if _clock.USE_TSC else 0) | _UNWRAP_FLAG)
        backend = lib.PT_BACKEND_MONITOR if USE_MONITORING else lib.PT_BACKEND_PROFILE
        ptr = lib.pt_tracer_new(flags, backend)
        if ptr == ffi.NULL:
            raise MemoryError("cannot allocate the tracer")
        self.ptr = ffi.gc(ptr, lib.pt_tracer_free)
        self.trim_paths = o["trim_paths"]
        self.output = output
        self.min_duration_ns = min_duration_ns(o["min_duration_us"])
        self._skip_code = make_code_filter(o["include"], o["exclude"])
        self._max_depth = max_depth
        if max_depth or self._skip_code:
            check(lib.pt_set_filters(self.ptr, max_depth or 0,
                                     ffi.cast("void *", id(self._skip_code))
                                     if self._skip_code else ffi.NULL),
                  self.ptr, "filters")
        if o["skip_imports"]:
            for code in import_entry_points():
                check(lib.pt_set_import_entry(self.ptr, ffi.cast("void *", id(code))),
                      self.ptr, "skip_imports")
        max_events = o["max_events"]
        if max_events is not None:
            spill = ffi.NULL
            if output is not None:
                from .spill import prepare_spill_directory
                spill = os.fsencode(prepare_spill_directory(output))
            check(lib.pt_set_bounds(self.ptr, max_events, spill), self.ptr, "max_events")
        self.watcher = None
        if o["with_modules"] and not noop:
            # a ring (max_events, flight recorder) keeps the newest steps' parameters
            self.watcher = TorchWatcher(record_params=o["record_params"],
                                        steps_kept=STEPS_KEPT_IN_A_RING
                                        if max_events is not None else None,
                                        collectives=o["flight_recorder"] not in (None, False))
            spec = self.watcher.watch_spec()
            check(lib.pt_set_watch(self.ptr, ffi.cast("void *", id(spec))), self.ptr, "watch")
        self.exception_log = None
        if o["log_exceptions"] and not noop:
            from ._exceptions import ExceptionLog
            self.exception_log = ExceptionLog(trim_paths=o["trim_paths"])
            describe = self.exception_log.describe
            check(lib.pt_set_exception_hook(self.ptr, ffi.cast("void *", id(describe))),
                  self.ptr, "log_exceptions")
        if o["log_args"] and not noop:
            from ._arglog import ArgLog, make_matcher
            arg_log = ArgLog(with_repr=o["log_args_repr"])
            spec = (make_matcher(o["log_args"]), arg_log.on_call, arg_log.on_return)
            check(lib.pt_set_arg_logging(self.ptr, ffi.cast("void *", id(spec))), self.ptr,
                  "log_args")
        # log_gc's and the other on/off recorders of _runtime.RECORDERS that are on
        self.recorders = [] if noop else [r for r in _runtime.RECORDERS if o[r.option]]
        self.log_async = o["log_async"] and not noop
        self.lane_names = {}            # a task lane's native id -> its thread's name
        self._memory = (MemorySampler(o["memory_interval_ms"])
                        if o["memory_interval_ms"] and not noop else None)
        self.thread_objects = {}        # tstate id -> threading.Thread, for names
        # ident -> threading.Thread of the threads alive at start and at stop: names
        # and native ids of threads that were never attached by the thread hook
        self._threads_at_start = self._threads_at_stop = {}
        self._previous_thread_hook = None
        self._thread_hook = None        # what start() gave threading.setprofile
        self._tool_id = None
        self._callbacks = {}            # sys.monitoring event -> our callback
        self._event_mask = 0
        # Another profiler taking our hook: the C core notes threads on 3.9-3.11;
        # these hold what Python notices (sys.monitoring, threading's hook).
        self._check_lock = threading.RLock()    # a signal handler may ask mid-check
        self._live = False              # pt_start done: the hooks are there to check
        self._stopped = False
        self._monitoring_lost = None
        self._thread_hook_lost = None
        self.hook_losses = []           # filled at stop: see describe_hook_losses

    # -- start ---------------------------------------------------------------
    def start(self):
        _check_no_other_profiler()
        self._threads_at_start = _threads_alive()
        tool_id, mask = -1, 0
        if USE_MONITORING:
            tool_id, mask = self._claim_monitoring()
        self._previous_thread_hook = _get_threading_profile()
        self._thread_hook = thread_hook()
        threading.setprofile(self._thread_hook)
        try:
            if self._memory is not None:
                self._memory.prepare()      # its thread, before start() seeds threads
            for recorder in self.recorders:
                recorder.watch()
            if self.log_async:
                self._task_lanes = _tasks.watch_tasks()
            if self.watcher is not None:
                self.watcher.begin()
            if self._max_depth:
                self._uncount_hidden_frames()
            if self.exception_log is not None:
                self.exception_log.note_running_frames()
            check(lib.pt_start(self.ptr, tool_id, mask, _own_frames(),
                               ffi.cast("void *", id(self.thread_objects))), self.ptr, "start")
            self._live = True
        except BaseException:
            if self._memory is not None:
                self._memory.end()
            for recorder in self.recorders:
                recorder.unwatch()
            if self.log_async:
                _tasks.unwatch_tasks()
            if self.watcher is not None:
                self.watcher.end()
            threading.setprofile(self._previous_thread_hook)
            if USE_MONITORING:
                self._release_monitoring()
            raise

    def _uncount_hidden_frames(self):
        """max_depth counts the calls a trace shows: the code of running frames
        that traces leave out (ours, from here down; a launcher's) never counts."""
        tops = list(sys._current_frames().values())
        tops.append(sys._getframe())
        seen = set()
        for frame in tops:
            while frame is not None:
                code = frame.f_code
                if id(code) not in seen:
                    seen.add(id(code))
                    if hiding(code):
                        check(lib.pt_set_uncounted(self.ptr, ffi.cast("void *", id(code))),
                              self.ptr, "uncounted code")
                frame = frame.f_back

    def _claim_monitoring(self):
        monitoring = sys.monitoring
        tool_id = _claim_tool_id(monitoring)
        self._tool_id = tool_id
        global _disabled_locations
        if _disabled_locations:
            # An earlier session's filters switched code off with DISABLE, which
            # lasts until restart_events (it re-enables every tool's locations).
            monitoring.restart_events()
            _disabled_locations = False
        if self._skip_code:
            _disabled_locations = True
        callbacks = []
        check(lib.pt_monitor_callbacks(self.ptr, ffi.cast("void *", id(callbacks))),
              self.ptr, "monitoring callbacks")
        mask = 0
        events = _monitoring_events()
        for event_name, callback in callbacks:
            if event_name in EXCEPTION_EVENTS and self.exception_log is None:
                continue
            event = events[event_name]
            monitoring.register_callback(tool_id, event, callback)
            self._callbacks[event] = callback
            mask |= event
        # C_RETURN and C_RAISE go with CALL: get_events leaves them out (3.12, 3.13).
        self._event_mask = mask & ~(monitoring.events.C_RETURN | monitoring.events.C_RAISE)
        return tool_id, mask

    def _release_monitoring(self, note_replaced=False):
        """Gives the tool id back, touching nothing another tool put there. With
        note_replaced (stop()), a callback of ours found replaced is the loss
        _check_monitoring would have noted: taking ours out is the same look."""
        monitoring = sys.monitoring
        tool_id, self._tool_id = self._tool_id, None
        if tool_id is None:
            return
        holder = monitoring.get_tool(tool_id)
        if holder is None:
            # Freed by other code while ours: on 3.12-3.13 that leaves our events
            # on, and only the holder of an id may switch them off.
            monitoring.use_tool_id(tool_id, MONITORING_TOOL_NAME)
            holder = MONITORING_TOOL_NAME
        if holder == MONITORING_TOOL_NAME:
            monitoring.set_events(tool_id, 0)
        for event, ours in self._callbacks.items():
            found = monitoring.register_callback(tool_id, event, None)
            if found is not ours:
                monitoring.register_callback(tool_id, event, found)
                if note_replaced and self._monitoring_lost is None:
                    self._note_monitoring_lost(_callback_replaced(tool_id, event, found))
        if holder == MONITORING_TOOL_NAME:
            monitoring.free_tool_id(tool_id)

    # -- another profiler taking the hook ----------------------------------------
    def check_hooks(self, current_only=False):
        """Notes another profiler that took our hook, and says whether ours still
        records: on 3.9-3.11 the profile hook of every thread we attached (with
        current_only, of the calling thread only); on 3.12+ our sys.monitoring
        tool. Cheap (no event is read); never called on the hot path."""
        with self._check_lock:
            if self._stopped or not self._live:
                return False        # (start() not done: another thread asking early)
            if USE_MONITORING:
                return self._check_monitoring()
            self._check_thread_hook()
            return lib.pt_check_hooks(self.ptr, 1 if current_only else 0) == 0

    def _check_thread_hook(self):
        """3.9-3.11: threads started once threading's hook is another's are not
        followed."""
        if self._thread_hook_lost is None:
            hook = _get_threading_profile()
            if hook is not self._thread_hook:
                self._thread_hook_lost = (_clock.reading()[0], _describe(hook))

    def _check_monitoring(self, callbacks=True):
        """3.12+: our tool id still ours (or merely freed, which leaves its events
        and callbacks working), our events still on and our callbacks in place.
        There is no getter for a callback: register_callback swaps ours in and
        returns what was there; when that was ours nothing changed, else what was
        found is put straight back (that tool keeps it, ours stays out). stop()
        leaves the callbacks to _release_monitoring (callbacks=False)."""
        if self._monitoring_lost is not None:
            return False
        monitoring = sys.monitoring
        tool_id = self._tool_id
        cause = None
        holder = monitoring.get_tool(tool_id)
        if holder is not None and holder != MONITORING_TOOL_NAME:
            cause = f"sys.monitoring tool id {tool_id} now held by {holder!r}"
        else:
            events = monitoring.get_events(tool_id)
            missing = self._event_mask & ~events
            if missing:
                names = [name for name in MONITORING_EVENTS
                         if getattr(monitoring.events, name) & missing]
                cause = (f"sys.monitoring events of tool id {tool_id} switched off "
                         f"({', '.join(names)})")
                if holder is None:
                    cause += " and the tool id freed"
            elif callbacks:
                for event, ours in self._callbacks.items():
                    found = monitoring.register_callback(tool_id, event, ours)
                    if found is not ours:
                        monitoring.register_callback(tool_id, event, found)
                        cause = _callback_replaced(tool_id, event, found)
                        break
        if cause is None:
            return True
        self._note_monitoring_lost(cause)
        return False

    def _note_monitoring_lost(self, cause):
        self._monitoring_lost = (lib.pt_last_event_ticks(self.ptr), _clock.reading()[0], cause)

    def _collect_hook_losses(self):
        """After pt_stop: every loss noticed, as raw tuples for describe_hook_losses."""
        losses = []
        if USE_MONITORING:
            if self._monitoring_lost is not None:       # (stop() looked)
                last, noticed, cause = self._monitoring_lost
                losses.append(("process", None, last, noticed, cause))
        else:
            found = []
            check(lib.pt_hooks_lost(self.ptr, ffi.cast("void *", id(found))), self.ptr,
                  "lost hooks")
            for index, last, noticed, hook in found:
                losses.append(("thread", index, last, noticed,
                               f"profile hook replaced by {_describe(hook)}"
                               if hook is not None else "profile hook removed"))
            if self._thread_hook_lost is not None:
                noticed, hook = self._thread_hook_lost
                losses.append(("new threads", None, None, noticed,
                               f"threading.setprofile hook replaced by {hook}"))
        return losses

    def known_thread(self, ident, native_id=None):
        """The threading.Thread that had this ident at stop, else at start, or None;
        with native_id, the one of them that has it first: an ident is used again
        once its thread has ended (the thread that called start() ended, another
        one calls stop())."""
        candidates = [thread for thread in (self._threads_at_stop.get(ident),
                                            self._threads_at_start.get(ident))
                      if thread is not None]
        for thread in candidates if native_id else ():
            if getattr(thread, "native_id", None) == native_id:
                return thread
        return candidates[0] if candidates else None

    def thread_native_id(self, ident):
        """The OS thread id of the thread with this ident at stop or start, else 0."""
        return getattr(self.known_thread(ident), "native_id", None) or 0

    # -- stop ----------------------------------------------------------------
    def stop(self):
        if self._memory is not None:
            self._memory.end()          # its last sample while tracing
        with self._check_lock:
            if not USE_MONITORING:
                self._check_thread_hook()
            status = lib.pt_stop(self.ptr)
            self._stopped = True
            self.recorders_lost = [r for r in self.recorders if not r.unwatch()]
            if self.log_async:
                _tasks.unwatch_tasks()
                self.lane_names = self._task_lanes.thread_names()
            if self.watcher is not None:
                self.watcher.end()
            if USE_MONITORING and status == lib.PT_OK:
                self._check_monitoring(callbacks=False)
            if _get_threading_profile() is self._thread_hook:
                threading.setprofile(self._previous_thread_hook)
            if USE_MONITORING:
                self._release_monitoring(note_replaced=status == lib.PT_OK)
            raw_losses = self._collect_hook_losses() if status == lib.PT_OK else []
        check(status, self.ptr, "stop")
        self._threads_at_stop = _threads_alive()
        self.hook_losses = describe_hook_losses(self, raw_losses)
        self.annotation_args, self.marks = [], []
        check(lib.pt_annotation_data(self.ptr, ffi.cast("void *", id(self.annotation_args)),
                                     ffi.cast("void *", id(self.marks))), self.ptr, "annotations")

    def abandon_in_forked_child(self):
        """In a child forked while tracing: unhook quietly, keep nothing."""
        self._memory = None             # (its thread is the parent's)
        lib.pt_stop(self.ptr)
        self._stopped = True
        for recorder in self.recorders:
            recorder.unwatch()
        if self.log_async:
            _tasks.unwatch_tasks()
        if self.watcher is not None:
            self.watcher.end()
        if _get_threading_profile() is self._thread_hook:
            threading.setprofile(self._previous_thread_hook)
        if USE_MONITORING:
            try:
                self._release_monitoring()
            except ValueError:
                pass

    def result(self):
        """The trace of a stopped session: in memory, or spilled to `output`."""
        if self.output is not None:
            from .spill import finish_spill
            return finish_spill(self)
        return trace_from_session(self)

    def hot_error(self):
        """The first failure the hooks swallowed while tracing, or None."""
        if lib.pt_hot_error(self.ptr) == lib.PT_OK:
            return None
        return ffi.string(lib.pt_last_error(self.ptr)).decode("utf-8", "replace")


_disabled_locations = False       # a session with filters ran on sys.monitoring
_thread_hooks = []                # [the C hook for threading.setprofile], made once


def thread_hook():
    """threading.setprofile's hook: one C function for every session (see
    pt_thread_hook in c_src/pt_record.h). It attaches each new thread to the session
    running when that thread first runs it, without a Python frame, a lock or a
    release of the GIL; and a thread that read it while one session ran and runs
    it after that session stopped follows the next one, or nothing."""
    if not _thread_hooks:
        found = []
        if lib.pt_thread_hook(ffi.cast("void *", id(found))) != lib.PT_OK or not found:
            raise TraceError("cannot make the hook for new threads")
        _thread_hooks.append(found[0])
    return _thread_hooks[0]


def _claim_tool_id(monitoring):
    """Claims the first free id of MONITORING_TOOL_IDS, or refuses naming who
    holds each (use_tool_id, not get_tool, decides: no race with a free)."""
    for tool_id in MONITORING_TOOL_IDS:
        try:
            monitoring.use_tool_id(tool_id, MONITORING_TOOL_NAME)
        except ValueError:
            continue
        return tool_id
    held = ", ".join(f"{tool_id} by {monitoring.get_tool(tool_id)!r}"
                     for tool_id in MONITORING_TOOL_IDS)
    raise TracerConflictError(
        f"every sys.monitoring tool id pytrace_cffi can use is in use ({held}); "
        "free one of them (stop that tool) before starting pytrace_cffi")


_MONITORING_EVENTS = {}


def _monitoring_events():
    """sys.monitoring's event name -> value, of ours (read once)."""
    if not _MONITORING_EVENTS:
        _MONITORING_EVENTS.update((name, getattr(sys.monitoring.events, name))
                                  for name in MONITORING_EVENTS)
    return _MONITORING_EVENTS


def _callback_replaced(tool_id, event, found):
    """A hook loss's cause: our sys.monitoring callback for event replaced."""
    monitoring = sys.monitoring
    name = next((n for n in MONITORING_EVENTS if getattr(monitoring.events, n) == event), event)
    return (f"sys.monitoring callback for {name} of tool id {tool_id} "
            f"replaced by {_describe(found)}")


def _threads_alive():
    """ident -> threading.Thread of the threads running now (a copy of threading's
    own table: their names are read only when a trace needs them)."""
    active = getattr(threading, "_active", None)
    if isinstance(active, dict):
        return active.copy()
    return {t.ident: t for t in threading.enumerate() if t.ident is not None}


def _describe(hook):
    """A short repr of another profiler's hook (its repr may be anything)."""
    try:
        text = repr(hook)
    except Exception:
        text = f"<{type(hook).__name__} object>"
    return text if len(text) <= 200 else text[:197] + "..."


def import_entry_points():
    """The code objects every import of a module not yet loaded goes through:
    importlib's _find_and_load (`import x`, `from x import y`, import_module,
    __import__, imports inside functions), as frozen into the interpreter."""
    import importlib._bootstrap as bootstrap
    codes = []
    for module in (sys.modules.get("_frozen_importlib"), bootstrap):
        code = getattr(getattr(module, "_find_and_load", None), "__code__", None)
        if code is not None and code not in codes:
            codes.append(code)
    return codes


def make_code_filter(include, exclude):
    """skip(code) for include/exclude globs on the source path, or None."""
    if not include and not exclude:
        return None
    import fnmatch

    def skip(code):
        filename = code.co_filename
        if not filename.startswith("<") and not os.path.isabs(filename):
            filename = os.path.abspath(filename)     # a script run by a relative path
        if include and not any(fnmatch.fnmatchcase(filename, p) for p in include):
            return True
        return bool(exclude) and any(fnmatch.fnmatchcase(filename, p) for p in exclude)
    return skip


def _check_no_other_profiler():
    """Refuses to start over another profiler's hook rather than silently
    replacing it (3.12+: sys.setprofile coexists, and _claim_tool_id refuses
    only when every tool id we may use is taken)."""
    current = sys.getprofile()
    if current is not None and not USE_MONITORING:
        raise TracerConflictError(
            f"another profiler is installed on this thread ({current!r}, e.g. cProfile or "
            "sys.setprofile); stop it before starting pytrace_cffi")
    hook = _get_threading_profile()
    if hook is not None:
        raise TracerConflictError(
            f"threading.setprofile() already holds a hook for new threads ({hook!r}); "
            "pytrace_cffi needs it to follow new threads: clear it first")


def _get_threading_profile():
    getter = getattr(threading, "getprofile", None)     # 3.10+
    return getter() if getter else getattr(threading, "_profile_hook", None)
