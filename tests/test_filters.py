"""include/exclude, max_depth and min_duration_us."""
import os
import time

import pytest

import pytrace_cffi
from workloads import recursion

from helpers import assert_nested

HERE = os.path.abspath(__file__)


def local_work():
    return len(str(recursion.fib(6)))


def depth_of(call, by_id):
    depth = 0
    while call.parent is not None:
        call = by_id[call.parent]
        depth += 1
    return depth


def fib_calls(n):
    return 1 if n < 2 else 1 + fib_calls(n - 1) + fib_calls(n - 2)


def test_include_keeps_only_matching_files_and_their_builtins():
    with pytrace_cffi.trace(include=["*/workloads/*"]) as t:
        local_work()
    names = [c.name for c in t.trace]
    assert names.count(next(n for n in names if n.endswith(": fib"))) == fib_calls(6)
    assert not [n for n in names if n.endswith(": local_work")]
    # str() and len() are called by local_work (left out), so they go too
    assert "builtins.len" not in names
    assert_nested(t.trace)


def test_exclude_leaves_out_matching_files():
    with pytrace_cffi.trace(exclude="*/workloads/*") as t:
        local_work()
    names = [c.name for c in t.trace]
    assert not [n for n in names if n.endswith(": fib")]
    assert [n for n in names if n.endswith(": local_work")]
    assert "builtins.len" in names
    assert_nested(t.trace)


def test_excluded_code_is_back_in_the_next_session():
    with pytrace_cffi.trace(exclude="*/workloads/*"):
        local_work()
    with pytrace_cffi.trace() as t:
        local_work()
    assert sum(1 for c in t.trace if c.name.endswith(": fib")) == fib_calls(6)


@pytest.mark.parametrize("max_depth", [1, 3, 6])
def test_max_depth_bounds_the_recorded_depth(max_depth):
    def run():
        recursion.fib(10)

    with pytrace_cffi.trace(max_depth=max_depth) as t:
        run()
    calls = list(t.trace)
    by_id = {c.id: c for c in calls}
    assert calls and max(depth_of(c, by_id) for c in calls) == max_depth - 1
    assert_nested(t.trace)
    with pytrace_cffi.trace() as full:
        run()
    full_calls = list(full.trace)
    full_by_id = {c.id: c for c in full_calls}
    expected = sorted(c.name for c in full_calls if depth_of(c, full_by_id) < max_depth)
    assert sorted(c.name for c in calls) == expected


def test_min_duration_drops_short_calls_with_their_callees():
    def slow():
        time.sleep(0.05)
        return len("x")

    # local_work takes well under a millisecond, slow 50 ms: margin for a loaded machine
    with pytrace_cffi.trace(min_duration_us=20000) as t:
        local_work()
        slow()
    names = [c.name for c in t.trace]
    assert [n for n in names if n.endswith(": slow")]
    assert "time.sleep" in names
    assert not [n for n in names if n.endswith(": fib") or n == "builtins.len"]
    assert all(c.end_ns - c.start_ns >= 20_000_000 for c in t.trace)
    assert_nested(t.trace)


@pytest.mark.parametrize("options, error", [
    ({"max_depth": 0}, ValueError), ({"max_depth": "3"}, TypeError),
    ({"include": 3}, TypeError), ({"exclude": [1]}, TypeError),
    ({"min_duration_us": -1}, ValueError), ({"min_duration_us": "1"}, TypeError),
])
def test_bad_filters_fail_before_tracing(options, error):
    with pytest.raises(error):
        pytrace_cffi.start(**options)
    assert not pytrace_cffi.is_tracing()


def start_here_and_work():
    pytrace_cffi.start(exclude=HERE)
    return recursion.fib(5)


def test_frames_seeded_at_start_obey_the_filters():
    start_here_and_work()
    trace = pytrace_cffi.stop()
    names = [c.name for c in trace]
    assert not [n for n in names if "test_filters.py" in n]
    assert sum(1 for n in names if n.endswith(": fib")) == fib_calls(5)
    assert_nested(trace)


def _spilled(tmp_path, **options):
    out = tmp_path / "spill"
    pytrace_cffi.start(max_events=4000, output=str(out), **options)
    for _ in range(3):
        local_work()
    pytrace_cffi.stop()
    return out


def _with_min_duration_ns(directory, ns):
    import json
    meta_path = directory / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["events"]["min_duration_ns"] = ns
    meta_path.write_text(json.dumps(meta))
    return pytrace_cffi.load(str(directory))


def test_a_call_exactly_min_duration_long_is_kept(tmp_path):
    """min_duration leaves out calls *shorter* than it: one exactly that long
    stays, one a nanosecond shorter goes. The bound is set on a spilled trace's
    events (meta.json) to the length of calls it holds, and the calls kept are
    checked against those of the unfiltered trace, through the streaming walk
    (iterating) and the slice table alike."""
    directory = _spilled(tmp_path)
    every = list(pytrace_cffi.load(str(directory)))
    lengths = sorted({c.end_ns - c.start_ns for c in every if c.kind == "python"})
    bound = lengths[len(lengths) // 2]            # a length some calls have exactly
    exactly = [c for c in every if c.end_ns - c.start_ns == bound]
    assert exactly
    for ns, kept_exactly in ((bound, True), (bound + 1, False)):
        trace = _with_min_duration_ns(directory, ns)
        expected = sorted((c.name, c.start_ns, c.end_ns) for c in every
                          if c.end_ns - c.start_ns >= ns)
        walked = sorted((c.name, c.start_ns, c.end_ns) for c in trace)
        assert walked == expected
        tabled = sorted((trace.names[s[i].key], s[i].start, s[i].end)
                        for _, s, n in trace.thread_slices() for i in range(n))
        assert tabled == expected
        assert all(((c.name, c.start_ns, c.end_ns) in walked) == kept_exactly
                   for c in exactly)


@pytest.mark.parametrize("us, ns", [(1.001, 1001), (0.3, 300), (2.5, 2500), (7, 7000),
                                    (0.0005, 1), (1000.999, 1000999)])
def test_min_duration_in_microseconds_is_the_exact_bound_in_nanoseconds(tmp_path, us, ns):
    """1.001 us is 1001 ns, not 1000 (1.001 * 1000 is 1000.9999999999999 in
    floats): a call of 1000 ns is shorter than the bound and goes. A fraction of a
    nanosecond rounds up: calls are whole nanoseconds."""
    import json
    directory = _spilled(tmp_path, min_duration_us=us)
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["events"]["min_duration_ns"] == ns
