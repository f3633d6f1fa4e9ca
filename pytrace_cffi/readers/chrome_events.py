"""What our Chrome JSON's events must be, and the Trace they make: the checks
shared by the line reader (chrome_lines.py), the whole-file reader (chrome.py)
and the .pftrace reader, which builds its Trace the same way (chrome_trace)."""
import json
import re

from ..model.realtime import checked_anchor
from .._core import lib
from .._jsontext import MAX_ARGS_DEPTH, finite_number, too_deep
from ..errors import TraceFormatError

# What the Chrome JSON does not say of a "python_function", read from its name:
# Python functions are "<path>(<line>): <function>", torch modules and optimizer
# steps are Python too, everything else is a built-in.
_PYTHON_NAME = re.compile(r"\(\d+\): |^nn\.Module: |^Optimizer\.step#")


_CATEGORIES = ("python_function", "user_annotation")
STANDARD_ARGS = ("Python id", "Python parent id", "Python thread")
_NUMBER_TYPES = (int, float)                 # exact types: a bool is no number here
MAX_MICROSECONDS = 2 ** 52                   # ~143 years; rejects inf, nan and overflow


class Changed(Exception):
    """A later read of a file does not meet what the first read met."""


# A call exactly as pt_format_slices writes it; anything else on a line goes
# through json.loads and the checks of the whole-file path. The name ends at the
# first '","ts":', as a quote inside a JSON string is always escaped; whether the
# name and the extra args are valid JSON is checked once per function (_line_key).


def check_other(path, other):
    expect(isinstance(other, dict) and other.get("generator") == "pytrace_cffi",
           f"{path}: not written by pytrace_cffi (otherData.generator is missing)")


def validated(path, index, first_id, array, count, keys):
    bad = lib.pt_validate_slices(array, count, len(keys.names))
    expect(bad < 0, f"{path}: thread {index}: call {first_id + bad} does not nest "
           f"inside its parent")
    return array, count


def chrome_trace(path, other, keys, threads, slices, marks, pid, lanes, streams=None,
                 build_slices=None):
    from ..model.trace import Mark, Trace
    start_ns = other_int(path, other, "start_monotonic_ns")
    processes = _lane_processes(path, other, lanes, threads)
    if processes is None:
        threads = [t._replace(pid=None) for t in threads]
    else:
        pid = next(iter(processes))
    dropped = other_int(path, other, "dropped_events")
    threads = _threads_dropped(path, other, threads, dropped)
    trace = Trace(names=keys.names, key_kinds=keys.kinds, key_args=keys.args, threads=threads,
                  slices=slices, start_ns=start_ns,
                  stop_ns=other_int(path, other, "stop_monotonic_ns"), pid=pid,
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
    walk.dropped_by_thread). A file that says the total only (written before the
    split was) has it on its first thread: a trace's total is its threads' sum."""
    split = other.get("dropped_by_thread")
    expect(dropped >= 0, f"{path}: otherData.dropped_events is negative")
    if split is None:
        if not dropped:
            return threads
        expect(len(threads) > 0, f"{path}: {dropped} events dropped, but no thread")
        return [threads[0]._replace(dropped=dropped)] + list(threads[1:])
    expect(isinstance(split, list) and len(split) == len(threads)
           and all(type(n) is int and n >= 0 for n in split),
           f"{path}: otherData.dropped_by_thread must be a count of at least 0 per thread "
           f"({len(threads)})")
    expect(sum(split) == dropped, f"{path}: otherData.dropped_by_thread adds up to "
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
    expect(isinstance(listed, list) and all(isinstance(p, dict) for p in listed),
           f"{path}: otherData.processes must be a list of objects")
    expect(not too_deep(listed, MAX_ARGS_DEPTH + 1),
           f"{path}: otherData.processes nest deeper than {MAX_ARGS_DEPTH} levels")
    for entry in listed:
        if type(entry.get("pid")) is int and entry["pid"] in processes:
            facts = {k: v for k, v in entry.items() if k not in ("pid", "label")}
            processes[entry["pid"]].update(facts)
    for thread in threads:
        expect(type(thread.pid) is int and thread.pid in processes, f"{path}: thread {thread.name!r} (tid "
               f"{thread.native_id}) is in pid {thread.pid}, "
               f"which has no process_name event")
    return processes


def read_lane(path, number, event, lanes):
    """A process_name or process_sort_index metadata event, into lanes (pid -> facts)."""
    pid, args = event.get("pid"), event.get("args")
    what = "label" if event.get("name") == "process_name" else "sort_index"
    value = args.get("name" if what == "label" else "sort_index") \
        if isinstance(args, dict) else None
    expect(type(pid) is int and -2 ** 63 <= pid < 2 ** 63
           and (isinstance(value, str) if what == "label" else type(value) is int),
           f"{path}: event {number}: a {event.get('name')} needs an integer pid and "
           f"{'a name' if what == 'label' else 'an integer sort_index'}")
    lanes.setdefault(pid, {})[what] = value


def _other_anchor(path, other):
    try:
        return checked_anchor(other.get("realtime_anchor"))
    except ValueError as exc:
        raise TraceFormatError(f"{path}: otherData.{exc}") from None


# --- our layout, line by line -------------------------------------------------------


OPEN_AT_START = "open at start"     # the arg our exports mark such a frame with


def take_open_at_start(category, args):
    """PT_SLICE_SEEDED when a call's args (a dict, or None) say it was running
    when the trace began (removed from args: a flag, not an arg of its function),
    else 0."""
    if category == "python_function" and args and args.get(OPEN_AT_START) is True:
        del args[OPEN_AT_START]
        return lib.PT_SLICE_SEEDED
    return 0


class Keys:
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
                raise Changed("a call names a function the first read did not meet")
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


def read_thread_name(path, number, event):
    """(tid, name) of a thread_name metadata event, checked."""
    tid = event.get("tid")
    args = event.get("args")
    name = args.get("name") if isinstance(args, dict) else None
    expect(type(tid) is int and isinstance(name, str),
           f"{path}: event {number}: a thread_name needs an integer tid and a name")
    return tid, name


def read_mark(path, number, event):
    name, ts, tid, args = event.get("name"), event.get("ts"), event.get("tid"), event.get("args")
    if args is None and event["ph"] == "i":
        args = {}           # an instant without args, as earlier exports wrote it
    expect(isinstance(name, str) and _is_time(ts) and type(tid) is int
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
                expect(None not in args.values(),
                       f"{path}: event {number}: a counter's values must be numbers")
                break
    return event["ph"], round(ts * 1000), tid, name, args


def read_call(path, number, event, thread_of_tid):
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
                               f"dur and args {', '.join(STANDARD_ARGS)}") from None
    # Plain ifs, not expect: its message would be formatted for every call.
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
    extra = {k: v for k, v in args.items() if k not in STANDARD_ARGS} if len(args) > 3 else None
    if extra and too_deep(extra):
        raise TraceFormatError(f"{path}: event {number}: args nest deeper than "
                               f"{MAX_ARGS_DEPTH} levels")
    opened = take_open_at_start(category, extra)
    return thread, (call_id, parent_id, name, category, round(ts * 1000), round(dur * 1000),
                    extra or None, opened)


def _is_time(value):
    """A finite microsecond count that fits the int64 nanoseconds of a slice."""
    return type(value) in _NUMBER_TYPES and -MAX_MICROSECONDS < value < MAX_MICROSECONDS


def other_int(path, other, field):
    value = other.get(field)
    expect(type(value) is int, f"{path}: otherData.{field} must be an integer")
    return value


def expect(condition, message):
    if not condition:
        raise TraceFormatError(message)
