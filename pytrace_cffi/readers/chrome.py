"""Reading back the Chrome JSON (.json, .json.gz) pytrace_cffi wrote:
read_chrome_trace. Our layout (one event per line) streams (chrome_lines.py:
memory that does not grow with the calls); a file in another layout (reformatted,
say) is parsed whole, which needs many times its size in memory (a TraceWarning
says so when the file is big)."""
import gzip
import json
import os
import struct
import warnings
import zlib

from .._core import ffi, lib
from .._progress import Progress
from ..errors import TraceFormatError, TraceWarning
from ..model.saved_format import SLICE_RECORD
from .chrome_events import (Keys, check_other, chrome_trace, expect, other_int, read_call,
                            read_lane, read_mark, read_thread_name, validated)
from .chrome_lines import OtherLayout, read_chrome_lines

WHOLE_READ_NOTE_BYTES = 64 << 20             # warn before parsing a file this big whole
WHOLE_READ_LIMIT = 1 << 30      # parsed whole: at most this much text (decompressed)


def read_chrome_trace(path, compressed=False):
    """The Trace in a Chrome JSON file pytrace_cffi wrote; compressed: whether it
    is gzip (formats.read says, from its name). TraceFormatError for anything
    else."""
    try:
        try:
            return read_chrome_lines(path, compressed)
        except OtherLayout as exc:
            reason = exc.args[0]
        if os.path.getsize(path) > WHOLE_READ_NOTE_BYTES:
            warnings.warn(f"{path}: not in pytrace_cffi's one-event-per-line layout "
                          f"({reason}); reading it whole, which takes many times its size "
                          f"in memory", TraceWarning, stacklevel=3)
        return _read_chrome_whole(path, compressed)
    except (struct.error, OverflowError):
        raise TraceFormatError(f"{path}: a time is out of range") from None


def _read_chrome_whole(path, compressed):
    """Any layout: json.loads of the whole text, then the events."""
    from ..model.trace import ThreadInfo
    data = _load_json(path, compressed)
    expect(isinstance(data, dict) and isinstance(data.get("traceEvents"), list),
           f"{path}: not a Chrome trace (no traceEvents list)")
    other = data.get("otherData")
    check_other(path, other)
    start_ns = other_int(path, other, "start_monotonic_ns")
    thread_meta, calls, marks, pid, lanes = _split_events(path, data["traceEvents"])
    keys = Keys()
    threads, slices = [], []
    first_id = 0
    with Progress(f"reading {path}", sum(len(c) for c in calls)) as progress:
        for index, ((tid, thread_name, thread_pid), thread_calls) in \
                enumerate(zip(thread_meta, calls)):
            packed = _thread_slices(path, thread_calls, first_id, start_ns, keys)
            threads.append(ThreadInfo(index, tid, 0, thread_name, 0, 0, thread_pid))
            slices.append(validated(path, index, first_id, packed, len(thread_calls), keys))
            first_id += len(thread_calls)
            progress.advance(len(thread_calls))
    return chrome_trace(path, other, keys, threads, slices, marks, pid, lanes)


def _thread_slices(path, thread_calls, first_id, start_ns, keys):
    """One thread's calls as a cffi pt_slice array, packed in Python and copied once."""
    thread_calls.sort(key=lambda call: call[0])
    packed = bytearray(len(thread_calls) * SLICE_RECORD.size)
    depths = []
    for i, (call_id, parent_id, name, category, ts_ns, dur_ns, extra, opened) in \
            enumerate(thread_calls):
        if call_id != first_id + i:
            raise TraceFormatError(f"{path}: Python ids are not consecutive at {call_id}")
        if parent_id is None:
            parent, depth = -1, 0
        else:
            parent = parent_id - first_id
            if not 0 <= parent < i:
                raise TraceFormatError(f"{path}: call {call_id}: parent {parent_id} is not an "
                                       f"earlier call on its thread")
            depth = depths[parent] + 1
        depths.append(depth)
        key = keys.key(name, category, extra)
        flags = (lib.PT_SLICE_C if keys.kinds[key] == "c" else 0) | opened
        start = start_ns + ts_ns
        SLICE_RECORD.pack_into(packed, i * SLICE_RECORD.size, start, start + dur_ns, key,
                               flags, parent, 0, depth)
    array = ffi.new("pt_slice[]", max(1, len(thread_calls)))
    ffi.memmove(array, packed, len(packed))
    return array


def _load_json(path, compressed):
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as f:
            text = f.read(WHOLE_READ_LIMIT + 1)
        if len(text) > WHOLE_READ_LIMIT:
            raise TraceFormatError(f"{path}: not in pytrace_cffi's one-event-per-line layout "
                                   f"and over {WHOLE_READ_LIMIT >> 20} MiB of JSON: too big "
                                   "to parse whole")
        return json.loads(text)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from None


def _split_events(path, events):
    """(thread (tid, name, pid) list in file order, per-thread call tuples, marks,
    pid, lanes: pid -> process_name/process_sort_index facts) from the traceEvents: "M" thread_name events, "X" calls, and "i"
    instants and "C" counter samples as (kind, ts ns, tid, name, args)."""
    thread_meta, calls, marks, thread_of_tid, pid, lanes = [], [], [], {}, 0, {}
    for number, event in enumerate(events):
        if type(event) is not dict:
            raise TraceFormatError(f"{path}: event {number} is not an object")
        phase = event.get("ph")
        if phase == "X":
            thread, call = read_call(path, number, event, thread_of_tid)
            calls[thread].append(call)
            pid = event.get("pid")
            if type(pid) is not int:
                raise TraceFormatError(f"{path}: event {number}: pid must be an integer")
        elif phase == "M" and event.get("name") == "thread_name":
            tid, name = read_thread_name(path, number, event)
            thread_of_tid[tid] = len(thread_meta)
            thread_meta.append((tid, name, event.get("pid")))
            calls.append([])
        elif phase in ("i", "C"):
            marks.append(read_mark(path, number, event))
        elif phase == "M" and event.get("name") in ("process_name", "process_sort_index"):
            read_lane(path, number, event, lanes)
        else:
            raise TraceFormatError(f"{path}: event {number}: unexpected phase {phase!r}")
    return thread_meta, calls, marks, pid, lanes
