"""Chrome Trace Event JSON renderer (Perfetto, chrome://tracing).

Each call becomes a complete ("X") slice in category "python_function" with
ts/dur in microseconds at nanosecond precision (three decimals), pid = process
id, tid = OS thread id, and the args torch's profiler writes ("Python id",
"Python parent id", "Python thread"). Each thread gets a "thread_name" metadata
("M") event with its Python name. Names are JSON-escaped once per function.
"""
import gzip
import json
import os


def _us(ns):
    """Nanoseconds as a microsecond JSON number with exactly three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _chunks(trace):
    pid = trace.pid
    base = trace.start_ns
    escaped = [json.dumps(name) for name in trace.names]
    # Per-key extra args (e.g. "Python module id"), preformatted with a leading comma.
    extra = ["" for _ in trace.names]
    for key, args in trace.key_args.items():
        extra[key] = "," + json.dumps(args)[1:-1]
    head = {
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": "pytrace_cffi",
            "python": trace.python_version,
            "backend": trace.backend,
            "clock": trace.clock,
            "start_monotonic_ns": base,
            "stop_monotonic_ns": trace.stop_ns,
            "dropped_events": trace.dropped_events,
        },
    }
    yield '{' + json.dumps(head)[1:-1] + ',\n"traceEvents":[\n'
    first = True
    first_id = 0
    for thread, slices, n in trace.thread_slices():
        tid = thread.native_id or thread.ident
        meta = json.dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": thread.name}})
        lines = [meta if first else ",\n" + meta]
        first = False
        prefix = f',\n{{"ph":"X","cat":"python_function","pid":{pid},"tid":{tid},"name":'
        thread_index = thread.index
        for i in range(n):
            s = slices[i]
            start = s.start - base
            parent = s.parent
            lines.append(
                f'{prefix}{escaped[s.key]},"ts":{_us(start)},"dur":{_us(s.end - s.start)},'
                f'"args":{{"Python id":{first_id + i},"Python parent id":'
                f'{"null" if parent < 0 else first_id + parent},"Python thread":{thread_index}'
                f'{extra[s.key]}}}}}'
            )
            if len(lines) >= 65536:
                yield "".join(lines)
                lines = []
        first_id += n
        yield "".join(lines)
    yield "\n]}\n"


def write_chrome_trace(trace, path):
    """Writes trace to path (.json, or gzip-compressed for .json.gz).

    Writes to a temporary file beside path and renames it, so a failed export
    leaves neither a truncated file nor a damaged trace: retry at will."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(tmp, "wt", encoding="utf-8") as out:
            for chunk in _chunks(trace):
                out.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
