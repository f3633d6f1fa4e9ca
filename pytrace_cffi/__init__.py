"""pytrace_cffi: a Python function tracer with a small C core built by cffi.

    import pytrace_cffi
    pytrace_cffi.start()
    work()
    trace = pytrace_cffi.stop()
    trace.export_chrome_trace("trace.json")

or ``with pytrace_cffi.trace() as t: work()``. Every Python and built-in call on
every thread is recorded; see README.md for the options and the output format.
"""
# Imported under private names: dir(pytrace_cffi) lists the public API only.
import atexit as _atexit
import os as _os
import sys as _sys
import textwrap as _textwrap
import threading as _threading


def _core_missing():
    """The one line that says what to do when the C core is not beside this file:
    a source tree (build_ffi.py beside it) run from its own directory shadows an
    installed pytrace_cffi, and its core is built only by `python build_ffi.py`
    or an editable install."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.path.exists(_os.path.join(_os.path.dirname(here), "build_ffi.py")):
        return (f"pytrace_cffi's C core is not built in the source tree {here}, which is "
                "imported instead of an installed pytrace_cffi: run from another directory, "
                "or build it here with `python build_ffi.py` (or `pip install -e .`)")
    return (f"pytrace_cffi's C core (_core) is missing from {here}: reinstall pytrace_cffi "
            "(pip install --force-reinstall pytrace_cffi)")


def _free_threaded_build():
    """Whether this interpreter is a free-threaded build (3.13t, 3.14t: sys.abiflags
    holds "t"; on Windows before 3.14, which has no sys.abiflags, sysconfig's
    Py_GIL_DISABLED). Even with the GIL switched back on (PYTHON_GIL=1), such a
    build loads no abi3 module."""
    flags = getattr(_sys, "abiflags", None)
    if flags is not None:
        return "t" in flags
    if _sys.version_info < (3, 13):
        return False
    import sysconfig
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


_FREE_THREADED_ERROR = (
    "pytrace_cffi does not run on a free-threaded Python build ({version}, "
    "sys.abiflags {flags!r}): its C core is one abi3 (limited API) module, which "
    "free-threaded builds cannot load, and cffi supports free-threading only in a "
    "non-limited-API build, which pytrace_cffi does not ship yet. Use the default "
    "(GIL) build of this Python version (docs/INTERNALS.md#free-threaded-python)")

if _free_threaded_build():
    raise ImportError(_FREE_THREADED_ERROR.format(
        version=_sys.version.split()[0], flags=getattr(_sys, "abiflags", "")),
        name=__name__)

# cffi's module puts itself in sys.modules under the name it was built with,
# "pytrace_cffi._core" (and its lib), whatever package holds it: a copy vendored
# under another name (tool._vendor.pytrace_cffi) must leave those entries as they
# were, or the other copy's next import gets this one's core (ffi types that do
# not match, or the other build).
_BUILT_NAMES = ("pytrace_cffi._core", "pytrace_cffi._core.lib")
_before_core = {_name: _sys.modules.get(_name) for _name in _BUILT_NAMES}
try:
    import importlib as _importlib
    _importlib.import_module(f"{__name__}._core")       # only: is the core there?
except ModuleNotFoundError as _exc:
    if _exc.name != f"{__name__}._core":
        raise
    raise ImportError(_core_missing(), name=__name__) from None  # runpy: one line
finally:
    if __name__ != "pytrace_cffi":
        for _name, _module in _before_core.items():
            if _module is None:
                _sys.modules.pop(_name, None)
            else:
                _sys.modules[_name] = _module

from ._core import lib as _lib
from ._runtime import RECORDERS as _RECORDERS
from ._tracer import Session as _Session
from .annotations import (STEP_MARK as _STEP_MARK, RecordFunction, capture_stack, counter,
                          instant, record_function, symbolize)
from . import _running, options as _start_options
from .errors import (TraceError, TraceFormatError, TracerConflictError, TracerStateError,
                     TraceWarning)
from .schedule import Action, schedule
from .model.trace import Call, Trace

__all__ = ["start", "stop", "trace", "step", "dump", "load", "load_ipython_extension", "is_tracing", "release_memory", "Trace",
           "Call",
           "record_function", "RecordFunction", "instant", "counter", "capture_stack",
           "symbolize", "merge_torch",
           "TraceFormatError", "TraceWarning", "SpilledTrace", "WrittenTrace", "schedule", "Action",
           "TraceError", "TracerConflictError", "TracerStateError"]
__version__ = "0.1.0"


# Public names whose modules are imported when first asked for (PEP 562): they
# import the readers and writers, which a program that only traces never needs.
_LAZY = ("merge_torch", "SpilledTrace", "WrittenTrace")


def __getattr__(name):
    if name == "merge_torch":
        from .merge import merge_torch as value
    elif name == "SpilledTrace":
        from .spill import SpilledTrace as value
    elif name == "WrittenTrace":
        from .follow.written import WrittenTrace as value
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


_flight_step = _lib.pt_flight_step     # the flight recorder's watchdog counts steps
_step_hook = None        # the running schedule's step (run --schedule, trace(schedule=))


def _after_fork_in_child():
    """A child forked while tracing stops tracing cleanly; the parent's trace is
    the parent's. Locks another thread held at fork time are made anew."""
    _running.lock = _threading.Lock()
    session, _running.session = _running.session, None
    if session is not None:
        session.abandon_in_forked_child()
        if session.follows_children:     # trace the child too (not a job's without)
            from .follow.session import continue_in_forked_child, release_sigterm
            try:
                continue_in_forked_child(session, _flight_recorder)
            except Exception as exc:    # noqa: BLE001 - never break the child
                print(f"pytrace_cffi: not tracing forked pid {_os.getpid()}: {exc}",
                      file=_sys.stderr)
            finally:
                release_sigterm()       # held since before the fork (follow/session.py)


if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork_in_child)
_atexit.register(_running.stop_at_exit)


_OPTION_NAMES = _start_options.NAMES
_DEFAULT_OPTIONS = _start_options.check({})     # start() with none given: checked once


def _options_for(function, given, extra=()):
    """options.check(given), with an unknown name reported as a TypeError from
    the public `function` the user called, with the closest valid name."""
    valid = _OPTION_NAMES + tuple(extra)
    for name in given:
        if name not in valid:
            import difflib
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{function}() got an unexpected keyword argument {name!r}{hint}")
    return _start_options.check(given)


def _flight_recorder():
    """The flight recorder's class, for a session with a ring: imported only then
    (it sits on top of the session; see follow/session.py's FollowSession)."""
    from .flight.recorder import FlightRecorder
    return FlightRecorder


def start(**options):
    """Starts tracing every thread of the process.

    Options:
      c_calls (bool, default True): also record calls of built-in functions.
      max_events (int, default None): hold at most this many events in memory.
        Past it, the oldest are spilled to `output` when given (stop() then
        returns a SpilledTrace; load(output) gives every event back), else dropped:
        the trace keeps the newest and says how many were dropped.
      output (path): the saved-trace directory that max_events spills to; created
        now, before tracing starts. Or a file whose name picks a format
        (out.pftrace, out.json, out.html, ...): stop() writes it and returns a
        WrittenTrace; the events spill to a job directory meanwhile (max_events
        defaults to 2**20) and a .pftrace is encoded on another thread as the
        program runs, so little is left to do at stop(). With follow_children the
        file holds every process followed.
      processes_dir (path, or True): with output, the trace written at stop() is
        made from a job's per-process traces (as with children followed) that
        stay in this directory, new or empty (True: a temporary one, removed
        once written, as for any output file); output may then name a
        directory too, written as one saved trace rather than used as the job's
        directory. `run --processes-dir DIR` is this option.
      include, exclude (glob or list of globs): record only Python functions whose
        source file matches an include pattern and no exclude pattern (fnmatch on
        the full path, e.g. "*/mypkg/*"), and only the built-ins they call. On
        3.12+ left-out code is switched off and costs almost nothing.
      max_depth (int): record a call only while fewer than max_depth recorded calls
        are open on its thread.
      skip_imports (bool, default False): leave out the calls made while a module
        is being imported (the import machinery's calls and the module's code run
        at import time), with their callees; the rest of the program is recorded.
      min_duration_us (number): leave out calls shorter than this, with their
        callees (decided at stop).
      with_modules (bool, default True): name torch nn.Module calls
        "nn.Module: <Class>_<N>" and optimizer steps "Optimizer.step#<Class>.step",
        as torch.profiler does (free until the program imports torch). These calls
        and torch's record_function regions are kept under include/exclude
        filters that leave out torch's code; what torch runs inside them is not.
      record_params (bool, default False): keep the metadata (never the values) of
        each module's parameters at its first call and of each optimizer step's
        parameters, grads and state; see Trace.params.
      trim_paths (bool, default True): strip site-packages, sys.path and torch
        directories from file names, as torch.profiler does.
      noop (bool, default False): install the hooks but record nothing; the
        benchmark's floor.
      follow_children (bool, default False): trace every Python process this
        one starts (fork, multiprocessing, subprocess, exec) too, each into
        output/proc-<pid>/ with these options; output is then required and
        max_events defaults to 2**20. Join them with
        pytrace_cffi.processes.join(output, "all.json"). See README.
      flight_recorder (True, bytes, "64M" or "30s"): keep only the newest events
        (a ring of that size, 64 MiB for True; or those of the last seconds,
        within 64 MiB) for as long as the program runs, and dump them without
        stopping: see dump() and docs/FLIGHT_RECORDER.md. stop() returns the
        ring's trace (or writes output).
      dumps_dir (path): where the flight recorder's dumps go, one directory per
        dump, one proc-<pid> per process; by default beside output, named as it
        is without its suffix + "-dumps" (out.pftrace: out-dumps/), and without
        output ./pytrace_cffi-dumps.
      dump_format ("pftrace", "json", "json.gz", "html", "dir", ... see
        formats.DUMP_FORMATS): with the flight recorder, each dump Python writes
        is also written as one trace, DUMPDIR/trace.<suffix> (trace/ for "dir"),
        once its raw files are whole (a dump only C could write stays raw).
        "stacks": no trace file, and each dump keeps the stacks and only the
        ring's last dump_window seconds.
      dump_window (seconds, default 30): with dump_format "stacks", how much of
        the ring's newest events each dump keeps.
      dump_signal (name or number, default SIGUSR1; 0: none): the signal that
        dumps the flight recorder (`python -m pytrace_cffi dump PID|DIR` sends it).
      watchdog (seconds, or "SECONDS:REGION"): with the flight recorder, dump
        once per stall when no step (step(), a torch optimizer step; with REGION
        also each end of that record_function region, ours or torch's) came for
        this long, once a first one came; written by C when a thread holding the
        GIL in C keeps Python from running.
      log_exceptions (bool, default False): record each exception raised as an
        instant "exception <Type>" on its thread, args message (200 characters at
        most), where (file(line): function) and caught_in (the handler that kept
        it; absent when none did). On 3.9-3.11 the profile hook sees no exception
        object: an instant "exception" where it first left a frame, with
        frames_left and reached (or raised_by, a built-in). Off, it costs nothing.
      log_args (glob or list of globs): the calls of functions whose qualified
        name (3.9-3.10: bare name) or source path matches a glob carry their
        arguments and their return value ("return", or "raise") as args: safe
        summaries (type name, len of exact built-in containers, shape and dtype
        of tensors and arrays, small ints, floats, bools and short strings as
        they are), never the objects' own code. Decided once per function; other
        calls pay nothing. See docs/OUTPUTS.md.
      log_args_repr (bool, default False): with log_args, add each value's
        repr() (cut to 200 characters; a failure is noted instead).
      memory_interval_ms (number, default None): sample memory counters every
        this many milliseconds, from a thread of pytrace_cffi's that the trace
        leaves out: "RSS (bytes)" (Linux), "CUDA allocated (bytes)" (when the
        program imported torch and CUDA is initialized) and "tracemalloc
        (bytes)" (when the program has tracemalloc tracing).
      log_async (bool, default False): record each asyncio task's steps (its
        coroutine resumed until it awaits, with all it calls) on a lane of its
        own named "task <name>", shown as a thread; the event loop's thread
        keeps the loop. For loops that run callbacks through asyncio.Handle
        (asyncio's own), up to 1024 tasks a trace.
    Raises TracerStateError if already tracing, TracerConflictError if another
    profiler holds the hook pytrace_cffi needs, TypeError for bad options.
    """
    options = _options_for("start", options) if options else _DEFAULT_OPTIONS
    plan = _start_options.StartPlan(options)
    with _running.lock:
        if _running.session is not None:
            raise TracerStateError("pytrace_cffi is already tracing; call stop() first")
        if plan.traces_a_job:       # a job's directory: children, output=FILE, a ring
            from .follow.session import FollowSession
            session = _running.session = FollowSession(plan, recorder=_flight_recorder)
        else:
            session = _running.session = _Session(**plan.options)
    try:
        # Last statement on purpose: whatever runs in this frame after the hooks
        # go live would be recorded as the caller's work.
        session.start()
    except BaseException:
        _running.session = None
        session.forget_output_file()
        raise


def _with_recorder_docs(doc):
    """start()'s docstring with the paragraph of each runtime recorder
    (_runtime.RECORDERS) among its options, indented as the docstring is (3.13+
    strips docstrings' indentation when compiling; -OO leaves none)."""
    if not doc:
        return doc
    at = doc.index("Raises TracerStateError")
    line_start = doc.rindex("\n", 0, at) + 1
    indent = doc[line_start:at] + "  "
    return doc[:line_start] + "".join(_textwrap.indent(_textwrap.dedent(recorder.doc), indent)
                                      for recorder in _RECORDERS) + doc[line_start:]


start.__doc__ = _with_recorder_docs(start.__doc__)


stop = _running.stop     # (its home: below follow/, whose exit paths stop a session too)


def load(path):
    """Loads a trace: a directory saved with Trace.save(path) (or spilled into by
    output=), a Chrome .json/.json.gz or a .pftrace written by pytrace_cffi, a
    job's trace directory (follow_children; its processes joined on one
    timeline), or a flight recorder's dump: its directory (every process that
    dumped into it, joined) or one process's proc-<pid> in it; the calls open at
    the dump are marked open. Reads JSON and raw numbers only, never runs code;
    raises TraceFormatError for anything that is not a valid trace."""
    from .reading import read_trace
    return read_trace(path)


def release_memory():
    """Frees the event buffers that dropped traces keep for the next trace
    (at most 16 MiB; reusing them spares the kernel zeroing fresh pages)."""
    from ._core import lib
    lib.pt_release_pool()


def is_tracing():
    """True between start() and stop() while the hook records: False once
    another profiler took it (sys.setprofile, torch.profiler, cProfile...)
    from the calling thread on 3.9-3.11, or took pytrace_cffi's sys.monitoring
    tool, events or callbacks on 3.12+ (where sys.setprofile and cProfile
    coexist). stop() must still be called then: it returns what was recorded
    and warns."""
    session = _running.session
    return session is not None and session.check_hooks(current_only=True)


def step():
    """Marks the end of one step of the program's loop, for the schedule that
    runs it: `python -m pytrace_cffi run --schedule wait,warmup,active[,repeat]`,
    or an open ``trace(schedule=...)`` block (the same as its t.step()). While
    tracing it also leaves an instant named "pytrace_cffi.step" on the calling
    thread (this function is our own code, which traces leave out): `summary
    --steps` and the HTML page find the program's steps by it. The flight
    recorder's watchdog counts it as progress. Untraced and without a schedule
    it does nothing, so a program may call it either way."""
    _flight_step()
    instant(_STEP_MARK)         # before the hook: in the window this step closes
    hook = _step_hook
    if hook is not None:
        hook()


def dump(path=None, reason="dump()"):
    """Writes the flight recorder's dump of this process while the program goes on
    (start(flight_recorder=...)): its newest events and each thread's stack now,
    into path (a new directory), by default DUMPS_DIR/<time>-<reason>/proc-<pid>/.
    Returns the directory (a clone of the process finishes writing it: done.json
    is its last file), or None when it could not be written (stderr says why).
    With start(dump_format=...), a thread of the recorder then writes it as one
    trace too: DUMPDIR/trace.<suffix>, or path/trace.<suffix> for a path given.
    load() reads the directory, or the one holding it (its processes joined).
    Raises TracerStateError when no flight recorder is running."""
    session = _running.session
    recorder = None if session is None else session.flight
    if recorder is None:
        raise TracerStateError("dump() needs a running flight recorder: "
                               "start(flight_recorder=...)")
    return recorder.dump(str(reason), None if path is None else _os.fspath(path))


def load_ipython_extension(ipython):
    """``%load_ext pytrace_cffi`` in IPython or Jupyter: the ``%%pytrace`` cell magic,
    which traces a cell and shows its HTML page below it (see pytrace_cffi/jupyter.py;
    IPython is imported then, never by ``import pytrace_cffi``)."""
    from .jupyter import load_ipython_extension as load
    load(ipython, start, stop)


def _set_step_hook(hook):
    """run --schedule's step, for step() (None: none)."""
    global _step_hook
    _step_hook = hook


def _has_session():
    """Whether start() ran without its stop(), recording or not (for the CLI)."""
    return _running.has_session()


class trace:
    """Context manager: ``with pytrace_cffi.trace(**options) as t:`` traces the
    block; after it, ``t.trace`` is the Trace (``t`` also forwards its methods).
    Inside the block ``t.trace`` is None, and len(t), iterating t or a forwarded
    attribute raise TracerStateError (an AttributeError too, for attributes).

    With ``schedule=pytrace_cffi.schedule(wait=, warmup=, active=, repeat=)``,
    call ``t.step()`` at the end of each loop step: only the scheduled steps are
    traced, and each finished window goes to ``on_trace_ready(trace)`` (``t.trace``
    is the latest)."""

    def __init__(self, schedule=None, on_trace_ready=None, **options):
        self._options = _options_for("trace", options, extra=("schedule", "on_trace_ready"))
        self.trace = None
        self._scheduled = None
        if schedule is not None:
            from .schedule import ScheduledTracing
            self._scheduled = ScheduledTracing(schedule, on_trace_ready, start, stop,
                                               self._options)
        elif on_trace_ready is not None:
            raise TypeError("on_trace_ready goes with schedule=")

    def __enter__(self):
        global _step_hook
        if self._scheduled is not None:
            self._outer_step_hook, _step_hook = _step_hook, self.step
            self._scheduled.begin()
        else:
            start(**self._options)
        return self

    def step(self):
        """Marks the end of one step of a scheduled loop."""
        if self._scheduled is None:
            raise TraceError("step() needs trace(schedule=...)")
        self._scheduled.step()
        self.__dict__["trace"] = self._scheduled.last_trace

    def __exit__(self, *exc_info):
        global _step_hook
        if self._scheduled is not None:
            _step_hook = self.__dict__.pop("_outer_step_hook", None)
            self._scheduled.end()
            self.__dict__["trace"] = self._scheduled.last_trace
        else:
            self.trace = stop()
        return False

    def _not_ready(self):
        if self.__dict__.get("_scheduled") is not None:
            return "no scheduled window has been recorded yet"
        return "the trace is ready once the with block ends"

    def __getattr__(self, name):
        if name == "trace":
            raise AttributeError(name)
        result = self.__dict__.get("trace")
        if result is None:
            raise _TraceNotReadyError(f"{name!r}: {self._not_ready()}")
        return getattr(result, name)

    def __iter__(self):
        if self.trace is None:
            raise _TraceNotReadyError(f"iterating: {self._not_ready()}")
        return iter(self.trace)

    def __len__(self):
        if self.trace is None:
            raise _TraceNotReadyError(f"len(): {self._not_ready()}")
        return len(self.trace)


class _TraceNotReadyError(TracerStateError, AttributeError):
    """The trace read from a trace() context manager before it exists. An
    AttributeError too, so that getattr(t, name, default) and hasattr keep working."""
