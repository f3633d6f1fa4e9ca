"""Where the time went: calls, total and self time per function, as rows or a table.

    from pytrace_cffi.summary import read_trace, summarize, format_summary
    print(format_summary(summarize(read_trace("trace.json"), sort="self")))

Total time counts a function's time once however deep it recurses: a call made
while the same function is already on the stack adds to its calls and its self
time, not to its total. Self time is a call's time minus its callees' time.

read_trace() opens what pytrace_cffi writes: a saved-trace directory, or a Chrome
.json / .json.gz it exported.
"""
import gzip
import json
import os
import re
import struct
import zlib
from collections import namedtuple

from ._core import ffi, lib
from ._progress import Progress
from .errors import TraceFormatError

SummaryRow = namedtuple("SummaryRow", "name calls total_ns self_ns thread")
SummaryRow.__doc__ = """One function's line in a summary; thread is the thread's
name with per_thread=True, else None. Times in nanoseconds."""

SORT_KEYS = {
    "total": lambda row: (-row.total_ns, row.name),
    "self": lambda row: (-row.self_ns, row.name),
    "calls": lambda row: (-row.calls, row.name),
    "name": lambda row: (row.name,),
}

PROGRESS_STEP = 65536                        # slices between progress reports

# pt_slice as packed native-order bytes: start, end, key, flags, parent, tag, depth.
SLICE_RECORD = struct.Struct("=qqIIqII")
_SLICE_FIELDS = ("start", "end", "key", "flags", "parent", "tag", "depth")
# Reading slices as raw bytes is only right while the C struct keeps this layout.
if (ffi.sizeof("pt_slice") != SLICE_RECORD.size or
        [ffi.offsetof("pt_slice", field) for field in _SLICE_FIELDS] != [0, 8, 16, 20, 24, 32, 36]):
    raise ImportError("pytrace_cffi.summary: the pt_slice layout changed; update SLICE_RECORD")


def slice_records(slices, count):
    """The first `count` slices of a cffi pt_slice array as tuples (start, end,
    key, flags, parent, tag, depth): far faster to loop over than cffi structs."""
    return SLICE_RECORD.iter_unpack(ffi.buffer(slices, count * SLICE_RECORD.size))


def summarize(trace, sort="total", limit=20, per_thread=False):
    """SummaryRows for the `limit` (None: all) top functions by `sort` (total,
    self, calls or name). With per_thread, each thread gets its own rows, in
    thread order, `limit` of them per thread."""
    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
    unique_names = sorted(set(trace.names))
    name_id = {name: index for index, name in enumerate(unique_names)}
    name_of_key = [name_id[name] for name in trace.names]
    tables = []
    with Progress("summarizing", len(trace)) as progress:
        table = {}
        for thread, slices, count in trace.thread_slices():
            if per_thread:
                table = {}
                tables.append((thread.name, table))
            _accumulate(slice_records(slices, count), count, name_of_key, table, progress)
    if not per_thread:
        tables.append((None, table))
    rows = []
    for thread_name, table in tables:
        thread_rows = [SummaryRow(unique_names[name], calls, total, self_time, thread_name)
                       for name, (calls, total, self_time) in table.items()]
        thread_rows.sort(key=SORT_KEYS[sort])
        rows.extend(thread_rows[:limit])
    return rows


def _accumulate(records, count, name_of_key, table, progress):
    """Adds one thread's `count` slices to table: name id -> [calls, total ns, self
    ns]. Slices come parent first, so the open calls form a stack ending at the parent."""
    open_slices, open_names = [], []
    times_open = {}                          # name id -> how often it is on the stack
    for index, (start, end, key, _flags, parent, _tag, _depth) in enumerate(records):
        if index % PROGRESS_STEP == PROGRESS_STEP - 1:
            progress.advance(PROGRESS_STEP)
        while open_slices and open_slices[-1] != parent:
            open_slices.pop()
            times_open[open_names.pop()] -= 1
        name = name_of_key[key]
        duration = end - start
        stats = table.get(name)
        if stats is None:
            stats = table[name] = [0, 0, 0]
        stats[0] += 1
        stats[2] += duration
        if open_names:
            table[open_names[-1]][2] -= duration
        if not times_open.get(name):
            stats[1] += duration
        open_slices.append(index)
        open_names.append(name)
        times_open[name] = times_open.get(name, 0) + 1
    progress.advance(count % PROGRESS_STEP)


NUMBER_COLUMNS = 3                           # calls, total ms, self ms: right-aligned


def _ms(ns):
    return f"{ns / 1e6:.3f}"


def format_summary(rows, title=None):
    """rows as a fixed-width text table: calls, total and self milliseconds, the
    thread (when the rows are per thread) and the function; `title` above it."""
    headers = ["calls", "total ms", "self ms"]
    cells = [[str(row.calls), _ms(row.total_ns), _ms(row.self_ns)] for row in rows]
    per_thread = any(row.thread is not None for row in rows)
    if per_thread:
        headers.append("thread")
        for line, row in zip(cells, rows):
            line.append(row.thread)
    widths = [max([len(header)] + [len(line[column]) for line in cells])
              for column, header in enumerate(headers)]

    def render(values, name):
        parts = [value.rjust(width) if column < NUMBER_COLUMNS else value.ljust(width)
                 for column, (value, width) in enumerate(zip(values, widths))]
        return "  ".join(parts + [name]).rstrip()

    lines = [title] if title else []
    lines.append(render(headers, "function"))
    lines.append(render(["-" * width for width in widths], "-" * len("function")))
    previous_thread = rows[0].thread if rows else None
    for line, row in zip(cells, rows):
        if row.thread != previous_thread:
            lines.append("")                 # per thread: a blank line between threads
            previous_thread = row.thread
        lines.append(render(line, row.name))
    if not rows:
        lines.append("(no calls)")
    return "\n".join(lines)


def read_trace(path):
    """A Trace from a saved-trace directory or a Chrome .json/.json.gz written by
    pytrace_cffi. Raises TraceFormatError for anything else."""
    from . import load
    path = os.fspath(path)
    if os.path.isdir(path):
        return load(path)
    if not os.path.exists(path):
        raise TraceFormatError(f"{path!r} does not exist")
    if path.endswith((".json", ".json.gz")):
        return _read_chrome_trace(path)
    raise TraceFormatError(f"{path!r} is neither a saved-trace directory nor a .json or "
                           f".json.gz file")


# What the Chrome JSON does not say of a "python_function", read from its name:
# Python functions are "<path>(<line>): <function>", torch modules and optimizer
# steps are Python too, everything else is a built-in.
_PYTHON_NAME = re.compile(r"\(\d+\): |^nn\.Module: |^Optimizer\.step#")
_CATEGORIES = ("python_function", "user_annotation")
_STANDARD_ARGS = ("Python id", "Python parent id", "Python thread")
_NUMBER_TYPES = (int, float)                 # exact types: a bool is no number here
MAX_MICROSECONDS = 2 ** 52                   # ~143 years; rejects inf, nan and overflow


def _read_chrome_trace(path):
    from .trace import Mark, ThreadInfo, Trace
    data = _load_json(path)
    _expect(isinstance(data, dict) and isinstance(data.get("traceEvents"), list),
            f"{path}: not a Chrome trace (no traceEvents list)")
    other = data.get("otherData")
    _expect(isinstance(other, dict) and other.get("generator") == "pytrace_cffi",
            f"{path}: not written by pytrace_cffi (otherData.generator is missing)")
    start_ns = _other_int(path, other, "start_monotonic_ns")
    thread_meta, calls, marks, pid = _split_events(path, data["traceEvents"])
    keys = _Keys()
    threads, slices = [], []
    first_id = 0
    with Progress(f"reading {path}", sum(len(c) for c in calls)) as progress:
        for index, ((tid, thread_name), thread_calls) in enumerate(zip(thread_meta, calls)):
            array = _thread_slices(path, thread_calls, first_id, start_ns, keys)
            bad = lib.pt_validate_slices(array, len(thread_calls), len(keys.names))
            _expect(bad < 0, f"{path}: thread {index}: call {first_id + bad} does not nest "
                             f"inside its parent")
            threads.append(ThreadInfo(index, tid, 0, thread_name, 0, 0))
            slices.append((array, len(thread_calls)))
            first_id += len(thread_calls)
            progress.advance(len(thread_calls))
    return Trace(names=keys.names, key_kinds=keys.kinds, key_args=keys.args, threads=threads,
                 slices=slices, start_ns=start_ns,
                 stop_ns=_other_int(path, other, "stop_monotonic_ns"), pid=pid,
                 python_version=str(other.get("python")), backend=str(other.get("backend")),
                 clock=str(other.get("clock")),
                 params={"modules": [], "optimizer_steps": []},
                 marks=[Mark(kind, start_ns + ts_ns, tid, name, args)
                        for kind, ts_ns, tid, name, args in marks],
                 dropped_events=_other_int(path, other, "dropped_events"),
                 realtime_anchor=_other_anchor(path, other))


def _other_anchor(path, other):
    from ._clock import checked_anchor
    try:
        return checked_anchor(other.get("realtime_anchor"))
    except ValueError as exc:
        raise TraceFormatError(f"{path}: otherData.{exc}") from None


class _Keys:
    """The key table rebuilt from the calls: one key per name, category and args,
    as the tracer gives a record_function region with other args a key of its own."""

    def __init__(self):
        self.names, self.kinds, self.args = ["<unknown>"], ["python"], {}
        self._key_of = {}

    def key(self, name, category, extra):
        identity = (name, category, json.dumps(extra, sort_keys=True) if extra else "")
        key = self._key_of.get(identity)
        if key is None:
            key = self._key_of[identity] = len(self.names)
            self.names.append(name)
            self.kinds.append(_kind(name, category))
            if extra:
                self.args[key] = extra
        return key


def _kind(name, category):
    if category == "user_annotation":
        return "annotation"
    return "python" if _PYTHON_NAME.search(name) else "c"


def _thread_slices(path, thread_calls, first_id, start_ns, keys):
    """One thread's calls as a cffi pt_slice array, packed in Python and copied once."""
    thread_calls.sort(key=lambda call: call[0])
    packed = bytearray(len(thread_calls) * SLICE_RECORD.size)
    depths = []
    for i, (call_id, parent_id, name, category, ts_ns, dur_ns, extra) in \
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
        flags = lib.PT_SLICE_C if keys.kinds[key] == "c" else 0
        start = start_ns + ts_ns
        SLICE_RECORD.pack_into(packed, i * SLICE_RECORD.size, start, start + dur_ns, key,
                               flags, parent, 0, depth)
    array = ffi.new("pt_slice[]", max(1, len(thread_calls)))
    ffi.memmove(array, packed, len(packed))
    return array


def _load_json(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from None


def _split_events(path, events):
    """(thread (tid, name) list in file order, per-thread call tuples, marks,
    pid) from the traceEvents: "M" thread_name events, "X" calls, and "i"
    instants and "C" counter samples as (kind, ts ns, tid, name, args)."""
    thread_meta, calls, marks, thread_of_tid, pid = [], [], [], {}, 0
    for number, event in enumerate(events):
        if type(event) is not dict:
            raise TraceFormatError(f"{path}: event {number} is not an object")
        phase = event.get("ph")
        if phase == "X":
            thread, call = _read_call(path, number, event, thread_of_tid)
            calls[thread].append(call)
            pid = event.get("pid")
            if type(pid) is not int:
                raise TraceFormatError(f"{path}: event {number}: pid must be an integer")
        elif phase == "M" and event.get("name") == "thread_name":
            tid = event.get("tid")
            name = (event.get("args") or {}).get("name")
            _expect(type(tid) is int and isinstance(name, str),
                    f"{path}: event {number}: a thread_name needs an integer tid and a name")
            thread_of_tid[tid] = len(thread_meta)
            thread_meta.append((tid, name))
            calls.append([])
        elif phase in ("i", "C"):
            marks.append(_read_mark(path, number, event))
        elif phase == "M" and event.get("name") in ("process_name", "process_sort_index"):
            pass                            # processes.join's lanes: calls are read as one
        else:
            raise TraceFormatError(f"{path}: event {number}: unexpected phase {phase!r}")
    return thread_meta, calls, marks, pid


def _read_mark(path, number, event):
    name, ts, tid, args = event.get("name"), event.get("ts"), event.get("tid"), event.get("args")
    if args is None and event["ph"] == "i":
        args = {}           # an instant without args, as earlier exports wrote it
    _expect(isinstance(name, str) and _is_time(ts) and type(tid) is int
            and isinstance(args, dict),
            f"{path}: event {number}: an instant or counter needs a name, ts, tid and args")
    return event["ph"], round(ts * 1000), tid, name, args


def _read_call(path, number, event, thread_of_tid):
    """(thread index, (id, parent id, name, category, ts ns, dur ns, extra args))
    of an "X" event. Checked field by field with exact types: this runs for every
    call of a trace."""
    try:
        args = event["args"]
        call_id = args["Python id"]
        parent_id = args["Python parent id"]
        thread = args["Python thread"]
        tid, name, category = event["tid"], event["name"], event["cat"]
        ts, dur = event["ts"], event["dur"]
    except (KeyError, TypeError):
        raise TraceFormatError(f"{path}: event {number}: a call needs tid, name, cat, ts, "
                               f"dur and args {', '.join(_STANDARD_ARGS)}") from None
    # Plain ifs, not _expect: its message would be formatted for every call.
    if type(call_id) is not int or not (parent_id is None or type(parent_id) is int):
        raise TraceFormatError(f"{path}: event {number}: Python id and Python parent id "
                               f"must be integers")
    if type(name) is not str:
        raise TraceFormatError(f"{path}: event {number}: name must be a string")
    if category not in _CATEGORIES:
        raise TraceFormatError(f"{path}: event {number}: unknown category {category!r}")
    if not (_is_time(ts) and _is_time(dur) and dur >= 0):
        raise TraceFormatError(f"{path}: event {number}: bad ts or dur")
    if type(tid) is not int or type(thread) is not int or thread_of_tid.get(tid) != thread:
        raise TraceFormatError(f"{path}: event {number}: tid {tid!r} and Python thread "
                               f"{thread!r} do not match a thread_name event")
    extra = {k: v for k, v in args.items() if k not in _STANDARD_ARGS} if len(args) > 3 else None
    return thread, (call_id, parent_id, name, category, round(ts * 1000), round(dur * 1000),
                    extra)


def _is_time(value):
    """A finite microsecond count that fits the int64 nanoseconds of a slice."""
    return type(value) in _NUMBER_TYPES and -MAX_MICROSECONDS < value < MAX_MICROSECONDS


def _other_int(path, other, field):
    value = other.get(field)
    _expect(type(value) is int, f"{path}: otherData.{field} must be an integer")
    return value


def _expect(condition, message):
    if not condition:
        raise TraceFormatError(message)
