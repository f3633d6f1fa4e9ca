"""One timeline with torch.profiler: our Python calls beside torch's aten ops,
record_function regions and GPU kernels.

torch.profiler's Chrome trace puts `ts` on Unix epoch time in microseconds, less
its `baseTimeNanoseconds`; ours counts CLOCK_MONOTONIC microseconds from the
trace's start. The realtime anchor every trace keeps (CLOCK_MONOTONIC and
CLOCK_REALTIME read together at start and at stop) maps one onto the other.
torch writes the OS thread id as `tid` and the process id as `pid`, as we do, so
our slices land on the same thread tracks as the aten ops they ran.
"""
import gzip
import json
import os
import tempfile

from ._clock import checked_anchor, monotonic_to_realtime
from ._files import replaced_atomically
from .errors import TraceFormatError

# torch.profiler(with_stack=True) records Python calls itself; ours replace them.
TORCH_PYTHON_CATEGORY = "python_function"
OUR_CATEGORIES = ("python_function", "user_annotation")


def _read_json(path, what):
    try:
        opener = gzip.open if os.fspath(path).endswith(".gz") else open
        with opener(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise TraceFormatError(f"{what} {os.fspath(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, EOFError) as exc:
        raise TraceFormatError(f"{what} {os.fspath(path)!r}: not valid JSON ({exc})") from None


def _our_chrome_json(trace, scratch_dir):
    """Our trace as parsed Chrome JSON, from a Trace (or SpilledTrace), a saved-trace
    directory or a .json/.json.gz we wrote."""
    if isinstance(trace, (str, bytes, os.PathLike)):
        path = os.fsdecode(trace)
        if not os.path.isdir(path):
            return _read_json(path, "trace")
        from . import load
        trace = load(path)
    if not hasattr(trace, "export_chrome_trace"):
        raise TypeError(f"trace must be a Trace or a path, not {type(trace).__name__}")
    fd, tmp = tempfile.mkstemp(suffix=".json", dir=scratch_dir)
    os.close(fd)
    try:
        trace.export_chrome_trace(tmp)
        return _read_json(tmp, "trace")
    finally:
        os.unlink(tmp)


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ours(data, where):
    """(events, otherData, anchor) of our Chrome JSON, checked."""
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceFormatError(f"{where}: not a Chrome trace (no traceEvents list)")
    other = data.get("otherData")
    if not isinstance(other, dict) or other.get("generator") != "pytrace_cffi":
        raise TraceFormatError(f"{where}: not written by pytrace_cffi")
    try:
        anchor = checked_anchor(other.get("realtime_anchor"))
    except ValueError as exc:
        raise TraceFormatError(f"{where}: otherData.{exc}") from None
    if anchor is None:
        raise TraceFormatError(f"{where}: has no realtime anchor (written by a pytrace_cffi "
                               "older than merge): it cannot be placed on torch's timeline")
    start = other.get("start_monotonic_ns")
    if type(start) is not int:
        raise TraceFormatError(f"{where}: otherData.start_monotonic_ns must be an integer")
    return data["traceEvents"], other, anchor, start


def _torch(data, where):
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceFormatError(f"{where}: not a Chrome trace (no traceEvents list)")
    if isinstance(data.get("otherData"), dict) and \
            data["otherData"].get("generator") == "pytrace_cffi":
        raise TraceFormatError(f"{where}: is a pytrace_cffi trace, not torch.profiler's")
    base = data.get("baseTimeNanoseconds", 0)
    if type(base) is not int or base < 0:
        raise TraceFormatError(f"{where}: baseTimeNanoseconds must be a non-negative integer")
    return data["traceEvents"], base


def torch_ts(anchor, start_monotonic_ns, ts_us, base_ns):
    """Our ts (µs after start_monotonic_ns) as torch's (epoch µs less base_ns)."""
    monotonic_ns = start_monotonic_ns + round(ts_us * 1000)
    return (monotonic_to_realtime(anchor, monotonic_ns) - base_ns) / 1000


def merge_torch(trace, torch_trace_path, out_path):
    """Writes to out_path one Chrome trace with torch.profiler's events (from
    torch_trace_path, its export_chrome_trace file) and ours on torch's timeline.

    trace: a Trace, or the path of a .json/.json.gz or saved-trace directory
    pytrace_cffi wrote. Our slices keep their pid and tid (the process id and OS
    thread id, which torch writes too), so they share thread tracks with torch's
    cpu_op and user_annotation events; GPU events stay on their device tracks. When
    torch recorded Python calls as well (with_stack=True), its python_function
    events on the threads we traced, within our trace's time, are left out: ours
    replace them. out_path: .json, or .json.gz for gzip. Returns out_path."""
    out_path = os.fspath(out_path)
    torch_path = os.fspath(torch_trace_path)
    scratch_dir = os.path.dirname(os.path.abspath(out_path))
    where = trace if isinstance(trace, (str, os.PathLike)) else "trace"
    ours, other, anchor, start = _ours(_our_chrome_json(trace, scratch_dir), where)
    torch_data = _read_json(torch_path, "torch trace")
    torch_events, base = _torch(torch_data, torch_path)

    merged = []
    traced = set()               # (pid, tid) of our threads
    first_ts = last_ts = None
    for event in ours:
        if not isinstance(event, dict):
            raise TraceFormatError(f"{where}: an event is not an object")
        event = dict(event)
        if event.get("ph") != "M":
            if not _number(event.get("ts")):
                raise TraceFormatError(f"{where}: an event has no numeric ts")
            ts = event["ts"]
            event["ts"] = round(torch_ts(anchor, start, ts, base), 3)
            if event.get("ph") == "X":
                if not _number(event.get("dur")):
                    raise TraceFormatError(f"{where}: a complete event has no numeric dur")
                # both ends mapped: the offset between the clocks may move
                end = round(torch_ts(anchor, start, ts + event["dur"], base), 3)
                event["dur"] = round(end - event["ts"], 3)
                first_ts = event["ts"] if first_ts is None else min(first_ts, event["ts"])
                last_ts = end if last_ts is None else max(last_ts, end)
        traced.add((event.get("pid"), event.get("tid")))
        merged.append(event)
    dropped = 0
    for event in torch_events:
        if isinstance(event, dict) and (event.get("pid"), event.get("tid")) in traced:
            if event.get("cat") == TORCH_PYTHON_CATEGORY and _number(event.get("ts")) and \
                    first_ts is not None and event["ts"] < last_ts and \
                    event["ts"] + (event.get("dur") or 0) > first_ts:
                dropped += 1
                continue
            if event.get("ph") == "M" and event.get("name") == "thread_name":
                continue            # ours names the thread after its Python name
        merged.append(event)

    head = {k: v for k, v in torch_data.items() if k != "traceEvents"}
    head["pytrace_cffi"] = {
        "trace": other,
        "torch_python_function_events_replaced": dropped,
        "clock": "our CLOCK_MONOTONIC ts mapped to torch's epoch time through "
                 "otherData.realtime_anchor",
    }
    opener = ((lambda tmp: gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6))
              if out_path.endswith(".gz") else
              (lambda tmp: open(tmp, "w", encoding="utf-8")))
    with replaced_atomically(out_path, opener) as out:
        out.write(json.dumps(head)[:-1] + ',\n"traceEvents":[\n')
        for i, event in enumerate(merged):
            if i:
                out.write(",\n")
            out.write(json.dumps(event))
        out.write("\n]}\n")
    return out_path
