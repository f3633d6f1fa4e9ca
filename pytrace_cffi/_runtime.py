"""What the interpreter does besides calls, recorded on request (c_src/pt_runtime.c):
garbage collections, as regions on the thread that ran each (log_gc); TaskLane,
which _tasks.py gives each asyncio task (log_async)."""
import gc

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
TaskLane = _api["TaskLane"]
# _memory.py's, for a thread of ours: a counter on the lane of the thread that
# started tracing, and the RSS, both with the GIL held
counter_sample = _api["counter_sample"]
resident_bytes = _api["resident_bytes"]
