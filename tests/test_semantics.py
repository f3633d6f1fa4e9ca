"""What a call is: generators, exceptions, frames at start and at stop."""
import sys
import threading

import pytest

import pytrace_cffi

from helpers import assert_nested


def named(trace, suffix):
    return [c for c in trace if c.name.endswith(suffix)]


def gen(n):
    for i in range(n):
        yield i


def test_generator_resume_is_a_call_and_yield_a_return():
    with pytrace_cffi.trace() as traced:
        values = list(gen(4))
    assert values == [0, 1, 2, 3]
    # first entry + 4 resumes after each yield = 5 calls of the generator frame
    assert len(named(traced.trace, ": gen")) == 5
    assert_nested(traced.trace)


def thrower(depth):
    if depth == 0:
        raise KeyError("deep")
    thrower(depth - 1)


def test_exception_unwinding_is_a_return():
    with pytrace_cffi.trace() as traced:
        try:
            thrower(4)
        except KeyError:
            pass
        after = len("after")
    assert after == 5
    calls = named(traced.trace, ": thrower")
    assert len(calls) == 5
    for parent, child in zip(calls, calls[1:]):
        assert child.parent == parent.id
    lens = [c for c in traced.trace if c.name == "builtins.len"]
    # the call after the exception is not nested inside the unwound frames
    assert lens[-1].parent != calls[0].id and lens[-1].start_ns >= calls[0].end_ns
    assert_nested(traced.trace)


def test_builtin_that_raises_is_a_c_call():
    with pytrace_cffi.trace() as traced:
        try:
            int("x")
        except ValueError:
            pass
    ints = [c for c in traced.trace if c.kind == "c" and c.name == "int"] or \
        [c for c in traced.trace if c.kind == "c" and "int" in c.name]
    # int is a type, not a built-in function: like sys.setprofile, no C call
    assert ints == []
    with pytrace_cffi.trace() as traced:
        try:
            [].index(1)
        except ValueError:
            pass
    index_calls = [c for c in traced.trace if c.name == "list.index"]
    assert len(index_calls) == 1 and index_calls[0].kind == "c"


def raises_in_a_builtin():
    try:
        [].index(1)
    except ValueError:
        pass
    len("next")
    abs(-1)


def test_a_builtin_that_raises_ends_there():
    # A raising built-in ends where it raises (C_RAISE on 3.12+, C_EXCEPTION
    # before): were it left open, the calls after it would nest under it and it
    # would end with its caller.
    with pytrace_cffi.trace() as traced:
        raises_in_a_builtin()
    (parent,) = named(traced.trace, ": raises_in_a_builtin")
    children = [c for c in traced.trace if c.parent == parent.id]
    assert [c.name for c in children] == ["list.index", "builtins.len", "builtins.abs"]
    index, after, last = children
    assert index.kind == "c"
    assert index.end_ns <= after.start_ns and after.end_ns <= last.start_ns
    assert last.end_ns <= parent.end_ns
    assert [c for c in traced.trace if c.parent == index.id] == []
    assert_nested(traced.trace)


def outer_frame(depth):
    if depth:
        return outer_frame(depth - 1)
    pytrace_cffi.start()
    len("inside")
    return None


def test_frames_active_at_start_are_seeded_and_closed():
    outer_frame(3)
    len("outside")                 # after outer_frame returned, still tracing
    trace = pytrace_cffi.stop()
    frames = named(trace, ": outer_frame")
    assert len(frames) == 4
    assert all(f.start_ns == trace.start_ns for f in frames)
    assert all(f.end_ns < trace.stop_ns for f in frames)
    this_test = named(trace, ": test_frames_active_at_start_are_seeded_and_closed")
    assert len(this_test) == 1
    # still running at stop: closed at stop time
    assert this_test[0].end_ns == trace.stop_ns
    assert frames[0].parent == this_test[0].id
    lens = [c for c in trace if c.name == "builtins.len"]
    assert [l.parent for l in lens] == [frames[-1].id, this_test[0].id]
    # our own start()/stop() machinery stays out of the trace
    assert not [c for c in trace if "pytrace_cffi" + __import__("os").sep in c.name]
    assert_nested(trace)


@pytest.mark.parametrize("how", ["start", "trace"])
def test_seeding_is_capped_at_128_frames(how):
    context = pytrace_cffi.trace()

    def dive(depth):
        if depth:
            return dive(depth - 1)
        if how == "start":
            pytrace_cffi.start()
        else:
            context.__enter__()     # one frame of ours more than start()
        return None

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 1000))
    try:
        dive(200)
    finally:
        sys.setrecursionlimit(old)
    if how == "start":
        trace = pytrace_cffi.stop()
    else:
        context.__exit__(None, None, None)
        trace = context.trace
    here = threading.get_native_id()
    seeded = [c for c in trace if c.thread == here and c.start_ns == trace.start_ns]
    # The 128 innermost frames of the program at start are seeded: start()'s own
    # (pytrace_cffi.start, Session.start), which traces leave out, are not
    # seeded and do not count. 128 of the 201 dive frames, each the parent of
    # the next; the outer dive frames and this test's frame are absent.
    assert [c.name.rpartition(": ")[2] for c in seeded] == ["dive"] * 128
    assert seeded[0].parent is None
    assert [c.parent for c in seeded[1:]] == [c.id for c in seeded[:-1]]
    assert len(named(trace, ": dive")) == 128
    assert named(trace, ": test_seeding_is_capped_at_128_frames") == []
    assert_nested(trace)


def test_frames_start_does_not_seed_still_leave_the_max_depth_count():
    """start()'s own frames are not seeded but return while tracing: under
    max_depth they leave the depth count as they entered it, so the calls made
    while the seeded frames unwind are recorded exactly down to max_depth."""
    def leaf():
        pass

    def dive(depth):
        if depth:
            dive(depth - 1)
            leaf()
            return
        pytrace_cffi.start(max_depth=4)

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 1000))
    try:
        dive(150)
    finally:
        sys.setrecursionlimit(old)
    trace = pytrace_cffi.stop()
    by_id = {c.id: c for c in trace}
    # The 128 innermost dive frames (depth 127 down to 0) are seeded; the
    # outermost 4 are recorded, 124 suppressed. On the way out, the leaf calls of
    # the recorded dive(125..127) are recorded under them (4 deep at most); those
    # of dive(128..150), no longer under a recorded call, as roots.
    dives = named(trace, ": dive")
    assert len(dives) == 4 and all(c.start_ns == trace.start_ns for c in dives)
    leaves = named(trace, ": leaf")
    under = [c for c in leaves if c.parent is not None]
    assert len(under) == 3 and {by_id[c.parent].name for c in under} == {dives[0].name}
    assert [c.parent for c in under] == [dives[2].id, dives[1].id, dives[0].id]
    assert len(leaves) - len(under) == 150 - 127
    assert_nested(trace)


def sleeper(seconds):
    import time
    time.sleep(seconds)


@pytest.mark.parametrize("where", ["memory", "spilled"])
def test_pause_longer_than_a_32_bit_tick_delta_keeps_time(where, tmp_path):
    """A pause past 2^32 ticks is carried by a TIME aux event: in memory, and written
    to events.bin and read back (spilled)."""
    from pytrace_cffi import _clock
    pause = (2 ** 32) * _clock.ns_per_tick() / 1e9 + 0.1
    if pause > 5:
        pytest.skip(f"the event clock would need a {pause:.1f} s pause")
    options = {"max_events": 600, "output": str(tmp_path / "spill")} if where == "spilled" \
        else {}
    with pytrace_cffi.trace(**options) as traced:
        sleeper(pause)
        len("after")
    trace = traced.trace if where == "memory" else pytrace_cffi.load(str(tmp_path / "spill"))
    (call,) = named(trace, ": sleeper")
    # a broken TIME record would be off by a whole 2^32 ticks (seconds)
    assert abs((call.end_ns - call.start_ns) / 1e9 - pause) < 0.25
    (after,) = [c for c in trace if c.name == "builtins.len"]
    assert after.start_ns >= call.end_ns
    assert_nested(trace)
