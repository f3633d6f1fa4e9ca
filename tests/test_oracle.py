"""The C tracer against the pure-Python sys.setprofile oracle, call for call, on
whatever interpreter runs the tests (tests/run_all.sh runs every one present)."""
import importlib
import os
import sys
import time
from collections import Counter

import pytest

import pytrace_cffi

from helpers import assert_nested, diff, in_files, strip_outside_parents, trace_counts
from reference_tracer import ReferenceTracer
from replay_reference import table_checked_against_replay

WORKLOADS = ["recursion", "builtins_calls", "builtins_nested", "reused_addresses", "generators", "exceptions", "objects",
             "asyncio_tasks", "threads", "shared_dispatch_calls", "bound_builtins",
             "shared_dispatch_methods"]
# workloads that import tests/ext/shared_dispatch.c, built by this fixture first
NEEDS_EXTENSION = {"shared_dispatch_calls": "shared_dispatch_ext",
                   "shared_dispatch_methods": "shared_dispatch_ext"}


def _files(module):
    return [os.path.abspath(module.__file__)]


@pytest.mark.parametrize("name", WORKLOADS)
def test_calls_match_oracle(name, request):
    if name in NEEDS_EXTENSION:
        request.getfixturevalue(NEEDS_EXTENSION[name])
    module = importlib.import_module(f"workloads.{name}")
    keep = in_files(_files(module))
    module.run()                                  # warm caches alike for both runs

    with ReferenceTracer() as reference:
        expected_result = module.run()
    with pytrace_cffi.trace() as traced:
        result = module.run()

    assert result == expected_result
    expected = strip_outside_parents(reference.counts(keep), lambda p: keep(p, None, "python"))
    ours = strip_outside_parents(trace_counts(traced.trace, keep),
                                 lambda p: keep(p, None, "python"))
    assert sum(expected.values()) > 0
    assert ours == expected, f"{sys.version_info[:2]} {name}:\n{diff(ours, expected)}"
    assert_nested(traced.trace)
    # the walk's slice table is what the replay reference makes of the same events
    assert table_checked_against_replay(traced.trace)


def test_no_c_calls_option_keeps_python_calls_only():
    module = importlib.import_module("workloads.builtins_calls")
    keep = in_files(_files(module))
    with ReferenceTracer() as reference:
        module.run()
    with pytrace_cffi.trace(c_calls=False) as traced:
        module.run()
    assert all(call.kind == "python" for call in traced.trace)
    # Parents differ by design (a generator run by str.join hangs under run), so
    # compare per-function counts.
    expected = Counter()
    for (name, _, kind), n in reference.counts(keep).items():
        if kind == "python":
            expected[name] += n
    ours = Counter()
    for (name, _, _), n in trace_counts(traced.trace, keep).items():
        ours[name] += n
    assert ours == expected


def test_bound_builtin_unwrapping_matches_this_interpreter():
    """The sys.monitoring backend looks inside bound methods of built-ins exactly
    where this interpreter's sys.setprofile does (decided from the version at
    tracer creation): checked against sys.setprofile itself."""
    import types
    from pytrace_cffi._tracer import (USE_MONITORING, monitoring_unwraps_bound_builtins,
                                      profile_unwraps_bound_builtins)
    reported = []

    def hook(frame, event, arg):
        if event == "c_call" and arg is len:
            reported.append(arg)
    method = types.MethodType(len, [1, 2])
    sys.setprofile(hook)
    try:
        method()
    finally:
        sys.setprofile(None)
    if USE_MONITORING:
        assert bool(reported) == profile_unwraps_bound_builtins()
    assert profile_unwraps_bound_builtins((3, 12, 4, "final", 0)) is False
    assert profile_unwraps_bound_builtins((3, 12, 5, "final", 0)) is True
    assert profile_unwraps_bound_builtins((3, 13, 0, "beta", 4)) is False
    assert profile_unwraps_bound_builtins((3, 13, 0, "candidate", 1)) is True
    # 3.14's CALL passes the bound method's function and self: reported, with no
    # unwrapping left to the backend (sys.setprofile on 3.14.10 and 3.15.2 says so)
    assert profile_unwraps_bound_builtins((3, 14, 0, "final", 0)) is True
    assert profile_unwraps_bound_builtins((3, 15, 2, "final", 0)) is True
    assert monitoring_unwraps_bound_builtins((3, 12, 5, "final", 0)) is True
    assert monitoring_unwraps_bound_builtins((3, 13, 1, "final", 0)) is True
    assert monitoring_unwraps_bound_builtins((3, 12, 4, "final", 0)) is False
    assert monitoring_unwraps_bound_builtins((3, 14, 0, "final", 0)) is False
    assert monitoring_unwraps_bound_builtins((3, 11, 9, "final", 0)) is False


NAPS = (0.005, 0.04, 0.01)          # seconds; the longest shows a 1% clock-rate error
CLOCK_SLACK_NS = 200_000            # the clock mapping's error, far below 1% of 40 ms


def napping(seconds, noted):
    noted.append(time.monotonic_ns())
    time.sleep(seconds)
    noted.append(time.monotonic_ns())


def napping_in_turn(noted):
    for seconds in NAPS:
        napping(seconds, noted)


def test_call_times_agree_with_the_programs_own_clock():
    """The oracle compares counts only; times are held to the program's own
    time.monotonic_ns() readings (the clock Call times are on) and to sleeps of
    known length: each call lies where the readings taken inside and around it
    put it, and lasts at least as long as the readings inside it say."""
    noted = []
    napping_in_turn([])                                 # warm up
    before = time.monotonic_ns()
    with pytrace_cffi.trace() as traced:
        napping_in_turn(noted)
    after = time.monotonic_ns()
    calls = list(traced.trace)
    assert_nested(traced.trace)                         # inside parents, non-negative
    naps = sorted((c for c in calls if c.name.endswith(": napping")), key=lambda c: c.start_ns)
    assert len(naps) == len(NAPS)
    [outer] = [c for c in calls if c.name.endswith(": napping_in_turn")]
    assert before - CLOCK_SLACK_NS <= outer.start_ns <= noted[0] + CLOCK_SLACK_NS
    assert noted[-1] - CLOCK_SLACK_NS <= outer.end_ns <= after + CLOCK_SLACK_NS
    for i, (nap, seconds) in enumerate(zip(naps, NAPS)):
        entered, leaving = noted[2 * i], noted[2 * i + 1]
        assert nap.start_ns <= entered + CLOCK_SLACK_NS
        assert nap.end_ns >= leaving - CLOCK_SLACK_NS
        assert nap.end_ns - nap.start_ns >= leaving - entered - CLOCK_SLACK_NS
        if i:                                           # after the nap before it
            assert nap.start_ns >= noted[2 * i - 1] - CLOCK_SLACK_NS
        [sleep] = [c for c in calls if c.parent == nap.id and c.name == "time.sleep"]
        assert entered - CLOCK_SLACK_NS <= sleep.start_ns
        assert sleep.end_ns <= leaving + CLOCK_SLACK_NS
        assert sleep.end_ns - sleep.start_ns >= seconds * 1e9 - CLOCK_SLACK_NS
