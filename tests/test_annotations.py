"""record_function regions, instants, counters, captured stacks."""
import json
import threading
import traceback

import pytest

import pytrace_cffi
from pytrace_cffi import capture_stack, counter, instant, record_function, symbolize

from helpers import assert_nested


def leaf():
    return len("leaf")


@record_function("decorated", {"batch": 4})
def decorated(x):
    return leaf() + x


class Model:
    @record_function("method")
    def forward(self, x):
        return x * 2


class FakeTensor:
    shape = (3, 5)


def by_name(trace, name):
    return [c for c in trace if c.name == name]


def test_context_manager_region_nests_with_functions():
    with pytrace_cffi.trace() as t:
        with record_function("outer"):
            leaf()
            with record_function("inner", {"n": 1, "ok": True, "f": 0.5, "s": "x",
                                           "t": FakeTensor()}):
                leaf()
    trace = t.trace
    (outer,) = by_name(trace, "outer")
    (inner,) = by_name(trace, "inner")
    assert outer.kind == inner.kind == "annotation"
    assert inner.parent == outer.id
    leaves = [c for c in trace if c.name.endswith(": leaf")]
    assert [l.parent for l in leaves] == [outer.id, inner.id]
    args = [trace.key_args[k] for k, n in enumerate(trace.names)
            if n == "inner" and k in trace.key_args]
    assert args == [{"n": 1, "ok": True, "f": 0.5, "s": "x", "t": [3, 5]}]
    assert_nested(trace)


def test_decorator_on_functions_and_methods():
    with pytrace_cffi.trace() as t:
        assert decorated(1) == 5
        assert Model().forward(3) == 6
    trace = t.trace
    (region,) = by_name(trace, "decorated")
    (call,) = [c for c in trace if c.name.endswith(": decorated")]
    assert call.parent == region.id            # the wrapper frame itself is left out
    (method,) = by_name(trace, "method")
    assert [c for c in trace if c.name.endswith(": forward")][0].parent == method.id
    assert not [c for c in trace if "record_function_wrapper" in c.name]


def test_exception_inside_region_closes_it_and_propagates():
    with pytrace_cffi.trace() as t:
        with pytest.raises(KeyError):
            with record_function("failing"):
                {}["x"]
        leaf()
    (region,) = by_name(t.trace, "failing")
    (after,) = [c for c in t.trace if c.name.endswith(": leaf")]
    assert after.parent != region.id and after.start_ns >= region.end_ns
    assert_nested(t.trace)


def test_regions_in_threads():
    def work(k):
        with record_function(f"thread-{k}"):
            leaf()

    with pytrace_cffi.trace() as t:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    for k, th in enumerate(threads):
        (region,) = by_name(t.trace, f"thread-{k}")
        assert region.thread == th.native_id
    assert_nested(t.trace)


def test_not_tracing_is_a_no_op_and_bad_types_raise_at_construction():
    with record_function("idle"):
        pass
    instant("idle")
    counter("idle", 1)
    with pytest.raises(TypeError):
        record_function(3)
    with pytest.raises(TypeError):
        record_function("x", args=[1])
    with pytest.raises(TypeError):
        record_function("x", {"k": object()})
    with pytest.raises(TypeError):
        record_function("x", {1: 2})
    with pytest.raises(TypeError):
        instant(None)
    with pytest.raises(TypeError):
        counter("c", "high")
    with pytest.raises(TypeError):
        counter("c", {"a": "b"})
    with pytest.raises(TypeError):
        record_function("x", {}, 3)
    with pytest.raises(TypeError):
        record_function("x", colour=1)
    with pytest.raises(TypeError):
        record_function(args={})
    region = record_function("named", {"a": 1})
    assert region.name == "named" and region.args == {"a": 1}
    assert isinstance(region, pytrace_cffi.RecordFunction)
    keyworded = record_function(name="kw", args={"b": 2})
    assert keyworded.name == "kw" and keyworded.args == {"b": 2}
    assert pytrace_cffi.RecordFunction("typed").name == "typed"


def test_instants_and_counters_in_chrome_json(tmp_path):
    with pytrace_cffi.trace() as t:
        instant("checkpoint", {"epoch": 2})
        counter("queue", 7)
        counter("memory", {"used": 10, "free": 2.5})
    path = tmp_path / "t.json"
    t.trace.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    (i,) = [e for e in events if e["ph"] == "i"]
    assert i["name"] == "checkpoint" and i["args"] == {"epoch": 2} and i["s"] == "t"
    counters = {e["name"]: e["args"] for e in events if e["ph"] == "C"}
    assert counters == {"queue": {"queue": 7}, "memory": {"used": 10, "free": 2.5}}
    assert all(e["tid"] == threading.get_native_id() for e in events if e["ph"] in "iC")
    loaded_dir = tmp_path / "saved"
    t.trace.save(loaded_dir)
    assert pytrace_cffi.load(loaded_dir).marks == t.trace.marks


def frames_of(stack):
    return [(f["filename"], f["line"], f["name"]) for f in stack]


def expected_stack(skip_innermost=0):
    summary = traceback.extract_stack()[:-1 - skip_innermost]   # drop this helper
    return [(f.filename, f.lineno, f.name) for f in reversed(summary)]


def capture_here():
    return capture_stack(), expected_stack()


def test_symbolize_matches_traceback():
    stack, expected = capture_here()
    (symbols,) = symbolize([stack])
    # expected was taken one line later in the same frame
    assert [(f, n) for f, _, n in frames_of(symbols)] == [(f, n) for f, _, n in expected]
    assert frames_of(symbols)[1:] == expected[1:]


def test_symbolize_exact_lines():
    def inner():
        s = capture_stack(); e = expected_stack()   # noqa: E702 - same line on purpose
        return s, e
    stack, expected = inner()
    assert frames_of(symbolize([stack])[0]) == expected


def test_stacks_from_threads_generators_and_dead_frames():
    results = {}

    def in_thread():
        s = capture_stack(); results["thread"] = (s, expected_stack())   # noqa: E702

    th = threading.Thread(target=in_thread)
    th.start()
    th.join()

    def gen():
        s = capture_stack(); yield (s, expected_stack())                 # noqa: E702

    results["generator"] = next(gen())

    def deep(n):
        if n:
            return deep(n - 1)
        s = capture_stack(); return s, expected_stack()                   # noqa: E702
    results["dead"] = deep(30)                 # those frames are gone by now
    for name, (stack, expected) in results.items():
        assert frames_of(symbolize([stack])[0]) == expected, name
    assert len(capture_stack(max_depth=3)) == 3
    with pytest.raises(TypeError):
        symbolize([object()])


def test_deep_stacks_grow_past_the_inline_buffer_and_default_depth_truncates():
    def deep(n):
        if n:
            return deep(n - 1)
        return capture_stack(max_depth=10_000), capture_stack(), expected_stack()
    whole, default, expected = deep(300)
    assert len(whole) == len(expected) > 300
    assert frames_of(symbolize([whole])[0]) == expected
    assert len(default) == 128
    assert [(f, n) for f, _, n in frames_of(symbolize([default])[0])] == \
        [(f, n) for f, _, n in expected[:128]]


def test_returning_none_keeps_nones_references():
    """instant(), counter() and the hook every thread born while tracing runs once
    return None with a reference of their own (a module built with 3.12's headers
    returned it without one on 3.9-3.11, until None was deallocated)."""
    import sys
    pytrace_cffi.start()
    before = sys.getrefcount(None)
    for _ in range(5000):
        instant("i")
        counter("c", 1)
    for _ in range(20):
        thread = threading.Thread(target=leaf)
        thread.start()
        thread.join()
    change = sys.getrefcount(None) - before
    pytrace_cffi.stop()
    assert abs(change) < 1000       # (was -10020 on 3.9-3.11; other objects move it a little)
