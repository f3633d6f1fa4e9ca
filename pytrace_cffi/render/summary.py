"""Where the time went: calls, total and self time per function, as rows or a table.

    from pytrace_cffi.summary import read_trace, summarize, format_summary
    print(format_summary(summarize(read_trace("trace.json"), sort="self")))

Total time counts a function's time once however deep it recurses: a call made
while the same function is already on the stack adds to its calls and its self
time, not to its total. Self time is a call's time minus its callees' time. A
frame already running when its process's trace began (seeded at start(), or a
forked child's frames continued from its parent: "open at start") adds its time
but is no call: it began before the trace (its parent counts it, when traced).

The summary streams: a trace read back (formats.read, readers/) hands each
thread's calls in batches, and the summary never builds the slice table.
"""
from collections import namedtuple

from .._core import ffi, lib
from .._progress import counted
from ..errors import TraceFormatError
from ..model.saved_format import SLICE_RECORD
from ..model.trace import is_task_lane, lanes_text

SummaryRow = namedtuple("SummaryRow", "name calls total_ns self_ns thread")
SummaryRow.__doc__ = """One function's line in a summary; thread is the thread's
name with per_thread=True, else None. Times in nanoseconds."""

SORT_KEYS = {
    "total": lambda row: (-row.total_ns, row.name),
    "self": lambda row: (-row.self_ns, row.name),
    "calls": lambda row: (-row.calls, row.name),
    "name": lambda row: (row.name,),
}


def slice_records(slices, count):
    """The first `count` slices of a cffi pt_slice array as tuples (start, end,
    key, flags, parent, tag, depth): far faster to loop over than cffi structs."""
    return SLICE_RECORD.iter_unpack(ffi.buffer(slices, count * SLICE_RECORD.size))


def summarize(trace, sort="total", limit=20, per_thread=False, per_process=False):
    """SummaryRows for the `limit` (None or 0: all, as `summary --limit 0`; else
    a positive int) top functions by `sort` (total, self, calls or name). A bad
    limit or sort raises (TypeError, ValueError) before any work. With
    per_thread, each thread gets its own rows, in
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
    limit = checked_limit(limit)
    summarizer = Summarizer(trace.names)
    tables = [] if per_thread or per_process else [(None, summarizer.new_table())]
    from ..model.walk import thread_batches
    for thread, batches in thread_batches(trace):
        if per_thread:
            tables.append((_thread_title(trace, thread), summarizer.new_table()))
        elif per_process:
            title = _process_title(trace, trace.thread_pid(thread))
            if not tables or tables[-1][0] != title:
                tables.append((title, summarizer.new_table()))
        summarizer.add_thread(thread, batches, tables[-1][1])
    return summarizer.rows(tables, sort, limit), summarizer.calls


def checked_limit(limit):
    """summarize's limit as rows.__getitem__ takes it: None or 0 (all rows, as the
    command line's --limit 0) -> None, a positive int as it is. Anything else
    raises: TypeError for what is not an int (a bool, a float, a str), ValueError
    for a negative one."""
    if limit is None:
        return None
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise TypeError(f"limit must be an int (0 or None: all rows), not "
                        f"{type(limit).__name__} {limit!r}")
    if limit < 0:
        raise ValueError(f"limit must be 0 or more (0 or None: all rows), not {limit}")
    return limit or None


def check_feed(status, thread, doing):
    """A batch fed to a C walker of the slices (pt_summarizer_feed*, pt_stacks_feed):
    MemoryError when it ran out of memory, TraceFormatError when a call's key or
    parent makes no sense (a damaged trace)."""
    if status == lib.PT_ERR_NOMEM:
        raise MemoryError(f"out of memory while {doing}")
    if status != lib.PT_OK:
        raise TraceFormatError(f"thread {thread.index}: a call's key is out of range "
                               f"or its parent is not an enclosing call")


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
        check_feed(status, thread, "summarizing the trace")

    def add_windows(self, thread, slices, n, first_index, bounds, groups, n_windows,
                    self_table):
        """One batch of thread's slices: only their self time inside the windows
        (bounds: int64_t[2 * n_windows], sorted and disjoint), added to self_table
        (int64_t, n_names per group; groups: uint32_t[n_windows])."""
        status = lib.pt_summarizer_feed_windows(self._c, slices, n, first_index, bounds,
                                                groups, n_windows, self_table)
        check_feed(status, thread, "summarizing the trace")

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
    streams = trace._streams          # a model.streams.CallStreams, or None
    counted = streams.open_at_start if streams is not None else None
    if counted is not None and not trace.slices_built():
        return len(trace) - sum(counted)
    from ..model.walk import thread_batches
    return len(trace) - sum(lib.pt_open_at_start(slices, n)
                            for _, batches in thread_batches(trace) for slices, n, _ in batches)


ProcessTotal = namedtuple("ProcessTotal",
                          "pid label calls threads start_ns end_ns open_at_start task_lanes",
                          defaults=(0, 0))
ProcessTotal.__doc__ = """One process of a trace of several processes: its calls (those
that began in its trace), its threads, the span of its calls (None, None when it
has none), and its frames already running when its trace began (a forked child's
continued from its parent: shown, not counted); task_lanes: how many of its threads
are asyncio tasks' lanes (log_async)."""


def process_totals(trace):
    """A ProcessTotal per process of a trace of several processes, in lane order
    (empty for a trace of one process)."""
    if not trace.processes:
        return []
    from ..model.walk import thread_batches
    found = {pid: [0, 0, None, None, 0, 0] for pid in trace.processes}
    streams = trace._streams
    spans = streams.spans if streams is not None else None
    if spans is not None and not trace.slices_built():
        # the streams' scan counted them: no call is read again
        for thread, (n, _, _), opened, span in zip(trace.threads, streams.stats,
                                                   streams.open_at_start, spans):
            entry = found.setdefault(trace.thread_pid(thread), [0, 0, None, None, 0, 0])
            entry[1] += 1
            entry[5] += is_task_lane(thread)
            entry[0] += n - opened
            entry[4] += opened
            if span is not None:
                first, last = span
                entry[2] = first if entry[2] is None else min(entry[2], first)
                entry[3] = last if entry[3] is None else max(entry[3], last)
        return _process_totals(trace, found)
    for thread, batches in thread_batches(trace):
        entry = found.setdefault(trace.thread_pid(thread), [0, 0, None, None, 0, 0])
        entry[1] += 1
        entry[5] += is_task_lane(thread)
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
    return _process_totals(trace, found)


def _process_totals(trace, found):
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
                     f"{counted(total.calls, 'call')} on {lanes_text(total.threads, total.task_lanes)}"
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
