"""Where the time went: calls, total and self time per function, as rows or a table.

    from pytrace_cffi.render.summary import read_trace, summarize, format_summary
    print(format_summary(summarize(read_trace("trace.json"), sort="self")))

Total time counts a function's time once however deep it recurses: a call made
while the same function is already on the stack adds to its calls and its self
time, not to its total. Self time is a call's time minus its callees' time. A
frame already running when its process's trace began (seeded at start(), or a
forked child's frames continued from its parent: "open at start") adds its time
but is no call: it began before the trace (its parent counts it, when traced).

read_trace() opens what pytrace_cffi writes: a saved-trace directory, or a Chrome
.json / .json.gz it exported. Our JSON has one event per line, so it is read line
by line without ever holding the text or a Python object per call, and its calls
are checked and counted, not kept: the trace streams, reading each thread's calls
again in batches when the summary or an export asks (memory that does not grow
with the calls; the slice table is built only for thread_slices()). A file in
another layout (reformatted, say) is parsed whole, which needs many times its size
in memory (a TraceWarning says so when the file is big).
"""
import gzip
import io
import json
import os
import re
import struct
import warnings
import weakref
import zlib
from collections import namedtuple

from .. import formats
from .._core import ffi, lib
from .._jsontext import MAX_ARGS_DEPTH, finite_number, too_deep
from .._progress import Progress, counted
from ..errors import TraceFormatError, TraceWarning

SummaryRow = namedtuple("SummaryRow", "name calls total_ns self_ns thread")
SummaryRow.__doc__ = """One function's line in a summary; thread is the thread's
name with per_thread=True, else None. Times in nanoseconds."""

SORT_KEYS = {
    "total": lambda row: (-row.total_ns, row.name),
    "self": lambda row: (-row.self_ns, row.name),
    "calls": lambda row: (-row.calls, row.name),
    "name": lambda row: (row.name,),
}

# pt_slice as packed native-order bytes: start, end, key, flags, parent, tag, depth.
SLICE_RECORD = struct.Struct("=qqIIqII")
_SLICE_FIELDS = ("start", "end", "key", "flags", "parent", "tag", "depth")
# Reading slices as raw bytes is only right while the C struct keeps this layout.
if (ffi.sizeof("pt_slice") != SLICE_RECORD.size or
        [ffi.offsetof("pt_slice", field) for field in _SLICE_FIELDS] != [0, 8, 16, 20, 24, 32, 36]):
    raise ImportError("pytrace_cffi.render.summary: the pt_slice layout changed; update SLICE_RECORD")


def slice_records(slices, count):
    """The first `count` slices of a cffi pt_slice array as tuples (start, end,
    key, flags, parent, tag, depth): far faster to loop over than cffi structs."""
    return SLICE_RECORD.iter_unpack(ffi.buffer(slices, count * SLICE_RECORD.size))


def summarize(trace, sort="total", limit=20, per_thread=False, per_process=False):
    """SummaryRows for the `limit` (None: all) top functions by `sort` (total,
    self, calls or name). With per_thread, each thread gets its own rows, in
    thread order, `limit` of them per thread (in a trace of several processes,
    a row's thread says whose: "MainThread (rank 0, pid 12)"). With per_process
    (a trace of several processes), each process gets its own rows, their
    thread field naming the process ("rank 0 (pid 12)")."""
    return summarize_counting(trace, sort, limit, per_thread, per_process)[0]


def summarize_counting(trace, sort="total", limit=20, per_thread=False, per_process=False):
    """(summarize's rows, the calls of the whole trace as the rows count them:
    frames open at start left out)."""
    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
    summarizer = Summarizer(trace.names)
    tables = [] if per_thread or per_process else [(None, summarizer.new_table())]
    from .walk import thread_batches
    for thread, batches in thread_batches(trace):
        if per_thread:
            tables.append((_thread_title(trace, thread), summarizer.new_table()))
        elif per_process:
            title = _process_title(trace, trace.thread_pid(thread))
            if not tables or tables[-1][0] != title:
                tables.append((title, summarizer.new_table()))
        summarizer.add_thread(thread, batches, tables[-1][1])
    return summarizer.rows(tables, sort, limit), summarizer.calls


class Summarizer:
    """Per-name calls, total and self time over threads whose slices come in
    batches (walk.thread_batches): from the events, without a slice table, or
    the table whole. Names that several keys share are summed as one."""

    def __init__(self, names):
        self.unique_names = sorted(set(names))
        name_id = {name: index for index, name in enumerate(self.unique_names)}
        self.n_names = len(self.unique_names)
        name_of_key = ffi.new("uint32_t[]", [name_id[name] for name in names] or [0])
        self._c = ffi.gc(lib.pt_summarizer_new(name_of_key, len(names), self.n_names),
                         lib.pt_summarizer_free)
        if self._c == ffi.NULL:
            raise MemoryError("out of memory while summarizing the trace")
        self.slices = self.open_at_start = 0      # over every batch added

    @property
    def calls(self):
        """The calls added: slices less the frames open at start."""
        return self.slices - self.open_at_start

    def new_table(self):
        """Per name id: calls, total ns, self ns."""
        n = max(1, self.n_names)
        return (ffi.new("uint64_t[]", n), ffi.new("int64_t[]", n), ffi.new("int64_t[]", n))

    def add(self, thread, slices, n, first_index, table):
        """One batch of thread's slices, added to table."""
        self.slices += n
        self.open_at_start += lib.pt_open_at_start(slices, n)
        status = lib.pt_summarizer_feed(self._c, slices, n, first_index, *table)
        if status == lib.PT_ERR_NOMEM:
            raise MemoryError("out of memory while summarizing the trace")
        if status != lib.PT_OK:
            raise TraceFormatError(f"thread {thread.index}: a call's key is out of range "
                                   f"or its parent is not an enclosing call")

    def end_thread(self):
        lib.pt_summarizer_end_thread(self._c)

    def add_thread(self, thread, batches, table):
        for slices, n, first_index in batches:
            self.add(thread, slices, n, first_index, table)
        self.end_thread()

    def rows(self, tables, sort, limit):
        """SummaryRows of (title, table) pairs, each sorted and cut to limit."""
        rows = []
        for thread_name, (calls, total, self_time) in tables:
            thread_rows = [SummaryRow(self.unique_names[name], calls[name], total[name],
                                      self_time[name], thread_name)
                           for name in range(self.n_names)
                           if calls[name] or total[name] or self_time[name]]
            thread_rows.sort(key=SORT_KEYS[sort])
            rows.extend(thread_rows[:limit])
        return rows


NUMBER_COLUMNS = 3                           # calls, total ms, self ms: right-aligned


def _process_title(trace, pid):
    label = (trace.processes or {}).get(pid, {}).get("label")
    shown = trace.process_id_text(pid)
    return f"{label} ({shown})" if label is not None else shown


def _thread_title(trace, thread):
    if not trace.processes:
        return thread.name
    pid = trace.thread_pid(thread)
    label = trace.processes.get(pid, {}).get("label", "?")
    return f"{thread.name} ({label}, {trace.process_id_text(pid)})"


def calls_begun(trace):
    """The calls of trace as the summary counts them: its slices less the frames
    running when its process's trace began. From the walk's counts when the trace
    streams from its events, else one pass over its slices."""
    streams = getattr(trace, "_streams", None)
    counted = getattr(streams, "open_at_start", None)
    if counted is not None and not trace.slices_built():
        return len(trace) - sum(counted)
    from .walk import thread_batches
    return len(trace) - sum(lib.pt_open_at_start(slices, n)
                            for _, batches in thread_batches(trace) for slices, n, _ in batches)


ProcessTotal = namedtuple("ProcessTotal",
                          "pid label calls threads start_ns end_ns open_at_start",
                          defaults=(0,))
ProcessTotal.__doc__ = """One process of a trace of several processes: its calls (those
that began in its trace), its threads, the span of its calls (None, None when it
has none), and its frames already running when its trace began (a forked child's
continued from its parent: shown, not counted)."""


def process_totals(trace):
    """A ProcessTotal per process of a trace of several processes, in lane order
    (empty for a trace of one process)."""
    if not trace.processes:
        return []
    from .walk import thread_batches
    found = {pid: [0, 0, None, None, 0] for pid in trace.processes}
    for thread, batches in thread_batches(trace):
        entry = found.setdefault(trace.thread_pid(thread), [0, 0, None, None, 0])
        entry[1] += 1
        for slices, count, _ in batches:
            open_at_start = lib.pt_open_at_start(slices, count)
            entry[0] += count - open_at_start
            entry[4] += open_at_start
            first = slices[0].start
            # the last root's end: each root ends before the next starts
            last = max((slices[i].end for i in range(count) if slices[i].parent < 0),
                       default=None)
            entry[2] = first if entry[2] is None else min(entry[2], first)
            if last is not None:
                entry[3] = last if entry[3] is None else max(entry[3], last)
    return [ProcessTotal(pid, (trace.processes.get(pid) or {}).get("label", f"pid {pid}"),
                         *values) for pid, values in found.items()]


def format_process_totals(trace):
    """process_totals as lines of text ("" for a trace of one process)."""
    lines = []
    for total in process_totals(trace):
        span = ("" if total.start_ns is None else
                f", {_ms(total.start_ns - trace.start_ns)}-{_ms(total.end_ns - trace.start_ns)}"
                " ms")
        lines.append(f"  {trace.process_id_text(total.pid)} ({total.label}): "
                     f"{counted(total.calls, 'call')} on {counted(total.threads, 'thread')}"
                     f"{span}{_open_at_start_note(total.open_at_start)}")
    return "\n".join(lines)


def _open_at_start_note(count):
    """What a count of calls leaves out: the frames running when tracing began."""
    if not count:
        return ""
    return f" (and {count} frame{'s' if count != 1 else ''} running at its start)"


def _ms(ns):
    return f"{ns / 1e6:.3f}"


def format_summary(rows, title=None, column="thread"):
    """rows as a fixed-width text table: calls, total and self milliseconds, the
    thread (when the rows are per thread; headed `column`: "process" for rows
    per process) and the function; `title` above it."""
    headers = ["calls", "total ms", "self ms"]
    cells = [[str(row.calls), _ms(row.total_ns), _ms(row.self_ns)] for row in rows]
    per_thread = any(row.thread is not None for row in rows)
    if per_thread:
        headers.append(column)
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
    """A Trace from a saved-trace directory, a Chrome .json/.json.gz or a .pftrace
    written by pytrace_cffi. Raises TraceFormatError for anything else."""
    from .. import load
    path = os.fspath(path)
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "meta.json")) and _holds_processes(path):
            return _read_job(path)
        return load(path)
    if not os.path.exists(path):
        raise TraceFormatError(f"{path!r} does not exist")
    if formats.is_chrome_json(path):
        return _read_chrome_trace(path)
    if getattr(formats.find(path), "name", None) == "pftrace":
        from ..pftrace_reader import read_pftrace
        return read_pftrace(path)
    raise TraceFormatError(f"{path!r} is neither a saved-trace directory nor a .json, "
                           f".json.gz or .pftrace file")


def _holds_processes(path):
    """Whether path is the trace directory of a job (follow_children): proc-* inside."""
    return any(name.startswith("proc-") and os.path.isdir(os.path.join(path, name))
               for name in os.listdir(path))


def _read_job(path):
    """Every process of a job's trace directory as one Trace of several processes
    (see processes.joined_trace): each thread's pid says whose it is. A process
    not read whole (lost, recovered, damaged) is named in a TraceWarning."""
    from ..follow.jobs import not_read_whole
    from ..follow.join import joined_trace
    trace, results = joined_trace(path)
    message = not_read_whole(path, results)
    if message:
        warnings.warn(message, TraceWarning, stacklevel=3)
    return trace


# What the Chrome JSON does not say of a "python_function", read from its name:
# Python functions are "<path>(<line>): <function>", torch modules and optimizer
# steps are Python too, everything else is a built-in.
_PYTHON_NAME = re.compile(r"\(\d+\): |^nn\.Module: |^Optimizer\.step#")
_CATEGORIES = ("python_function", "user_annotation")
_STANDARD_ARGS = ("Python id", "Python parent id", "Python thread")
_NUMBER_TYPES = (int, float)                 # exact types: a bool is no number here
MAX_MICROSECONDS = 2 ** 52                   # ~143 years; rejects inf, nan and overflow


def _read_chrome_trace(path):
    try:
        try:
            return _read_chrome_lines(path)
        except _OtherLayout as exc:
            reason = exc.args[0]
        if os.path.getsize(path) > WHOLE_READ_NOTE_BYTES:
            warnings.warn(f"{path}: not in pytrace_cffi's one-event-per-line layout "
                          f"({reason}); reading it whole, which takes many times its size "
                          f"in memory", TraceWarning, stacklevel=3)
        return _read_chrome_whole(path)
    except (struct.error, OverflowError):
        raise TraceFormatError(f"{path}: a time is out of range") from None


def _read_chrome_whole(path):
    """Any layout: json.loads of the whole text, then the events."""
    from ..trace import ThreadInfo
    data = _load_json(path)
    _expect(isinstance(data, dict) and isinstance(data.get("traceEvents"), list),
            f"{path}: not a Chrome trace (no traceEvents list)")
    other = data.get("otherData")
    _check_other(path, other)
    start_ns = _other_int(path, other, "start_monotonic_ns")
    thread_meta, calls, marks, pid, lanes = _split_events(path, data["traceEvents"])
    keys = _Keys()
    threads, slices = [], []
    first_id = 0
    with Progress(f"reading {path}", sum(len(c) for c in calls)) as progress:
        for index, ((tid, thread_name, thread_pid), thread_calls) in \
                enumerate(zip(thread_meta, calls)):
            packed = _thread_slices(path, thread_calls, first_id, start_ns, keys)
            threads.append(ThreadInfo(index, tid, 0, thread_name, 0, 0, thread_pid))
            slices.append(_validated(path, index, first_id, packed, len(thread_calls), keys))
            first_id += len(thread_calls)
            progress.advance(len(thread_calls))
    return _chrome_trace(path, other, keys, threads, slices, marks, pid, lanes)


def _check_other(path, other):
    _expect(isinstance(other, dict) and other.get("generator") == "pytrace_cffi",
            f"{path}: not written by pytrace_cffi (otherData.generator is missing)")


def _validated(path, index, first_id, array, count, keys):
    bad = lib.pt_validate_slices(array, count, len(keys.names))
    _expect(bad < 0, f"{path}: thread {index}: call {first_id + bad} does not nest "
                     f"inside its parent")
    return array, count


def _chrome_trace(path, other, keys, threads, slices, marks, pid, lanes, streams=None,
                  build_slices=None):
    from ..trace import Mark, Trace
    start_ns = _other_int(path, other, "start_monotonic_ns")
    processes = _lane_processes(path, other, lanes, threads)
    if processes is None:
        threads = [t._replace(pid=None) for t in threads]
    else:
        pid = next(iter(processes))
    dropped = _other_int(path, other, "dropped_events")
    threads = _threads_dropped(path, other, threads, dropped)
    trace = Trace(names=keys.names, key_kinds=keys.kinds, key_args=keys.args, threads=threads,
                 slices=slices, start_ns=start_ns,
                 stop_ns=_other_int(path, other, "stop_monotonic_ns"), pid=pid,
                 python_version=str(other.get("python")), backend=str(other.get("backend")),
                 clock=str(other.get("clock")),
                 params={"modules": [], "optimizer_steps": []},
                 marks=[Mark(kind, start_ns + ts_ns, tid, name, args)
                        for kind, ts_ns, tid, name, args in marks],
                 dropped_events=dropped,
                 realtime_anchor=_other_anchor(path, other), streams=streams,
                 build_slices=build_slices)
    trace.processes = processes
    trace.label = other["label"] if isinstance(other.get("label"), str) else None
    return trace


def _threads_dropped(path, other, threads, dropped):
    """threads with the events each dropped, from otherData.dropped_by_thread (see
    chrome.dropped_by_thread). A file that says the total only (written before the
    split was) has it on its first thread: a trace's total is its threads' sum."""
    split = other.get("dropped_by_thread")
    _expect(dropped >= 0, f"{path}: otherData.dropped_events is negative")
    if split is None:
        if not dropped:
            return threads
        _expect(len(threads) > 0, f"{path}: {dropped} events dropped, but no thread")
        return [threads[0]._replace(dropped=dropped)] + list(threads[1:])
    _expect(isinstance(split, list) and len(split) == len(threads)
            and all(type(n) is int and n >= 0 for n in split),
            f"{path}: otherData.dropped_by_thread must be a count of at least 0 per thread "
            f"({len(threads)})")
    _expect(sum(split) == dropped, f"{path}: otherData.dropped_by_thread adds up to "
                                   f"{sum(split)}, dropped_events is {dropped}")
    return [thread._replace(dropped=n) for thread, n in zip(threads, split)]


def _lane_processes(path, other, lanes, threads):
    """Trace.processes of a file with a lane per process (processes.join and the
    export of a trace of several processes write process_name metadata events),
    ordered by process_sort_index; the facts of otherData.processes added. None
    for a file of one process."""
    if not lanes:
        return None
    order = sorted(lanes, key=lambda pid: (lanes[pid].get("sort_index", len(lanes)), pid))
    processes = {pid: {"label": lanes[pid].get("label", f"pid {pid}")} for pid in order}
    listed = other.get("processes", [])
    _expect(isinstance(listed, list) and all(isinstance(p, dict) for p in listed),
            f"{path}: otherData.processes must be a list of objects")
    _expect(not too_deep(listed, MAX_ARGS_DEPTH + 1),
            f"{path}: otherData.processes nest deeper than {MAX_ARGS_DEPTH} levels")
    for entry in listed:
        if type(entry.get("pid")) is int and entry["pid"] in processes:
            facts = {k: v for k, v in entry.items() if k not in ("pid", "label")}
            processes[entry["pid"]].update(facts)
    for thread in threads:
        _expect(type(thread.pid) is int and thread.pid in processes, f"{path}: thread {thread.name!r} (tid "
                                         f"{thread.native_id}) is in pid {thread.pid}, "
                                         f"which has no process_name event")
    return processes


def _read_lane(path, number, event, lanes):
    """A process_name or process_sort_index metadata event, into lanes (pid -> facts)."""
    pid, args = event.get("pid"), event.get("args")
    what = "label" if event.get("name") == "process_name" else "sort_index"
    value = args.get("name" if what == "label" else "sort_index") \
        if isinstance(args, dict) else None
    _expect(type(pid) is int and -2 ** 63 <= pid < 2 ** 63
            and (isinstance(value, str) if what == "label" else type(value) is int),
            f"{path}: event {number}: a {event.get('name')} needs an integer pid and "
            f"{'a name' if what == 'label' else 'an integer sort_index'}")
    lanes.setdefault(pid, {})[what] = value


def _other_anchor(path, other):
    from .._clock import checked_anchor
    try:
        return checked_anchor(other.get("realtime_anchor"))
    except ValueError as exc:
        raise TraceFormatError(f"{path}: otherData.{exc}") from None


# --- our layout, line by line -------------------------------------------------------

WHOLE_READ_NOTE_BYTES = 64 << 20             # warn before parsing a file this big whole
BLOCK_BYTES = 1 << 20                        # read at a time (three blocks at most held)
STREAM_BATCH_SLICES = 1 << 16                # slices a thread's later reads hand out at once


class _OtherLayout(Exception):
    """The file is not laid out as pytrace_cffi writes it: parse it whole."""


class _Changed(Exception):
    """A later read of a file does not meet what the first read met."""


# A call exactly as pt_format_slices writes it; anything else on a line goes
# through json.loads and the checks of the whole-file path. The name ends at the
# first '","ts":', as a quote inside a JSON string is always escaped; whether the
# name and the extra args are valid JSON is checked once per function (_line_key).
_CALL_LINE = re.compile(
    rb'\{"ph":"X","pid":(\d+),"tid":(\d+),"cat":"(python_function|user_annotation)",'
    rb'"name":(".*?"),"ts":(\d{1,13})\.(\d{3}),"dur":(\d{1,13})\.(\d{3}),'
    rb'"args":\{"Python id":(\d+),"Python parent id":(\d+|null),"Python thread":(\d+)'
    rb'(.*)\}\}\Z', re.S)
_HEAD_END = b'"traceEvents":['


class _LineThread:
    """One thread's calls while they are read (pt_line_thread): checked and
    counted, and with batch_cap, handed out in batches of that many slices."""

    def __init__(self, index, tid, name, first_id, start_ns, batch_cap=0):
        self.index, self.tid, self.name, self.first_id = index, tid, name, first_id
        self.tid_text, self.index_text = str(tid).encode(), str(index).encode()
        self.state = ffi.gc(lib.pt_line_thread_new(), lib.pt_line_thread_free)
        if self.state == ffi.NULL:
            raise MemoryError("out of memory while reading a trace")
        self.state.start_ns, self.state.first_id = start_ns, first_id
        self.state.thread_index = index
        self.batch = None
        if batch_cap:
            self.batch = ffi.new("pt_slice[]", batch_cap)
            self.state.slices, self.state.cap = self.batch, batch_cap
        # A tid C cannot compare leaves every line of the thread to Python.
        self.fast = 0 <= tid < 2 ** 64
        if self.fast:
            self.state.tid = tid

    def add(self, path, call_id, parent_id, key, flags, start, end):
        """Takes a call given its id, parent id (None for a root) and key."""
        count = self.state.n
        if call_id != self.first_id + count:
            raise _OtherLayout(f"call {call_id} is out of order")
        parent = -1
        if parent_id is not None:
            parent = parent_id - self.first_id
            if not 0 <= parent < count:
                raise TraceFormatError(f"{path}: call {call_id}: parent {parent_id} is not an "
                                       f"earlier call on its thread")
        if not -2 ** 63 <= start <= end < 2 ** 63:
            raise OverflowError
        status = lib.pt_line_thread_push(self.state, start, end, key, flags, parent)
        if status == lib.PT_ERR_NOMEM:
            raise MemoryError("out of memory while reading a trace")
        if status != lib.PT_OK:
            raise TraceFormatError(f"{path}: thread {self.index}: call {call_id} does not nest "
                                   f"inside its parent")

    def stats(self):
        """(calls, calls open at stop, deepest depth): the JSON marks no call as
        open at stop, so as read back none is (as in the slice table)."""
        return self.state.n, 0, self.state.max_depth


class _Text:
    """A file's text a block at a time: text[start:] is still to be read, and
    offset is where text[0] is in the file (in the decompressed text of a .gz)."""

    def __init__(self, stream, offset, on_read=None):
        self.stream, self.on_read = stream, on_read
        self.text, self.buffer, self.offset = b"", None, None
        self.at(offset)

    def at(self, offset):
        """Goes to offset: within the text read, or by seeking (a .gz decompresses
        up to it, from its start when it is behind)."""
        if not (self.text and self.offset <= offset <= self.offset + len(self.text)):
            self.stream.seek(offset)
            self.text, self.buffer, self.offset = b"", None, offset
        self.start = offset - self.offset

    def more(self):
        """Reads the next block; False at the end of the file. A line longer than a
        block (a name of megabytes) is read in blocks as long as what is pending, so
        it costs time in proportion to its length, not its square."""
        block = self.stream.read(max(BLOCK_BYTES, len(self.text) - self.start))
        if self.on_read is not None:
            self.on_read()
        if not block:
            return False
        self.offset += self.start
        self.text = self.text[self.start:] + block if self.start < len(self.text) else block
        self.start = 0
        self.buffer = ffi.from_buffer(self.text)
        return True


def _read_chrome_lines(path):
    """The Trace in a file of pytrace_cffi's layout: the head on its first line,
    "traceEvents":[ on the second, then one event per line (a comma after all but
    the last) and "]}". Raises _OtherLayout as soon as the file is laid out otherwise.
    The calls are checked and counted, not kept: the trace reads each thread's
    again when it is asked for (_JsonStreams), from the file opened here (kept
    open: a file removed after reading, like a job's joined JSON, still reads)."""
    raw_file = None
    try:
        raw_file = open(path, "rb")
        identity = _identity(os.fstat(raw_file.fileno()))
        stream = gzip.GzipFile(fileobj=raw_file, mode="rb") if formats.gzipped(path) \
            else raw_file
        with Progress(f"reading {path}", os.path.getsize(path)) as progress:
            reader = _LineReader(path)
            reader.read(stream, raw_file, progress)
        trace = reader.trace(_FileSource(path, raw_file, identity))
        raw_file = None                       # the trace's now
        return trace
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc})") from None
    finally:
        if raw_file is not None:
            raw_file.close()


def _identity(stat):
    """What tells a file from itself changed in place: its size and mtime."""
    return stat.st_size, stat.st_mtime_ns


class _FileSource:
    """The file a trace was read from, open, for reading it again: each reader
    has its own position (os.pread), so threads can be read at the same time."""

    def __init__(self, path, raw_file, identity):
        self.path, self.raw_file, self.identity = path, raw_file, identity

    def check(self):
        """_Changed when the file is no longer what the first read met."""
        if _identity(os.fstat(self.raw_file.fileno())) != self.identity:
            raise _Changed("its size or time differs")

    def open(self):
        """A new reader of the file's text (decompressed for a .gz) at its start."""
        if hasattr(os, "pread"):
            raw = _PositionedFile(self.raw_file.fileno())
        else:
            raw = open(self.path, "rb")       # no pread (Windows): the path again
        return gzip.GzipFile(fileobj=raw, mode="rb") if formats.gzipped(self.path) else raw

    def close(self):
        self.raw_file.close()


class _PositionedFile(io.RawIOBase):
    """A file descriptor read with os.pread at a position of this object's own."""

    def __init__(self, fd):
        super().__init__()
        self._fd, self._position = fd, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, buffer):
        data = os.pread(self._fd, len(buffer), self._position)
        buffer[:len(data)] = data
        self._position += len(data)
        return len(data)

    def seek(self, offset, whence=io.SEEK_SET):
        if whence == io.SEEK_CUR:
            offset += self._position
        elif whence == io.SEEK_END:
            offset += os.fstat(self._fd).st_size
        if offset < 0:
            raise OSError("negative seek position")
        self._position = offset
        return offset

    def tell(self):
        return self._position


class _LineReader:
    """Reads the events after the head: runs of call lines in C (pt_read_call_lines),
    each line C leaves here, with the checks of the whole-file path. The first
    read goes through the whole file; a replay (see replayer) reads one thread's
    calls again."""

    def __init__(self, path):
        self.path = path
        self.keys = _Keys()
        self.line_keys = ffi.gc(lib.pt_line_keys_new(), lib.pt_line_keys_free)
        if self.line_keys == ffi.NULL:
            raise MemoryError("out of memory while reading a trace")
        self.key_of_text = {}                 # (category, name, extra args) text -> key
        self.threads, self.marks, self.thread_of_tid = [], [], {}
        self.stats, self.digests = [], []     # per thread
        self.starts = []                      # per thread: (offset, event number) of its calls
        self.thread, self.pid, self.number, self.first_id = None, 0, -1, 0
        self.lanes = {}                       # pid -> process_name, process_sort_index
        self.ended = False                    # None after the last event, True after "]}"
        self.replay = False
        self.next_offset = 0                  # of the line after the one being read
        self.position = ffi.new("uint64_t *")

    def replayer(self):
        """A reader of one thread's calls again, with this one's keys and threads."""
        again = _LineReader.__new__(_LineReader)
        again.__dict__.update(self.__dict__)
        again.marks, again.lanes = [], {}
        again.position = ffi.new("uint64_t *")
        again.replay, again.ended = True, False
        return again

    def read(self, stream, raw_file, progress):
        path = self.path
        head = stream.readline().rstrip()
        if not (head.startswith(b"{") and head.endswith(b",")
                and stream.readline().rstrip() == _HEAD_END):
            raise _OtherLayout("the head is not on its own lines")
        try:
            self.other = json.loads(head[:-1] + b"}").get("otherData")
        except (ValueError, AttributeError):
            raise _OtherLayout("the head is not JSON on its own") from None
        _check_other(path, self.other)
        self.start_ns = _other_int(path, self.other, "start_monotonic_ns")
        done = [raw_file.tell()]

        def advance():
            progress.advance(raw_file.tell() - done[0])
            done[0] = raw_file.tell()

        for _ in self.scan(_Text(stream, stream.tell(), advance)):
            raise AssertionError("the first read keeps no slices")
        if not self.ended:
            raise TraceFormatError(f"{path}: not valid JSON (it ends before the closing ]}})")
        self.end_thread()
        self.keys.frozen = True

    def scan(self, text, want=None):
        """Reads the lines of text: to the end of the file, or until the current
        thread has taken want calls. Yields whenever its batch is full (the caller
        empties it)."""
        position = self.position
        while True:
            thread = self.thread
            if thread is not None:
                state = thread.state
                if want is not None and state.n >= want:
                    return
                if thread.batch is not None and state.count == state.cap:
                    yield
                    continue
                if thread.fast and self.ended is False and text.buffer is not None:
                    position[0] = text.start
                    taken = lib.pt_read_call_lines(self.line_keys, state, text.buffer,
                                                   len(text.text), position)
                    if taken:
                        self.number += taken
                        self.pid = state.pid
                        text.start = position[0]
                        continue
            newline = text.text.find(b"\n", text.start)
            if newline < 0:
                if text.more():
                    continue
                break
            line = text.text[text.start:newline]
            text.start = self.next_offset = newline + 1
            self.next_offset += text.offset
            self.line(line)
        pending = text.text[text.start:]
        text.start = len(text.text)
        if pending and want is None:
            self.line(pending)

    def line(self, line):
        path = self.path
        line = line.rstrip()
        if not line:
            return
        if self.ended:
            raise TraceFormatError(f"{path}: not valid JSON (text after the closing ]}})")
        if line == b"]}":
            if self.replay:
                raise _Changed("it ends before the calls of a thread")
            self.ended = True
            return
        if self.ended is None:
            raise TraceFormatError(f"{path}: not valid JSON (no comma after event "
                                   f"{self.number})")
        if line.endswith(b","):
            line = line[:-1]
        else:
            self.ended = None                 # the last event: "]}" must follow
        self.number += 1
        number, thread = self.number, self.thread
        match = _CALL_LINE.match(line)
        if (match is not None and thread is not None and match[2] == thread.tid_text
                and match[11] == thread.index_text):
            category, name, extra = match.group(3, 4, 12)
            found = self.key_of_text.get((category, name, extra))
            if found is None:
                found = _line_key(self.keys, category, name, extra)
                # (a replay meets no new text; the table C reads is shared)
                if found is not None and not self.replay:
                    self._new_line_key(line[match.start(3) - len(b'"cat":"'):match.end(4)],
                                       (category, name, extra), found)
            if found is not None:
                key, opened = found
                parent_id = match[10]
                start = self.start_ns + int(match[5] + match[6])
                thread.add(path, int(match[9]), None if parent_id == b"null" else int(parent_id),
                           key, self.flags_of(key) | opened, start,
                           start + int(match[7] + match[8]))
                self.pid = match[1]
                return
        # Not a call as we write them (or its name or args need a closer look):
        # parsed and checked like an event of the whole file.
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise TraceFormatError(f"{path}: event {number}: not valid JSON ({exc})") from None
        except RecursionError:
            raise TraceFormatError(f"{path}: event {number}: not valid JSON (nested too "
                                   "deeply)") from None
        if type(event) is not dict:
            raise TraceFormatError(f"{path}: event {number} is not an object")
        phase = event.get("ph")
        if phase == "M" and event.get("name") == "thread_name":
            if self.replay:
                raise _Changed("a thread starts among the calls of another")
            tid, name = _read_thread_name(path, number, event)
            self.end_thread()
            self.thread_of_tid[tid] = len(self.threads)
            self.thread = _LineThread(len(self.threads), tid, name, self.first_id,
                                      self.start_ns)
            self.thread.pid = event.get("pid")
            self.starts.append((self.next_offset, number))
        elif phase == "X":
            index, (call_id, parent_id, name, category, ts_ns, dur_ns, extra, opened) = \
                _read_call(path, number, event, self.thread_of_tid)
            if thread is None or index != thread.index:
                raise _OtherLayout(f"event {number} is not with its thread's calls")
            key = self.keys.key(name, category, extra)
            thread.add(path, call_id, parent_id, key, self.flags_of(key) | opened,
                       self.start_ns + ts_ns, self.start_ns + ts_ns + dur_ns)
            self.pid = event.get("pid")
            if type(self.pid) is not int:
                raise TraceFormatError(f"{path}: event {number}: pid must be an integer")
        elif phase in ("i", "C"):
            self.marks.append(_read_mark(path, number, event))
        elif phase == "M" and event.get("name") in ("process_name", "process_sort_index"):
            _read_lane(path, number, event, self.lanes)
        else:
            raise TraceFormatError(f"{path}: event {number}: unexpected phase {phase!r}")

    def flags_of(self, key):
        return lib.PT_SLICE_C if self.keys.kinds[key] == "c" else 0

    def _new_line_key(self, ident, text, found):
        """Tells C the function text of a key (found: the key and the flags its
        args add), so its next calls are read there."""
        self.key_of_text[text] = found
        key, opened = found
        extra = text[2]
        if len(ident) < 2 ** 32 and len(extra) < 2 ** 32:
            if lib.pt_line_keys_add(self.line_keys, ident, len(ident), extra, len(extra), key,
                                    self.flags_of(key) | opened) != lib.PT_OK:
                raise MemoryError("out of memory while reading a trace")

    def end_thread(self):
        thread = self.thread
        if thread is not None:
            from ..trace import ThreadInfo
            self.threads.append(ThreadInfo(thread.index, thread.tid, 0, thread.name, 0, 0,
                                           thread.pid))
            self.stats.append(thread.stats())
            self.digests.append(thread.state.digest)
            self.first_id += thread.state.n
            self.thread = None

    def trace(self, source):
        streams = _JsonStreams(self, source)
        return _chrome_trace(self.path, self.other, self.keys, self.threads, None, self.marks,
                             int(self.pid), self.lanes, streams=streams,
                             build_slices=streams.table)


class _JsonStreams:
    """The calls of a Chrome JSON read line by line, read again a thread at a
    time when an export or the summary asks for them (the trace's _streams):
    from the offset of the thread's calls, in batches of STREAM_BATCH_SLICES.
    Threads are asked for in order, so the file stays open from one thread to the
    next (a .gz is not decompressed again for each). A file that changed since
    the first read raises TraceFormatError."""

    def __init__(self, reader, source):
        self.stats = reader.stats
        self._reader = reader
        self._source = source
        self._first_ids = []
        first_id = 0
        for n, _, _ in self.stats:
            self._first_ids.append(first_id)
            first_id += n
        self._last_with_calls = max((i for i, (n, _, _) in enumerate(self.stats) if n),
                                    default=-1)
        self._text = [None]                   # a reader where the last thread ended
        weakref.finalize(self, _close_source, self._text, source)

    def slices(self, index):
        """Thread index's slices in start order: yields (pt_slice *, n, index of the
        first), each batch valid until the next is asked for."""
        n = self.stats[index][0]
        if not n:
            return
        reader = self._reader
        path = reader.path
        text, self._text[0] = self._text[0], None    # taken: back only if read through
        keep = False
        try:
            self._source.check()
            offset, number = reader.starts[index]
            if text is None:
                text = _Text(self._source.open(), offset)
            else:
                text.at(offset)
            again = reader.replayer()
            thread_info = reader.threads[index]
            thread = _LineThread(index, thread_info.native_id, thread_info.name,
                                 self._first_ids[index], reader.start_ns,
                                 min(n, STREAM_BATCH_SLICES))
            thread.state.limit = n
            again.thread, again.number = thread, number
            first = 0
            for _ in again.scan(text, want=n):
                count = thread.state.count
                yield thread.batch, count, first
                first += count
                thread.state.count = 0
            if thread.state.n != n or thread.state.digest != reader.digests[index]:
                raise _Changed(f"thread {index} has other calls")
            keep = index < self._last_with_calls
            if thread.state.count:
                yield thread.batch, thread.state.count, first
        except _Changed as exc:
            raise TraceFormatError(f"{path}: changed since it was read ({exc.args[0]})") \
                from None
        except (_OtherLayout, OverflowError):
            raise TraceFormatError(f"{path}: changed since it was read (thread {index} "
                                   f"has other calls)") from None
        except TraceFormatError as exc:       # what the first read found right
            raise TraceFormatError(f"{path}: changed since it was read ({exc})") from None
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"{path}: cannot read ({exc})") from None
        finally:
            if text is not None:
                if keep and self._text[0] is None:
                    self._text[0] = text
                else:
                    text.stream.close()

    def table(self):
        """The slice table (build_slices): each thread's batches copied into one array."""
        from .walk import table_from_streams
        return table_from_streams(self, f"{self._reader.path}: ")


def _close_source(holder, source):
    if holder[0] is not None:
        holder[0].stream.close()
        holder[0] = None
    source.close()


def _line_key(keys, category, name, extra):
    """(key, flags its args add) of a call's category, JSON name and extra args
    text (a comma, then members of the args object), or None when those args
    name a standard arg."""
    try:
        args = json.loads(b"{" + extra[1:] + b"}") if extra else None
        name = json.loads(name)
    except (ValueError, RecursionError):
        return None
    if args is not None and (type(args) is not dict or too_deep(args) or
                             any(arg in args for arg in _STANDARD_ARGS)):
        return None         # read by line(), which says what is wrong
    category = category.decode()
    opened = _take_open_at_start(category, args)
    return keys.key(name, category, args or None), opened


OPEN_AT_START = "open at start"     # the arg our exports mark such a frame with


def _take_open_at_start(category, args):
    """PT_SLICE_SEEDED when a call's args (a dict, or None) say it was running
    when the trace began (removed from args: a flag, not an arg of its function),
    else 0."""
    if category == "python_function" and args and args.get(OPEN_AT_START) is True:
        del args[OPEN_AT_START]
        return lib.PT_SLICE_SEEDED
    return 0


class _Keys:
    """The key table rebuilt from the calls: one key per name, category and args,
    as the tracer gives a record_function region with other args a key of its own."""

    def __init__(self):
        self.names, self.kinds, self.args = ["<unknown>"], ["python"], {}
        self._key_of = {}
        self.frozen = False                   # after the first read: no key is new

    def key(self, name, category, extra):
        identity = (name, category, json.dumps(extra, sort_keys=True) if extra else "")
        key = self._key_of.get(identity)
        if key is None:
            if self.frozen:
                raise _Changed("a call names a function the first read did not meet")
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


def _load_json(path):
    opener = gzip.open if formats.gzipped(path) else open
    try:
        with opener(path, "rb") as f:
            return json.loads(f.read())
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
            thread, call = _read_call(path, number, event, thread_of_tid)
            calls[thread].append(call)
            pid = event.get("pid")
            if type(pid) is not int:
                raise TraceFormatError(f"{path}: event {number}: pid must be an integer")
        elif phase == "M" and event.get("name") == "thread_name":
            tid, name = _read_thread_name(path, number, event)
            thread_of_tid[tid] = len(thread_meta)
            thread_meta.append((tid, name, event.get("pid")))
            calls.append([])
        elif phase in ("i", "C"):
            marks.append(_read_mark(path, number, event))
        elif phase == "M" and event.get("name") in ("process_name", "process_sort_index"):
            _read_lane(path, number, event, lanes)
        else:
            raise TraceFormatError(f"{path}: event {number}: unexpected phase {phase!r}")
    return thread_meta, calls, marks, pid, lanes


def _read_thread_name(path, number, event):
    """(tid, name) of a thread_name metadata event, checked."""
    tid = event.get("tid")
    args = event.get("args")
    name = args.get("name") if isinstance(args, dict) else None
    _expect(type(tid) is int and isinstance(name, str),
            f"{path}: event {number}: a thread_name needs an integer tid and a name")
    return tid, name


def _read_mark(path, number, event):
    name, ts, tid, args = event.get("name"), event.get("ts"), event.get("tid"), event.get("args")
    if args is None and event["ph"] == "i":
        args = {}           # an instant without args, as earlier exports wrote it
    _expect(isinstance(name, str) and _is_time(ts) and type(tid) is int
            and isinstance(args, dict),
            f"{path}: event {number}: an instant or counter needs a name, ts, tid and args")
    if too_deep(args):
        raise TraceFormatError(f"{path}: event {number}: args nest deeper than "
                               f"{MAX_ARGS_DEPTH} levels")
    if event["ph"] == "C":
        for value in args.values():
            if type(value) not in _NUMBER_TYPES:
                # a counter's values are numbers ("NaN" and the infinities as strings)
                args = {series: finite_number(v) for series, v in args.items()}
                _expect(None not in args.values(),
                        f"{path}: event {number}: a counter's values must be numbers")
                break
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
    if extra and too_deep(extra):
        raise TraceFormatError(f"{path}: event {number}: args nest deeper than "
                               f"{MAX_ARGS_DEPTH} levels")
    opened = _take_open_at_start(category, extra)
    return thread, (call_id, parent_id, name, category, round(ts * 1000), round(dur * 1000),
                    extra or None, opened)


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
