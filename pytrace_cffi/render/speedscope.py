"""speedscope's file format (.speedscope.json): https://www.speedscope.app and
https://www.speedscope.app/file-format-schema.json.

One "evented" profile per thread (in a job, per thread of each process), named
by its labels ("MainThread"; "rank 0 (pid 12) / MainThread"), unit nanoseconds,
times from the trace's start: each call an open ("O") event at its start and a
close ("C") at its end, properly nested; calls still running at stop end at stop,
frames running when the trace began open at its start. The frames, shared by
every profile, are the functions' names as the other outputs show them (see
stacks.Frames), with "file" and "line" (the first line) for Python functions.

The events are formatted in C (pt_evented_format, c_src/pt_export.c) from the
streamed calls (walk.thread_batches), a buffer at a time.
"""
from .._core import ffi, lib
from .._files import replaced_atomically
from .._jsontext import dumps_utf8
from .._progress import Progress
from ..errors import TraceFormatError
from .stacks import Frames, thread_labels
from ..model.walk import thread_batches

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
CHUNK_BYTES = 1 << 20


def _frame(frames, frame):
    entry = {"name": frames.names[frame]}
    file, line = frames.location(frame)
    if file is not None:
        entry.update(file=file, line=line)
    return entry


def _events(evented, batches, frames, out, progress):
    """A thread's events, comma-separated, in pieces of up to CHUNK_BYTES."""
    next_index, written = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    for slices, n, first_index in batches:
        next_index[0] = 0
        while next_index[0] < n:
            before = next_index[0]
            status = lib.pt_evented_format(evented, slices, n, first_index, next_index,
                                           frames.frame_of_key, frames.n_keys, out,
                                           CHUNK_BYTES, written)
            if status == lib.PT_ERR_NOMEM:
                raise MemoryError("out of memory writing the speedscope profile")
            if status != lib.PT_OK:
                raise TraceFormatError("a call's key is out of range or its parent is not "
                                       "an enclosing call")
            progress.advance(next_index[0] - before)
            yield ffi.buffer(out, written[0])[:]
    while True:
        left = lib.pt_evented_close(evented, out, CHUNK_BYTES, written)
        yield ffi.buffer(out, written[0])[:]
        if not left:
            return


def _chunks(trace, progress):
    frames = Frames(trace)
    labels = thread_labels(trace)       # the functions' frames first: labels are no frames
    head = {"$schema": SCHEMA, "exporter": "pytrace_cffi",
            "name": trace.label or "pytrace_cffi trace", "activeProfileIndex": 0,
            "shared": {"frames": [_frame(frames, f) for f in range(frames.n_functions)]}}
    yield (dumps_utf8(head)[:-1] + ',"profiles":[').encode("utf-8")
    out = ffi.new("char[]", CHUNK_BYTES)
    end_at = trace.stop_ns - trace.start_ns
    first_at, last_at = ffi.new("int64_t *"), ffi.new("int64_t *")
    for number, ((thread, batches), names) in enumerate(zip(thread_batches(trace), labels)):
        evented = ffi.gc(lib.pt_evented_new(trace.start_ns), lib.pt_evented_free)
        if evented == ffi.NULL:
            raise MemoryError("out of memory writing the speedscope profile")
        name = " / ".join(names)
        yield (("," if number else "") + '{"type":"evented","name":' + dumps_utf8(name)
               + ',"unit":"nanoseconds","events":[').encode("utf-8")
        yield from _events(evented, batches, frames, out, progress)
        lib.pt_evented_span(evented, first_at, last_at)
        # the trace's span, or wider when a call lies outside it (a frame running
        # before a job's process joined the timeline)
        yield (f'],"startValue":{min(0, first_at[0])},'
               f'"endValue":{max(end_at, last_at[0])}}}').encode("utf-8")
    yield b"]}\n"


def write_speedscope(trace, path):
    """Writes trace to path as a speedscope profile (see the module's doc)."""
    with replaced_atomically(path, lambda tmp: open(tmp, "wb")) as out, \
            Progress(f"writing {path}", len(trace)) as progress:
        for chunk in _chunks(trace, progress):
            out.write(chunk)
