"""Chrome Trace Event JSON: shape, units, args, thread names, nesting, gzip."""
import gzip
import json
import os
import threading

import pytest

import pytrace_cffi


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


@pytest.fixture(scope="module")
def trace():
    with pytrace_cffi.trace() as t:
        worker = threading.Thread(target=fib, args=(8,), name="chrome-worker")
        worker.start()
        fib(10)
        worker.join()
    return t.trace


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_export_is_valid_chrome_json(trace, tmp_path, suffix):
    path = tmp_path / f"out{suffix}"
    trace.export_chrome_trace(str(path))
    data = load(path)
    events = data["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(trace)
    assert {e["cat"] for e in slices} == {"python_function"}
    assert {e["pid"] for e in events} == {os.getpid()}
    assert {e["tid"] for e in slices} == {t.native_id for t in trace.threads}
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[threading.get_native_id()] == "MainThread"
    assert "chrome-worker" in names.values()
    calls = list(trace)
    for event, call in zip(slices, calls):
        assert event["name"] == call.name
        assert event["args"]["Python id"] == call.id
        assert event["args"]["Python parent id"] == call.parent
        # microseconds with nanosecond precision
        assert round(event["ts"] * 1000) == call.start_ns - trace.start_ns
        assert round(event["dur"] * 1000) == call.end_ns - call.start_ns


def test_slices_nest_exactly_per_thread(trace, tmp_path):
    path = tmp_path / "nest.json"
    trace.export_chrome_trace(str(path))
    slices = [e for e in load(path)["traceEvents"] if e["ph"] == "X"]
    by_tid = {}
    for e in slices:
        by_tid.setdefault(e["tid"], []).append(
            (round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)))
    for intervals in by_tid.values():
        intervals.sort(key=lambda iv: (iv[0], -iv[1]))
        stack = []
        for start, end in intervals:
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], "a slice crosses its parent's end"
            stack.append(end)


def test_fib_counts_in_export(trace, tmp_path):
    path = tmp_path / "fib.json"
    trace.export_chrome_trace(str(path))
    slices = [e for e in load(path)["traceEvents"] if e["ph"] == "X"]
    fibs = [e for e in slices if e["name"].endswith(": fib")]
    calls = lambda n: 1 if n < 2 else 1 + calls(n - 1) + calls(n - 2)   # noqa: E731
    assert len(fibs) == calls(10) + calls(8)


def test_failed_export_keeps_the_trace_for_a_retry(trace, tmp_path):
    bad = tmp_path / "missing-dir" / "out.json"
    with pytest.raises(OSError):
        trace.export_chrome_trace(str(bad))
    assert not list(tmp_path.glob("missing-dir*"))
    good = tmp_path / "retry.json"
    trace.export_chrome_trace(str(good))
    assert len([e for e in load(good)["traceEvents"] if e["ph"] == "X"]) == len(trace)


def deep(n):
    return deep(n - 1) if n else 0


def test_perfetto_depth_limit_is_warned_about_and_max_depth_avoids_it(tmp_path):
    import gc
    import sys
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(2000)
    # no collection inside the recursion: a gc callback (hypothesis installs one
    # once its tests ran in this process) would add frames under a deep() call
    gc.disable()
    try:
        with pytrace_cffi.trace() as t:
            deep(600)
        # the API names the option as start() takes it (the command line: its flag)
        with pytest.warns(pytrace_cffi.TraceWarning,
                          match="Trace with max_depth=512 to keep the export within them"):
            t.trace.export_chrome_trace(str(tmp_path / "deep.json"))
        with pytrace_cffi.trace(max_depth=512) as bounded:
            deep(600)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            bounded.trace.export_chrome_trace(str(tmp_path / "bounded.json"))
    finally:
        gc.enable()
        sys.setrecursionlimit(old)
    # What was written: all 601 calls of deep unbounded; bounded, exactly 512 levels
    # (the frames running at start, then deep down to the cap), and nothing cut short.
    assert levels(tmp_path / "deep.json").count(deep_name()) == 601
    names = levels(tmp_path / "bounded.json")
    assert len(names) == 512
    first = names.index(deep_name())
    assert first > 0 and set(names[first:]) == {deep_name()}
    assert len([c for c in bounded.trace if c.name == deep_name()]) == 512 - first


def deep_name():
    from helpers import trimmed
    return f"{trimmed(__file__)}({deep.__code__.co_firstlineno}): deep"


def levels(path):
    """The main thread's deepest chain of nested slices in an exported file,
    outermost first, by name, following the parent ids."""
    slices = [e for e in load(path)["traceEvents"]
              if e["ph"] == "X" and e["tid"] == threading.get_native_id()]
    by_id = {e["args"]["Python id"]: e for e in slices}

    def chain(event):
        out = []
        while event is not None:
            out.append(event["name"])
            parent = event["args"]["Python parent id"]
            event = by_id[parent] if parent is not None else None
        return out[::-1]
    return max((chain(e) for e in slices), key=len, default=[])
