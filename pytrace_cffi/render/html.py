"""Self-contained HTML renderer: one file with the data, CSS and JavaScript inline.

The page draws one lane per thread on a <canvas>, calls stacked by depth, with
wheel zoom, drag to pan, hover names, details on click and the summary table
(top functions by total and self time), and for a job whose ranks mark their
steps, the steps table of `summary --steps` (render/steps.py). Nothing is
fetched from the network.

The data is embedded as JSON: a names table, and per thread one flat array of
four integers per call (start as nanoseconds after the previous call's start,
duration ns, key, depth); parents and ids are rebuilt in the page, so 100k calls
stay a few megabytes. The page draws only calls in view, and of those narrower
than a pixel only one per pixel, so zoomed out it costs as much as zoomed in.

Above CALL_BUDGET calls the page shows a reduced timeline, so it stays a few
megabytes and quick to open for any trace: the calls at least a pixel wide at full
zoom-out (of a REDUCED_WIDTH_PX wide view) and the whole top TOP_LEVELS levels,
chosen in C; the threshold rises until the kept calls fit the budget. The page
streams from the trace's calls (walk.thread_batches) in two passes and never
holds a slice table: the first sums the summary and counts, per candidate
threshold, the calls it would keep (pt_reducer_count), the second keeps the chosen
ones (pt_reducer_keep); when the first candidate's calls fit KEPT_BUDGET budgets,
the first pass keeps them and the second is not made (_Kept). Then each call also carries how many calls were left out before it (so
ids stay those of the full trace) and its self time over all its callees. The page
says what was left out and how to see everything; the summary table always counts
every call.

Under the timeline (imports folded in it by default, page/views.js), the details
and the top-functions table (on the first screen), then a flame graph of the chosen
thread or process, from the calls
aggregated per distinct stack in the survey's own pass (bounded: page_stacks.py);
the summary table can fold the import machinery into one "imports" row; a job
with ranks (torchrun's) opens on them, the launcher's processes folded (job_order).
A pytest run gets a Tests table and pluggy's frames hidden (page_tests.py: the tests
found in the survey's pass, by name).

The page's skeleton, stylesheet and scripts are files in render/page/ (package
data, read with importlib.resources), inlined into each page.
"""
import functools
import html
import os
import re
from collections import namedtuple
from importlib import resources

from .._core import ffi, lib
from .._files import replaced_atomically
from .._jsontext import dumps_utf8, utf8_text
from .._progress import Progress
from ..errors import TraceError, TraceFormatError
from .page_stacks import (FLAME_NODE_BUDGET, StackShape, flame_data, import_frames,
                          import_rows)
from .page_tests import Tests
from .stacks import StackAggregator
from ..model.walk import thread_batches
from .steps import steps_data, steps_table
from ..model.saved_format import SLICE_RECORD
from .summary import (SORT_KEYS, Summarizer, SummaryRow, _process_title, process_totals,
                      slice_records)

# Functions in the page's summary: the top ones by each of these, merged.
SUMMARY_TOP = 100
SUMMARY_SORTS = ("total", "self", "calls")
CALLS_PER_CHUNK = 65536
TEXT_CALLS_PER_PIECE = 8192  # the kept calls written at a time (C's buffer: 128 bytes a call)
KIND_LETTERS = {"python": "p", "c": "c", "annotation": "a"}

CALL_BUDGET = 200_000        # more calls than this: the page shows a reduced timeline
REDUCED_WIDTH_PX = 4000      # a call this fraction of the trace's span is a pixel wide
TOP_LEVELS = 2               # depths always kept whole, while they fit the budget
KEPT_BUDGET = 2              # the survey keeps up to this many times the budget (_Kept)

REDUCED_RECORD_SIZE = ffi.sizeof("pt_reduced")

Reduction = namedtuple("Reduction", "min_ns top_levels shown calls budget")
Reduction.__doc__ = """What a reduced page keeps: calls lasting at least min_ns or at
a depth below top_levels (with their parents); shown of calls in all."""


def write_html(trace, path, call_budget=CALL_BUDGET):
    """Writes trace to path as one self-contained HTML page.

    Above call_budget calls the timeline is reduced (see the module's doc); the
    summary table always covers every call. Writes to a temporary file beside path
    and renames it, so a failed export never leaves a truncated page."""
    path = os.fspath(path)
    if type(call_budget) is not int or call_budget < 1:
        raise ValueError(f"call_budget must be a positive integer, not {call_budget!r}")
    title = os.path.basename(path)
    survey = _survey(trace, call_budget)
    with Progress(f"writing {path}", len(trace)) as progress, \
            replaced_atomically(path, lambda tmp: open(tmp, "w", encoding="utf-8")) as out:
        for chunk in _chunks(trace, title, survey, progress):
            out.write(chunk)


def _check(status):
    if status == lib.PT_ERR_NOMEM:
        raise MemoryError("out of memory while reducing the trace for the HTML page")
    if status != lib.PT_OK:
        raise TraceFormatError("a call's parent is not an enclosing call")


Survey = namedtuple("Survey", "reduction rows process_rows calls open_at_start stacks kept "
                               "tests")
Survey.__doc__ = """calls: as the summary counts them (frames open at start are none);
open_at_start: per thread, how many of its first calls were running when tracing
began (seeded before any call, they come first); stacks: the calls aggregated
per distinct stack (a stacks.StackAggregator), for the flame graph and the
imports row; kept: the page's arrays taken in the same pass (a _Kept) or None;
tests: a pytest run's tests (page_tests.Tests)."""


def _survey(trace, call_budget):
    """One pass over every call, streamed (walk.thread_batches: no slice table
    for a trace that streams): the summary rows (all threads; per process for a
    trace of several), the calls per distinct stack and, above call_budget calls,
    the Reduction.

    The reduction's rule keeps a call when it and all its ancestors last at least
    min_ns or sit above depth top_levels. Its candidates are known up front (the
    first min_ns doubled k times, top_levels TOP_LEVELS down to 0), so one pass
    counts, per top_levels, the calls per doubling of their path's shortest
    duration (pt_reducer_count) and the threshold is chosen from the counts as a
    pass per candidate would choose it."""
    summarizer = Summarizer(trace.names)
    table = summarizer.new_table()
    per_process = None
    if trace.processes:
        per_process = Summarizer(trace.names)
        process_tables = []
    calls = len(trace)
    counter = buckets = None
    if calls > call_budget:
        span = max(1, trace.stop_ns - trace.start_ns)
        base = max(1, -(-span // REDUCED_WIDTH_PX))
        counter = ffi.gc(lib.pt_reducer_new(base, TOP_LEVELS), lib.pt_reducer_free)
        if counter == ffi.NULL:
            raise MemoryError("out of memory while reducing the trace for the HTML page")
        buckets = ffi.new("uint64_t[]", (TOP_LEVELS + 1) * lib.PT_REDUCE_BUCKETS)
    open_at_start = []
    stacks = StackAggregator(trace)
    kept = _Kept(trace, calls, call_budget, counter)
    tests = Tests(trace.names, trace.key_kinds, trace.start_ns)
    for thread, batches in thread_batches(trace):
        stacks.begin_thread()
        kept.begin_thread()
        tests.begin_thread()
        if per_process is not None:
            title = _process_title(trace, trace.thread_pid(thread))
            if not process_tables or process_tables[-1][0] != title:
                process_tables.append((title, per_process.new_table()))
        open_at_start.append(0)
        for slices, n, first_index in batches:
            if open_at_start[-1] == first_index:    # every slice so far: the run goes on
                open_at_start[-1] += _leading_open_at_start(slices, n)
            summarizer.add(thread, slices, n, first_index, table)
            stacks.add(thread, slices, n, first_index)
            if per_process is not None:
                per_process.add(thread, slices, n, first_index, process_tables[-1][1])
            if counter is not None:
                _check(lib.pt_reducer_count(counter, slices, n, first_index, buckets))
            kept.add(slices, n, first_index, buckets)
            tests.add(slices, n, first_index)
        kept.end_thread()
        tests.end_thread()
        summarizer.end_thread()
        stacks.end_thread()
        if per_process is not None:
            per_process.end_thread()
        if counter is not None:
            lib.pt_reducer_end_thread(counter)
    rows = summarizer.rows([(None, table)], "total", None)
    process_rows = None
    if per_process is not None:
        process_rows = {}
        for row in per_process.rows(process_tables, "total", None):
            process_rows.setdefault(row.thread, []).append(row._replace(thread=None))
    reduction = None
    if counter is not None:
        every = lib.PT_REDUCE_BUCKETS
        top_levels, doublings = TOP_LEVELS, 0
        while True:
            # kept at base << doublings: buckets 1 + doublings and up
            first = min(1 + doublings, every - 1)
            shown = sum(buckets[top_levels * every + b] for b in range(first, every))
            if shown <= call_budget:
                reduction = Reduction(base << doublings, top_levels, shown, calls, call_budget)
                break
            if top_levels:
                top_levels -= 1
            else:
                doublings += 1
    return Survey(reduction, rows, process_rows, summarizer.calls, open_at_start, stacks,
                  kept.result(), tests)


class _Kept:
    """What the page's arrays need, taken in the survey's pass when the trace
    streams (so the arrays do not walk every call again: a trace of a thousand
    task lanes read back from a .pftrace parses each lane's packets per walk):
    every slice of a page that is not reduced, or the calls a reduced page keeps
    at its first candidate (pt_reducer_keep at the first min_ns and TOP_LEVELS),
    which hold those of every later candidate (_reduced_text picks the chosen
    one's). Bounded: as raw records, at most KEPT_BUDGET times call_budget of
    them (40 bytes each); past that the arrays walk again, as without it."""

    def __init__(self, trace, calls, call_budget, counter):
        self.on = (trace._streams is not None and not trace.slices_built())
        self.budget, self.counter, self.keeper = call_budget, counter, None
        self.threads = []           # per thread: (records as bytes, its slices)
        if self.on and counter is not None:
            span = max(1, trace.stop_ns - trace.start_ns)
            self.keeper = ffi.gc(lib.pt_reducer_new(max(1, -(-span // REDUCED_WIDTH_PX)),
                                                    TOP_LEVELS), lib.pt_reducer_free)
            if self.keeper == ffi.NULL:
                raise MemoryError("out of memory while reducing the trace for the HTML page")
            self.out = ffi.new("pt_reduced **")
        self.on = self.on and calls > 0

    def begin_thread(self):
        if self.on:
            self.parts, self.slices = [], 0

    def add(self, slices, n, first_index, buckets):
        if not self.on:
            return
        self.slices = first_index + n
        if self.keeper is None:
            self.parts.append(bytes(ffi.buffer(slices, n * SLICE_RECORD.size)))
            return
        _check(lib.pt_reducer_keep(self.keeper, slices, n, first_index))
        every = lib.PT_REDUCE_BUCKETS   # kept at the first candidate so far, all threads
        if sum(ffi.unpack(buckets + TOP_LEVELS * every + 1, every - 1)) > \
                KEPT_BUDGET * self.budget:
            self.drop()

    def end_thread(self):
        if not self.on:
            return
        if self.keeper is not None:
            lib.pt_reducer_end_thread(self.keeper)
            count = lib.pt_reducer_take(self.keeper, self.out)
            self.parts = [bytes(ffi.buffer(self.out[0], count * REDUCED_RECORD_SIZE))]
        self.threads.append((b"".join(self.parts), self.slices))

    def drop(self):
        self.on, self.keeper, self.threads = False, None, None

    def result(self):
        return self.threads if self.on else None


def _leading_open_at_start(slices, n):
    """How many of a thread's first slices were running when tracing began."""
    count = 0
    while count < n and slices[count].flags & lib.PT_SLICE_SEEDED:
        count += 1
    return count


def choose_reduction(trace, call_budget=CALL_BUDGET):
    """The Reduction for trace's page, or None when every call fits call_budget.

    Starts from a pixel of a REDUCED_WIDTH_PX wide view of the whole trace and
    TOP_LEVELS whole levels; while more calls than the budget remain, gives up the
    top levels one by one, then doubles the shortest duration kept."""
    return _survey(trace, call_budget).reduction


def _script_json(data):
    """JSON that is safe inside a <script> element: "<" only occurs in strings in
    JSON, and written as \\u003c it can never close the element or open a comment.
    No bare NaN (JSON.parse would refuse the page's data), no lone surrogate (see
    _jsontext)."""
    return dumps_utf8(data, separators=(",", ":")).replace("<", "\\u003c")


def _summary_rows(rows, folded_names=frozenset()):
    """The page's rows: the top ones by each sort, and the top ones by each sort
    among those not in folded_names (so the table stays full with them folded:
    the import machinery's, pluggy's in a pytest run)."""
    chosen = {}
    for candidates in (rows, [row for row in rows if row.name not in folded_names]):
        for sort in SUMMARY_SORTS:
            for row in sorted(candidates, key=SORT_KEYS[sort])[:SUMMARY_TOP]:
                chosen[row.name] = [row.name, row.calls, row.total_ns, row.self_ns]
    return {"functions": len(rows), "rows": list(chosen.values())}


_RANK_LABEL = re.compile(r"rank (\d+)")


def job_order(trace, totals):
    """(totals reordered, the pids that start folded, pid -> rank) for a job's
    page (totals: process_totals). When some processes have a rank (torchrun's
    workers), each ranked process comes first by rank, followed by its own
    children (DataLoader workers); every other process (the launcher: torchrun
    itself, its elastic agent) comes after them, folded. Otherwise the order is
    left as it is."""
    facts = trace.processes or {}
    rank = {}
    for pid, fact in facts.items():
        # a .pftrace keeps the label only: "rank N" is the label of a rank's process
        found = _RANK_LABEL.fullmatch(str(fact.get("label")))
        if type(fact.get("rank")) is int or found:
            rank[pid] = fact["rank"] if type(fact.get("rank")) is int else int(found.group(1))
    if not rank:
        return list(totals), set(), rank

    def ranked_ancestor(pid):
        seen = set()
        while pid is not None and pid not in seen:
            if pid in rank:
                return pid
            seen.add(pid)
            pid = (facts.get(pid) or {}).get("ppid")
        return None
    position = {total.pid: index for index, total in enumerate(totals)}
    under = {total.pid: ranked_ancestor(total.pid) for total in totals}

    def place(total):
        top = under[total.pid]
        if top is None:
            return (1, 0, 0, False, position[total.pid])
        return (0, rank[top], position.get(top, -1), total.pid != top, position[total.pid])
    return (sorted(totals, key=place), {pid for pid, top in under.items() if top is None},
            rank)


def _stack_meta(trace, survey, meta):
    """meta's flame graphs and imports rows (render/page_stacks)."""
    shape = StackShape(survey.stacks)
    meta["flame"] = flame_data(shape, FLAME_NODE_BUDGET)
    group = import_frames(shape)
    names = {shape.frames.names[frame] for frame in group}
    per_thread = import_rows(shape, group)
    meta["imports"] = None
    if any(row[0] or row[1] for row in per_thread):
        meta["imports"] = {"keys": [key for key, name in enumerate(trace.names) if name in names],
                           "row": [sum(column) for column in zip(*per_thread)]}
    return names, per_thread


def _meta(trace, title, survey):
    reduction = survey.reduction
    meta = {
        "title": title,
        "names": trace.names,
        "kinds": "".join(KIND_LETTERS[kind] for kind in trace.key_kinds),
        "key_args": {str(key): args for key, args in trace.key_args.items()},
        "threads": [{"index": t.index, "name": t.name, "tid": t.native_id or t.ident,
                     "calls": n, "open_at_start": survey.open_at_start[number]}
                    for number, (t, n, _, _) in enumerate(trace.thread_counts())],
        "calls": survey.calls,          # shown; the lanes' "calls" are their slices
        "start_ns": trace.start_ns,
        "stop_ns": trace.stop_ns,
        "pid": trace.pid,
        "python": trace.python_version,
        "backend": trace.backend,
        "dropped_events": trace.dropped_events,
        "reduced": None if reduction is None else reduction._asdict(),
    }
    import_names, import_per_thread = _stack_meta(trace, survey, meta)
    meta["tests"] = survey.tests.meta(trace.names)
    if meta["tests"] is not None:   # the table stays full with pluggy's rows hidden too
        import_names = import_names | {trace.names[key] for key in meta["tests"]["pluggy"]}
    meta["summary"] = _summary_rows(survey.rows, import_names)
    if trace.processes:
        # A trace of several processes: lanes grouped by process, each group headed
        # by its label (threads come process by process, in lane order; the page
        # lays the groups out in the order of meta["processes"]).
        process_imports = {}
        for entry, thread, row in zip(meta["threads"], trace.threads, import_per_thread):
            entry["pid"] = trace.thread_pid(thread)
            summed = process_imports.setdefault(entry["pid"], [0, 0, 0])
            for column, value in enumerate(row):
                summed[column] += value
        ordered, folded, ranks = job_order(trace, process_totals(trace))
        # The summary table can show one process's functions too.
        meta["processes"] = [{"pid": t.pid, "label": t.label, "calls": t.calls,
                              "threads": t.threads, "shown": trace.process_id_text(t.pid),
                              "rank": ranks.get(t.pid),
                              "folded": t.pid in folded,
                              "imports": process_imports.get(t.pid, [0, 0, 0]),
                              "summary": _summary_rows(survey.process_rows.get(
                                  _process_title(trace, t.pid), []), import_names)}
                             for t in ordered]
        meta["ranks"] = None
        if ranks:       # the table opens on the ranks' processes (with their children)
            chosen = [t.pid for t in ordered if t.pid not in folded]
            meta["ranks"] = {
                "processes": len(chosen),
                "imports": [sum(column) for column in zip(
                    *(process_imports.get(pid, [0, 0, 0]) for pid in chosen))],
                "summary": _summary_rows(_summed_rows(
                    survey.process_rows.get(_process_title(trace, pid), []) for pid in chosen),
                    import_names)}
    # The steps of several ranks (render/steps.py): only a trace with steps walks more.
    steps = steps_data(steps_table(trace))
    if steps is not None:
        meta["steps"] = steps
    return meta


def _summed_rows(tables):
    """SummaryRows of several processes as one: per name, the sums (total counts
    recursion once per thread, as the whole trace's rows do)."""
    sums = {}
    for rows in tables:
        for row in rows:
            found = sums.setdefault(row.name, [0, 0, 0])
            found[0] += row.calls
            found[1] += row.total_ns
            found[2] += row.self_ns
    return [SummaryRow(name, calls, total_ns, self_ns, None)
            for name, (calls, total_ns, self_ns) in sums.items()]


def _slice_arrays(trace, progress, kept=None):
    """The per-thread flat arrays, as a JSON array of arrays, in pieces (from
    kept, the survey's copy of every slice, when it took one)."""
    if kept is not None:
        yield "["
        for number, (records, count) in enumerate(kept):
            yield "[" if number == 0 else ",["
            previous_start, parts = trace.start_ns, []
            for start, end, key, _flags, _parent, _tag, depth in SLICE_RECORD.iter_unpack(
                    records):
                parts.append(f"{start - previous_start},{end - start},{key},{depth}")
                previous_start = start
            yield ",".join(parts)
            progress.advance(count)
            yield "]"
        yield "]"
        return
    yield "["
    for number, (_, batches) in enumerate(thread_batches(trace)):
        yield "[" if number == 0 else ",["
        previous_start = trace.start_ns
        parts = []
        separator = ""
        for slices, count, _ in batches:
            for start, end, key, _flags, _parent, _tag, depth in slice_records(slices, count):
                parts.append(f"{start - previous_start},{end - start},{key},{depth}")
                previous_start = start
                if len(parts) == CALLS_PER_CHUNK:
                    yield separator + ",".join(parts)
                    progress.advance(len(parts))
                    parts, separator = [], ","
        if parts:
            yield separator + ",".join(parts)
            progress.advance(len(parts))
        yield "]"
    yield "]"


def _reduced_arrays(trace, reduction, progress, kept=None):
    """The per-thread flat arrays of a reduced page: per kept call its start after
    the previous kept call's, duration, key, depth, the number of calls left out
    since the previous kept one, and its self time over all its callees. Streamed:
    a reducer keeps each thread's chosen calls (pt_reducer_keep) as its slices
    go by, so only the kept calls are ever held; or from kept, the survey's
    (_Kept), when it took them."""
    shown = 0
    if kept is not None:
        yield "["
        for number, (records, count) in enumerate(kept):
            text, taken = _reduced_text(records, len(records) // REDUCED_RECORD_SIZE,
                                        trace.start_ns, reduction)
            yield ("[" if number == 0 else ",[") + text + "]"
            shown += taken
            progress.advance(count)
        yield "]"
        if shown != reduction.shown:
            raise TraceError(f"the HTML page kept {shown} calls where its survey counted "
                             f"{reduction.shown}")
        return
    reducer = ffi.gc(lib.pt_reducer_new(reduction.min_ns, reduction.top_levels),
                     lib.pt_reducer_free)
    if reducer == ffi.NULL:
        raise MemoryError("out of memory while reducing the trace for the HTML page")
    kept = ffi.new("pt_reduced **")
    yield "["
    for number, (_, batches) in enumerate(thread_batches(trace)):
        yield "[" if number == 0 else ",["
        n = 0
        for slices, count, first_index in batches:
            _check(lib.pt_reducer_keep(reducer, slices, count, first_index))
            n = first_index + count
        lib.pt_reducer_end_thread(reducer)
        count = lib.pt_reducer_take(reducer, kept)
        shown += count
        yield _reduced_text(kept[0], count, trace.start_ns)[0]
        progress.advance(n)
        yield "]"
    yield "]"
    if shown != reduction.shown:
        raise TraceError(f"the HTML page kept {shown} calls where its survey counted "
                         f"{reduction.shown}")


def _reduced_text(kept, count, start_ns, reduction=None):
    """(the page's numbers, how many calls) of a thread's kept calls (count
    pt_reduced from kept, or their bytes), written in C (pt_reduced_text_write).
    With reduction, only the calls it keeps (kept: a superset that holds each
    one's parent): at a depth under its top_levels, or lasting min_ns or more
    under a parent it keeps, as pt_reducer_keep keeps them."""
    if count == 0:
        return "", 0
    if isinstance(kept, bytes):
        kept = ffi.from_buffer("pt_reduced[]", kept)
    if reduction is None:
        text = lib.pt_reduced_text_new(start_ns, 0, 0, 0)
    else:
        text = lib.pt_reduced_text_new(start_ns, 1, reduction.min_ns, reduction.top_levels)
    if text == ffi.NULL:
        raise MemoryError("out of memory while writing the HTML page")
    text = ffi.gc(text, lib.pt_reduced_text_free)
    out = ffi.new("char[]", min(count, TEXT_CALLS_PER_PIECE) * lib.PT_REDUCED_TEXT_MAX)
    position, written = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    pieces = []
    while position[0] < count:
        written[0] = 0
        status = lib.pt_reduced_text_write(text, kept, count, position, out, len(out), written)
        if status == lib.PT_ERR_NOMEM:
            raise MemoryError("out of memory while writing the HTML page")
        if status != lib.PT_OK:
            raise TraceError("the HTML page's kept calls lack a parent")
        pieces.append(ffi.unpack(out, written[0]).decode("ascii"))
    return "".join(pieces), lib.pt_reduced_text_taken(text)


def _chunks(trace, title, survey, progress):
    reduction = survey.reduction
    head, tail = _page_template()
    yield head.replace("$TITLE", html.escape(utf8_text(f"{title} - pytrace_cffi")))
    meta = _meta(trace, title, survey)
    yield f'<script type="application/json" id="pt-meta">{_script_json(meta)}'
    yield '</script>\n<script type="application/json" id="pt-slices">'
    if reduction is None:
        yield from _slice_arrays(trace, progress, survey.kept)
    else:
        yield from _reduced_arrays(trace, reduction, progress, survey.kept)
    yield "</script>" + tail


# The page's own files, package data beside this module (render/page/, shipped by
# pyproject.toml's package-data and MANIFEST.in): the skeleton with its
# placeholders, the stylesheet and the scripts (the flame graph's, which defines
# ptFlameGraph, the views', which defines ptViews and ptTestsTable, then the
# page's, which calls them), inlined so the page stays one file.
# Files, not Python strings, so tests can parse them (tests/test_html_page.py).
PAGE_DIRECTORY = "page"
PAGE_SKELETON, PAGE_STYLE, PAGE_SCRIPT = "page.html", "page.css", "page.js"
PAGE_FLAME_SCRIPT = "flame.js"
PAGE_VIEWS_SCRIPT = "views.js"


def _page_file(name):
    """The text of one of the page's files, read through importlib.resources, so
    it is found in a wheel, a zip, an editable install or a vendored copy."""
    try:
        return resources.files(__package__).joinpath(PAGE_DIRECTORY).joinpath(
            name).read_text(encoding="utf-8")
    except (OSError, KeyError) as exc:      # KeyError: a zip without it (3.9)
        raise FileNotFoundError(
            f"the HTML page's {PAGE_DIRECTORY}/{name} is missing from {__package__} "
            f"({exc}): the installation is incomplete, reinstall pytrace_cffi") from None


@functools.lru_cache(maxsize=None)
def _page_template():
    """(head, tail) of every page: the skeleton split where the data goes, the
    stylesheet in the head, the scripts in the tail; the head still holds $TITLE."""
    skeleton = _page_file(PAGE_SKELETON)
    for placeholder in ("$TITLE", "$STYLE", "$DATA", "$SCRIPT"):
        if skeleton.count(placeholder) != 1:
            raise ValueError(f"{PAGE_DIRECTORY}/{PAGE_SKELETON} must hold {placeholder} "
                             f"once, not {skeleton.count(placeholder)} times")
    head, tail = skeleton.split("$DATA")
    if "$STYLE" not in head or "$SCRIPT" not in tail:
        raise ValueError(f"{PAGE_DIRECTORY}/{PAGE_SKELETON}: $STYLE goes before $DATA, "
                         "$SCRIPT after it")
    return (head.replace("$STYLE", _page_file(PAGE_STYLE)),
            tail.replace("$SCRIPT", _page_file(PAGE_FLAME_SCRIPT) + _page_file(PAGE_VIEWS_SCRIPT)
                         + _page_file(PAGE_SCRIPT)))
