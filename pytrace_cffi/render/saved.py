"""Writing a saved-trace directory (save(); its format: model/saved_format.py and
docs/FORMAT.md; pytrace_cffi.load reads it back, readers/saved.py)."""
import os
import sys

from .._core import ffi
from .._files import replaced_atomically
from ..errors import TraceFormatError
from ..model.saved_format import (FORMAT_VERSION, SLICE_RECORD_SIZE, SLICES_HEADER, SLICES_MAGIC,
                                  meta as _meta, thread_meta, write_json, write_names)


def save(trace, directory):
    if sys.byteorder != "little":
        raise TraceFormatError("saving needs a little-endian host")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    meta = _meta(trace.pid, trace.python_version, trace.backend, trace.clock, trace.start_ns,
                 trace.stop_ns, trace.dropped_events, trace.names, trace.key_kinds,
                 trace.key_args, trace.marks, realtime_anchor=trace.realtime_anchor)
    # the counts without the slice table: a streaming trace writes its slices as
    # its walk makes them (walk.thread_batches), the same records
    from ..model.walk import thread_batches
    counts = [(thread, n) for thread, n, _, _ in trace.thread_counts()]
    several = bool(trace.processes)
    meta["threads"] = [thread_meta(t, n, trace.thread_pid(t) if several else None)
                       for t, n in counts]
    if several:
        meta["processes"] = [dict(facts, pid=pid) for pid, facts in trace.processes.items()]
    if trace.label is not None:
        meta["label"] = trace.label
    write_names(directory, trace.names, trace.params)
    total = sum(n for _, n in counts)
    with replaced_atomically(os.path.join(directory, "slices.bin"),
                             lambda tmp: open(tmp, "wb")) as out:
        out.write(SLICES_HEADER.pack(SLICES_MAGIC, FORMAT_VERSION, SLICE_RECORD_SIZE, total))
        written = 0
        for _, batches in thread_batches(trace):
            for slices, n, _ in batches:
                out.write(ffi.buffer(slices, n * SLICE_RECORD_SIZE))
                written += n
        if written != total:
            raise TraceFormatError(f"slices.bin: {written} calls written, {total} counted")
    # A spilled trace saved over its own directory read its events.bin until now.
    if os.path.exists(os.path.join(directory, "events.bin")):
        os.unlink(os.path.join(directory, "events.bin"))
    # meta.json last: a directory without it is an incomplete save.
    write_json(os.path.join(directory, "meta.json"), meta)
