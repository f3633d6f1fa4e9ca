"""Steps and stragglers: per process, the steps of its loop; per step, the slowest
rank; and where the slowest rank's time went that the median rank's did not.

Where steps end, per process, by the first of these rules its trace holds:

1. "step() calls": the instants pytrace_cffi.step() leaves while tracing
   (annotations.STEP_MARK);
2. "optimizer steps": the end of each training step of torch's optimizers, the
   calls named "Optimizer.step#<Class>.step" (_torch.py; or torch's regions of
   that name); of the first class seen only, and only the outermost (a step
   inside another of the same name, such as our call inside torch's region, is
   the same step), so two optimizers of different classes count one step, two
   of the same class two;
3. "ProfilerStep regions": the end of each record_function region named
   "ProfilerStep#N" (torch.profiler's prof.step()).

The thread holding most of them is the process's step thread. Step i spans from
the end of step i-1 to its own end; step 1 from the step thread's first recorded
call (its start-up included) for rules 1 and 2, from the first region's start for
rule 3. Steps are matched across processes by their order (the i-th of each).

The table's columns are the processes labelled "rank N", by rank; a trace
without ranks gets a column per process with steps. For each step with two
ranks or more, its slowest rank (longest step) is compared with its median rank
(the lower median by duration): the self time of each function on the two step
threads within that step, clipped to it (c_src/pt_summary.c's windowed
summarizer), the slowest's less the median's. Summed over every step, the
functions whose difference is largest either way come first: what the
stragglers did that the others did not.

Finding the steps walks only the step threads' calls (and, for rules 2 and 3,
every thread of a process without step() instants, when the trace names such
calls at all); comparing walks each compared rank's step thread once more.
"""
import re
from collections import Counter, defaultdict, namedtuple

from .._core import ffi
from .._progress import counted
from ..annotations import STEP_MARK
from .stragglers import find_stragglers, scan_calls
from .summary import Summarizer
from ..model.walk import batches

RULES = {"marks": "step() calls", "optimizer": "optimizer steps",
         "profiler": "ProfilerStep regions"}
OPTIMIZER_STEP_NAME = re.compile(r"Optimizer\.step#.+\.step")      # _torch.py's names
PROFILER_STEP_NAME = re.compile(r"ProfilerStep#\d+")
RANK_LABEL = re.compile(r"rank (\d+)")
TOP_DIFFERENCES = 10

ProcessSteps = namedtuple("ProcessSteps", "pid label rank rule thread windows")
ProcessSteps.__doc__ = """One process's steps: rule (a RULES key), the index of its
step thread, and windows, step i's (start_ns, end_ns) at index i - 1."""
StepRow = namedtuple("StepRow", "step durations slowest median")
StepRow.__doc__ = """A step: durations per column (ns, None where a process has no
such step), the slowest column and the median column (None with under two)."""
Difference = namedtuple("Difference", "name slowest_ns median_ns")
StepsTable = namedtuple("StepsTable", "columns rows differences compared stragglers")
StepsTable.__doc__ = """columns: ProcessSteps, one per column; rows: StepRows;
differences: the top Differences by size, over the `compared` steps that had a
median rank; stragglers: the ranks' time outside collectives and the straggler's
functions (stragglers.Stragglers; None with under two columns)."""


def _processes(trace):
    """pid -> (label, rank or None, thread indices), in lane order."""
    found = {}
    facts = trace.processes or {trace.pid: {"label": trace.label or f"pid {trace.pid}"}}
    for pid, entry in facts.items():
        label = entry.get("label") or f"pid {pid}"
        match = RANK_LABEL.fullmatch(label)
        found[pid] = (label, int(match.group(1)) if match else None, [])
    for thread in trace.threads:
        pid = trace.thread_pid(thread)
        if pid not in found:
            found[pid] = (f"pid {pid}", None, [])
        found[pid][2].append(thread.index)
    return found


def _step_keys(trace):
    """(optimizer step keys, ProfilerStep keys) of the trace's names."""
    optimizer, profiler = set(), set()
    for key, (name, kind) in enumerate(zip(trace.names, trace.key_kinds)):
        if OPTIMIZER_STEP_NAME.fullmatch(name):     # our call, or torch's region
            optimizer.add(key)
        elif kind == "annotation" and PROFILER_STEP_NAME.fullmatch(name):
            profiler.add(key)
    return optimizer, profiler


def _ends_to_windows(first_start, ends):
    windows, start = [], first_start
    for end in ends:
        start = min(start, end)
        windows.append((start, end))
        start = end
    return windows


def find_steps(trace):
    """A ProcessSteps per process whose trace holds steps (see the module's doc),
    in lane order."""
    processes = _processes(trace)
    thread_of_tid = {}
    for thread in trace.threads:
        thread_of_tid.setdefault(thread.native_id, thread.index)
    marks = defaultdict(list)           # thread index -> ns
    for mark in trace.marks:
        if mark.kind == "i" and mark.name == STEP_MARK and mark.thread in thread_of_tid:
            marks[thread_of_tid[mark.thread]].append(mark.ns)
    optimizer_keys, profiler_keys = _step_keys(trace)
    found = []
    for pid, (label, rank, threads) in processes.items():
        marked = [index for index in threads if marks.get(index)]
        if marked:
            thread = max(marked, key=lambda index: len(marks[index]))
            first, _ = scan_calls(trace, thread, None)
            ends = sorted(marks[thread])
            found.append(ProcessSteps(pid, label, rank, "marks", thread,
                                      _ends_to_windows(first if first is not None
                                                       else ends[0], ends)))
            continue
        if not (optimizer_keys or profiler_keys):
            continue
        scanned = {index: scan_calls(trace, index, optimizer_keys | profiler_keys)
                   for index in threads}
        steps = _optimizer_steps(trace, scanned, optimizer_keys)
        if steps is not None:
            thread, first, ends = steps
            found.append(ProcessSteps(pid, label, rank, "optimizer", thread,
                                      _ends_to_windows(first, ends)))
            continue
        regions = {index: [(s, e) for s, e, key in calls if key in profiler_keys]
                   for index, (_, calls) in scanned.items()}
        thread = max(threads, key=lambda index: len(regions[index]), default=None)
        if thread is not None and regions[thread]:
            found.append(ProcessSteps(pid, label, rank, "profiler", thread,
                                      _ends_to_windows(regions[thread][0][0],
                                                       [e for _, e in regions[thread]])))
    return found


def _optimizer_steps(trace, scanned, optimizer_keys):
    """(thread, its first call's start, step ends) by rule 2, or None."""
    calls = {index: [c for c in found if c[2] in optimizer_keys]
             for index, (_, found) in scanned.items()}
    thread = max(calls, key=lambda index: len(calls[index]), default=None)
    if thread is None or not calls[thread]:
        return None
    name = trace.names[calls[thread][0][2]]        # the first class seen
    ends, last_end = [], None
    for start, end, key in calls[thread]:
        if trace.names[key] == name and (last_end is None or start >= last_end):
            ends.append(end)
            last_end = end
    return thread, scanned[thread][0], ends


def steps_table(trace, top=TOP_DIFFERENCES):
    """The StepsTable of trace, or None when no process has steps."""
    found = find_steps(trace)
    ranked = sorted((p for p in found if p.rank is not None), key=lambda p: (p.rank, p.pid))
    columns = ranked or found
    if not columns:
        return None
    rows = []
    for number in range(max(len(c.windows) for c in columns)):
        durations = [c.windows[number][1] - c.windows[number][0]
                     if number < len(c.windows) else None for c in columns]
        present = sorted((d, column) for column, d in enumerate(durations) if d is not None)
        median = present[(len(present) - 1) // 2][1] if len(present) > 1 else None
        rows.append(StepRow(number + 1, durations, present[-1][1], median))
    differences = _differences(trace, columns, rows, top)
    return StepsTable(columns, rows, differences,
                      sum(1 for row in rows if row.median is not None),
                      find_stragglers(trace, columns, rows, column_title, top))


SLOWEST, MEDIAN = 0, 1          # the two groups of windows _differences sums


def _differences(trace, columns, rows, top):
    """The top Differences: per function, its self time on the step thread of
    each step's slowest rank less that on its median rank's, within the step,
    summed over the steps."""
    summarizer = Summarizer(trace.names)
    n_names = max(1, summarizer.n_names)
    slowest, median = [0] * n_names, [0] * n_names
    for column, steps in enumerate(columns):
        chosen = sorted([(steps.windows[row.step - 1], SLOWEST) for row in rows
                         if row.median is not None and row.slowest == column]
                        + [(steps.windows[row.step - 1], MEDIAN) for row in rows
                           if row.median == column])
        if not chosen:
            continue
        bounds = ffi.new("int64_t[]", [ns for window, _ in chosen for ns in window])
        groups = ffi.new("uint32_t[]", [group for _, group in chosen])
        table = ffi.new("int64_t[]", 2 * n_names)
        thread = trace.threads[steps.thread]
        for slices, n, first_index in batches(trace, steps.thread):
            summarizer.add_windows(thread, slices, n, first_index, bounds, groups,
                                   len(chosen), table)
        summarizer.end_thread()
        for name in range(n_names):
            slowest[name] += table[SLOWEST * n_names + name]
            median[name] += table[MEDIAN * n_names + name]
    found = [Difference(summarizer.unique_names[name], slowest[name], median[name])
             for name in range(summarizer.n_names) if slowest[name] != median[name]]
    found.sort(key=lambda d: (-abs(d.slowest_ns - d.median_ns), d.name))
    return found[:top]


def column_title(steps):
    return f"rank {steps.rank}" if steps.rank is not None else steps.label


def rule_text(columns):
    """Where the columns' steps end: "step() calls", or each rule with whose."""
    rules = Counter(steps.rule for steps in columns)
    if len(rules) == 1:
        return RULES[next(iter(rules))]
    return "; ".join(f"{RULES[rule]} ("
                     + ", ".join(column_title(s) for s in columns if s.rule == rule) + ")"
                     for rule in RULES if rule in rules)


def _ms(ns):
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def _table_lines(headers, cells, left=()):
    """Fixed-width columns, numbers right-aligned, `left` columns left-aligned."""
    widths = [max([len(h)] + [len(line[i]) for line in cells]) for i, h in enumerate(headers)]

    def render(values):
        return "  ".join(v.ljust(w) if i in left else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()
    return [render(headers), render(["-" * w for w in widths])] + [render(c) for c in cells]


def format_steps(table):
    """The steps table and the slowest-against-median functions, as text."""
    if table is None:
        return ("steps: none found (no pytrace_cffi.step() instant, optimizer step or "
                "ProfilerStep region in the trace)")
    titles = [column_title(steps) for steps in table.columns]
    several = len(titles) > 1
    whose = counted(len(titles), "rank" if table.columns[0].rank is not None else "process")
    lines = [f"steps of {whose}, ending at {rule_text(table.columns)} (ms):"]
    headers = ["step"] + titles + (["slowest", "median"] if several else [])
    cells = []
    for row in table.rows:
        line = [str(row.step)] + [_ms(d) for d in row.durations]
        if several:
            line += [titles[row.slowest] if row.median is not None else "-",
                     titles[row.median] if row.median is not None else "-"]
        cells.append(line)
    lines += _table_lines(headers, cells, left=(len(headers) - 2, len(headers) - 1)
                          if several else ())
    if not several:
        return "\n".join(lines)
    lines.append("")
    lines.append(f"self time of each step's slowest rank less its median rank's, on their "
                 f"step threads, over {table.compared} step{'s' if table.compared != 1 else ''}"
                 f" (ms):")
    cells = [[f"{(d.slowest_ns - d.median_ns) / 1e6:+.3f}", _ms(d.slowest_ns),
              _ms(d.median_ns), d.name] for d in table.differences]
    lines += _table_lines(["difference", "slowest", "median", "function"], cells, left=(3,))
    if not cells:
        lines.append("(no difference)")
    lines += _straggler_lines(table.stragglers, titles,
                              "rank" if table.columns[0].rank is not None else "process")
    return "\n".join(lines)


def step_ranges(numbers):
    """[2, 4, 5, 6] -> "2, 4-6"."""
    parts, at = [], 0
    while at < len(numbers):
        end = at
        while end + 1 < len(numbers) and numbers[end + 1] == numbers[end] + 1:
            end += 1
        parts.append(str(numbers[at]) if end == at else f"{numbers[at]}-{numbers[end]}")
        at = end + 1
    return ", ".join(parts)


def _straggler_lines(found, titles, kind):
    """The ranks' time outside collectives over the counted steps, the straggler
    and the functions whose self time outside collectives differs most."""
    lines = [""]
    if found.skipped:
        lines.append("skipped (warm-up): " + "; ".join(
            f"step {step} ({why})" for step, why in found.skipped))
    if not found.counted:
        lines.append("stragglers: no step left to compare")
        return lines
    steps = (f"step{'s' if len(found.counted) > 1 else ''} {step_ranges(found.counted)}")
    what = ("torch.distributed's collectives and waits"
            + ("; DDP's backward, which waits for its all-reduce" if found.ddp else ""))
    if not found.collectives:
        lines.append("no collective call in the trace (torch.distributed's all_reduce, "
                     "barrier, ...): time outside collectives is the steps' whole time")
    lines.append(f"time outside and inside collectives ({what}), over {steps} (ms):")
    cells = [[titles[column], _ms(found.outside[column]), _ms(found.inside[column]),
              "straggler" if column == found.straggler else ""]
             for column in range(len(titles))]
    lines += _table_lines([kind, "outside", "inside", ""],
                          cells, left=(0, 3))
    name = titles[found.straggler]
    lines.append("")
    lines.append(f"straggler: {name}, {_ms(found.outside[found.straggler])} ms outside "
                 f"collectives against {_ms(found.others_ns)} ms for the median of the "
                 f"others: "
                 + ("it waits least" if found.collectives else "its steps are longest"))
    lines.append(f"self time outside collectives, {name} less the median of the others, "
                 f"over {steps} (ms):")
    cells = [[f"{(mine - others) / 1e6:+.3f}", _ms(mine), _ms(others), function
              + (f" (called from {found.callers[function][0]})"
                 if function in found.callers else "")]
             for function, mine, others in found.differences]
    lines += _table_lines(["difference", name, "others", "function"], cells, left=(3,))
    if not cells:
        lines.append("(no difference)")
    return lines


def steps_data(table):
    """The table for the HTML page (JSON-ready), or None when it has under two
    columns: a step's slowest and median are column indices, times in ns."""
    if table is None or len(table.columns) < 2:
        return None
    return {"rule": rule_text(table.columns),
            "columns": [column_title(steps) for steps in table.columns],
            "rows": [[row.step, row.durations, row.slowest, row.median] for row in table.rows],
            "compared": table.compared,
            "differences": [[d.name, d.slowest_ns, d.median_ns] for d in table.differences],
            "stragglers": _stragglers_data(table.stragglers)}


def _stragglers_data(found):
    """Per column ns outside and inside collectives over the counted steps, the
    straggler (a column index), the skipped steps and why, and per function the
    straggler's self time outside collectives, the others' median and its
    straggler's main caller (or None)."""
    return {"counted": found.counted, "skipped": [list(s) for s in found.skipped],
            "outside": found.outside, "inside": found.inside,
            "straggler": found.straggler, "others": found.others_ns,
            "collectives": found.collectives, "ddp": found.ddp,
            "differences": [[name, mine, others, found.callers.get(name, (None,))[0]]
                            for name, mine, others in found.differences]}
