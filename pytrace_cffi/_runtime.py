"""What the interpreter does besides calls, recorded on request (c_src/pt_runtime.c):
garbage collections, as regions on the thread that ran each (log_gc); launches, as
instants (log_launches); TaskLane, which _tasks.py gives each asyncio task
(log_async).

RECORDERS declares each on/off recorder of this kind once: the session
(_tracer.py) watches the ones whose option is on from start() to stop() and warns
of the ones the program took away; start()'s docstring says what each records.
docs/INTERNALS.md, "Adding an instant kind", says how to add one."""
import gc
import sys
from collections import namedtuple

from ._core import ffi, lib

_api = {}
if lib.pt_runtime_api(ffi.cast("void *", id(_api))) != lib.PT_OK:
    raise ImportError("pytrace_cffi: the C runtime recorders could not be created")

# A C function: the collector calls it from C, so no hook sees it and no frame of
# ours is recorded (docs/OUTPUTS.md: how collections show).
GC_CALLBACK = _api["gc_callback"]


def watch_gc():
    """Records each garbage collection from now on (while a tracer runs)."""
    if not any(callback is GC_CALLBACK for callback in gc.callbacks):
        gc.callbacks.append(GC_CALLBACK)


def unwatch_gc():
    """Leaves gc.callbacks as it was before watch_gc (other callbacks stay).
    Returns whether ours was still there (the program may have removed it)."""
    kept = [callback for callback in gc.callbacks if callback is not GC_CALLBACK]
    was_there = len(kept) < len(gc.callbacks)
    gc.callbacks[:] = kept
    return was_there


def watch_launches():
    """Records each launch (subprocess.Popen, os.system) from now on (while a
    tracer runs). The probe tells our hook is in place (pt_runtime.c)."""
    _api["watch_launches"](True)
    try:
        sys.audit("pytrace_cffi.audit_probe")
    except Exception:       # noqa: BLE001 - a program's hook refusing it: not seen
        pass


def unwatch_launches():
    """Launches are no longer recorded. Returns whether they were (False: the
    program's own audit hook refused ours)."""
    return _api["watch_launches"](False)


Recorder = namedtuple("Recorder", "option watch unwatch lost doc")
Recorder.__doc__ = """One recorder of RECORDERS, on while its bool start() option is.

option   the start() option (options.py declares it) that turns it on
watch    called by start() before the hooks go in
unwatch  called by stop() (and when start() fails); returns whether the recorder
         was still in place until then
lost     what stop()'s TraceWarning says when it was not ("{option}: " + lost)
doc      its paragraph in start()'s docstring (indented as the others)"""

RECORDERS = (
    Recorder("log_gc", watch_gc, unwatch_gc,
             "the program removed pytrace_cffi's callback from gc.callbacks while "
             "tracing: the collections after that are not in the trace",
             """\
      log_gc (bool, default False): record each garbage collection as a region
        "gc (generation N)" on the thread that ran it (the finalizers it ran
        inside it), with args generation, collected and uncollectable; through
        gc.callbacks, from start() to stop(). About 1.5 us a collection.
"""),
    Recorder("log_launches", watch_launches, unwatch_launches,
             "another audit hook refused pytrace_cffi's: launches are not in the trace",
             """\
      log_launches (bool, default False): record each command the program
        launches (subprocess.Popen, os.system) as an instant "launch" on the
        thread that launched it, with args via (the audit event) and command (its
        command line, at most 1000 characters). A C audit hook, added at the
        first start() that asks (audit hooks stay): off, nothing is added.
"""),
)


TaskLane = _api["TaskLane"]
# _memory.py's, for a thread of ours: a counter on the lane of the thread that
# started tracing, and the RSS, both with the GIL held
counter_sample = _api["counter_sample"]
resident_bytes = _api["resident_bytes"]
