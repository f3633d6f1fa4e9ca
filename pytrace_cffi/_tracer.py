"""Starting and stopping the C core: backend choice, sys.monitoring registration,
the hook that attaches threads born while tracing, and status codes -> exceptions."""
import os
import sys
import threading

from . import _clock
from ._core import ffi, lib
from .errors import TraceError, TracerConflictError, TracerStateError

# sys.monitoring from 3.12: a C callback costs ~2.5x where PyEval_SetProfile ~4x.
USE_MONITORING = sys.version_info >= (3, 12)
MONITORING_TOOL_NAME = "pytrace_cffi"
MONITORING_EVENTS = (
    "PY_START", "PY_RESUME", "PY_THROW", "PY_RETURN", "PY_YIELD", "PY_UNWIND",
    "CALL", "C_RETURN", "C_RAISE",
)
_STATUS_ERRORS = {
    lib.PT_ERR_NOMEM: MemoryError,
    lib.PT_ERR_STATE: TracerStateError,
    lib.PT_ERR_PYTHON: TraceError,
    lib.PT_ERR_ARG: ValueError,
}


def check(status, tracer_ptr, what):
    """Maps a C status code to an exception carrying the core's message."""
    if status == lib.PT_OK:
        return
    message = ffi.string(lib.pt_last_error(tracer_ptr)).decode("utf-8", "replace")
    raise _STATUS_ERRORS.get(status, TraceError)(f"{what}: {message}")


class Session:
    """One start..stop of the C core. Owns the C tracer until a Trace takes it."""

    def __init__(self, c_calls=True, noop=False, with_modules=True, record_params=False,
                 trim_paths=True, max_events=None, output=None, max_depth=None, include=None,
                 exclude=None, min_duration_us=None):
        flags = ((lib.PT_FLAG_C_CALLS if c_calls else 0) | (lib.PT_FLAG_NOOP if noop else 0)
                 | (lib.PT_FLAG_TSC if _clock.USE_TSC else 0))
        backend = lib.PT_BACKEND_MONITOR if USE_MONITORING else lib.PT_BACKEND_PROFILE
        ptr = lib.pt_tracer_new(flags, backend)
        if ptr == ffi.NULL:
            raise MemoryError("cannot allocate the tracer")
        self.ptr = ffi.gc(ptr, lib.pt_tracer_free)
        self.trim_paths = trim_paths
        self.output = output
        self.min_duration_ns = int(min_duration_us * 1000) if min_duration_us else 0
        self._skip_code = make_code_filter(include, exclude)
        self._max_depth = max_depth
        if max_depth or self._skip_code:
            check(lib.pt_set_filters(self.ptr, max_depth or 0,
                                     ffi.cast("void *", id(self._skip_code))
                                     if self._skip_code else ffi.NULL),
                  self.ptr, "filters")
        if max_events is not None:
            spill = ffi.NULL
            if output is not None:
                from .saved import prepare_spill_directory
                spill = os.fsencode(prepare_spill_directory(output))
            check(lib.pt_set_bounds(self.ptr, max_events, spill), self.ptr, "max_events")
        self.watcher = None
        if with_modules and not noop:
            from ._torch import TorchWatcher
            self.watcher = TorchWatcher(record_params=record_params)
            spec = self.watcher.watch_spec()
            check(lib.pt_set_watch(self.ptr, ffi.cast("void *", id(spec))), self.ptr, "watch")
        self.thread_objects = {}        # tstate id -> threading.Thread, for names
        self.thread_names = {}          # ident -> name, snapshots at start and stop
        self.thread_native_ids = {}     # ident -> OS thread id, likewise
        self._previous_thread_hook = None
        self._tool_id = None

    # -- start ---------------------------------------------------------------
    def start(self):
        _check_no_other_profiler()
        self._snapshot_thread_names()
        tool_id, mask = -1, 0
        if USE_MONITORING:
            tool_id, mask = self._claim_monitoring()
        self._previous_thread_hook = _get_threading_profile()
        threading.setprofile(self._on_new_thread)
        try:
            if self._max_depth:
                self._uncount_hidden_frames()
            check(lib.pt_start(self.ptr, tool_id, mask), self.ptr, "start")
        except BaseException:
            threading.setprofile(self._previous_thread_hook)
            if USE_MONITORING:
                self._release_monitoring()
            raise

    def _uncount_hidden_frames(self):
        """max_depth counts the calls a trace shows: the code of running frames
        that traces leave out (ours, from here down; a launcher's) never counts."""
        from .trace import _hiding
        tops = list(sys._current_frames().values())
        tops.append(sys._getframe())
        seen = set()
        for frame in tops:
            while frame is not None:
                code = frame.f_code
                if id(code) not in seen:
                    seen.add(id(code))
                    if _hiding(code):
                        check(lib.pt_set_uncounted(self.ptr, ffi.cast("void *", id(code))),
                              self.ptr, "uncounted code")
                frame = frame.f_back

    def _claim_monitoring(self):
        monitoring = sys.monitoring
        tool_id = monitoring.PROFILER_ID
        try:
            monitoring.use_tool_id(tool_id, MONITORING_TOOL_NAME)
        except ValueError:
            holder = monitoring.get_tool(tool_id)
            raise TracerConflictError(
                f"sys.monitoring tool id {tool_id} (PROFILER_ID) is in use by {holder!r}; "
                "stop that profiler (cProfile uses this id too) before starting pytrace_cffi"
            ) from None
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
        for event_name, callback in callbacks:
            event = getattr(monitoring.events, event_name)
            monitoring.register_callback(tool_id, event, callback)
            mask |= event
        return tool_id, mask

    def _release_monitoring(self):
        monitoring = sys.monitoring
        tool_id, self._tool_id = self._tool_id, None
        if tool_id is None:
            return
        monitoring.set_events(tool_id, 0)
        for event_name in MONITORING_EVENTS:
            monitoring.register_callback(tool_id, getattr(monitoring.events, event_name), None)
        monitoring.free_tool_id(tool_id)

    def _on_new_thread(self, frame, event, arg):
        """threading's profile hook: runs once, first thing in each new thread."""
        if USE_MONITORING:
            sys.setprofile(None)    # sys.monitoring already sees every thread
        self.thread_objects[lib.pt_current_tstate_id()] = threading.current_thread()
        # Skip this hook's own frame; seed run() and threading's bootstrap frames.
        lib.pt_attach_current_thread(self.ptr, 1)

    def _snapshot_thread_names(self):
        for thread in threading.enumerate():
            if thread.ident is not None:
                self.thread_names[thread.ident] = thread.name
                self.thread_native_ids[thread.ident] = getattr(thread, "native_id", None) or 0

    # -- stop ----------------------------------------------------------------
    def stop(self):
        status = lib.pt_stop(self.ptr)
        threading.setprofile(self._previous_thread_hook)
        if USE_MONITORING:
            self._release_monitoring()
        check(status, self.ptr, "stop")
        self._snapshot_thread_names()
        self.annotation_args, self.marks = [], []
        check(lib.pt_annotation_data(self.ptr, ffi.cast("void *", id(self.annotation_args)),
                                     ffi.cast("void *", id(self.marks))), self.ptr, "annotations")

    def abandon_in_forked_child(self):
        """In a child forked while tracing: unhook quietly, keep nothing."""
        lib.pt_stop(self.ptr)
        threading.setprofile(self._previous_thread_hook)
        if USE_MONITORING:
            try:
                self._release_monitoring()
            except ValueError:
                pass

    def result(self):
        """The trace of a stopped session: in memory, or spilled to `output`."""
        if self.output is not None:
            from .saved import finish_spill
            return finish_spill(self)
        from .trace import Trace
        return Trace._from_session(self)

    def hot_error(self):
        """The first failure the hooks swallowed while tracing, or None."""
        if lib.pt_hot_error(self.ptr) == lib.PT_OK:
            return None
        return ffi.string(lib.pt_last_error(self.ptr)).decode("utf-8", "replace")


_disabled_locations = False       # a session with filters ran on sys.monitoring


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
    replacing it (3.12+ checks sys.monitoring's tool id when claiming it)."""
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
