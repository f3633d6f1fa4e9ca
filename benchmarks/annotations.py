"""Costs of the user-facing recorders (run by hand):

    python benchmarks/annotations.py

record_function per `with` (not tracing / tracing) against contextlib.nullcontext,
capture_stack 30 frames deep against traceback.extract_stack, and symbolize of
1000 such stacks. Medians of several rounds, in one process. When torch imports,
its own recorders (torch.profiler.record_function, _RecordFunctionFast,
gather_traceback, symbolize_tracebacks) are measured by the same code, so the
comparison does not depend on how anyone else timed them.

Stacks are timed two ways, because they cost very different amounts:
- "existing frames": a second capture in frames a capture already walked, so their
  frame objects exist (how a loop calling gather_traceback at one depth measures);
- "fresh frames": every capture at the bottom of a new 30-deep call chain. From 3.11
  the interpreter creates a frame's Python object only when asked, and the public
  API's walk (PyFrame_GetBack) asks for every one; the cost of reaching the depth,
  measured with a no-op at the bottom, is subtracted.
"""
import contextlib
import platform
import statistics
import sys
import time
import traceback

import pytrace_cffi
from pytrace_cffi import capture_stack, record_function, symbolize

ROUNDS = 7
DEPTH = 30


def per_call(function, repeat):
    timings = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        function(repeat)
        timings.append((time.perf_counter() - start) / repeat)
    return statistics.median(timings)


# One loop per recorder, all of one shape (a global looked up and called in the
# `with`), so that they differ only in the context manager.
def with_nullcontext(n):
    for _ in range(n):
        with contextlib.nullcontext():
            pass


def with_record_function(n):
    for _ in range(n):
        with record_function("region"):
            pass


def with_torch_fast(n):
    for _ in range(n):
        with torch_fast("region"):
            pass


def with_torch_record_function(n):
    for _ in range(n):
        with torch_record_function("region"):
            pass


torch_fast = torch_record_function = None     # set by torch_recorders()


def at_depth(depth, function):
    if depth > 1:
        return at_depth(depth - 1, function)
    return function()


def torch_recorders():
    """torch's equivalents, or None when torch is not installed."""
    global torch_fast, torch_record_function
    try:
        import torch
        from torch._C._profiler import gather_traceback, symbolize_tracebacks
    except ImportError:
        return None
    torch_fast = torch._C._profiler._RecordFunctionFast
    torch_record_function = torch.profiler.record_function
    return {
        "profile": lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]),
        "gather": lambda: gather_traceback(True, False, False),   # python, script, cpp
        "symbolize": symbolize_tracebacks,
        "version": torch.__version__,
    }


class Report:
    def __init__(self):
        print(f"{'':34}{'ours':>10}{'torch':>10}   target (issue 7)")

    def row(self, what, ours, torch=None, unit="ns", target=""):
        scale = {"ns": 1e9, "us": 1e6, "ms": 1e3}[unit]
        theirs = f"{torch * scale:8.2f}{unit}" if torch is not None else f"{'':10}"
        print(f"{what:34}{ours * scale:8.2f}{unit}{theirs}   {target}")


def recorder_costs(report, torch):
    n = 200_000
    null = per_call(with_nullcontext, n)
    idle = per_call(with_record_function, n)
    torch_idle = torch and per_call(with_torch_fast, n)
    report.row("nullcontext `with`", null)
    report.row("record_function, not tracing", idle, torch_idle,
               target=f"<= 0.5x nullcontext: {idle / null:.2f}x")
    if torch:
        slow = per_call(with_torch_record_function, n // 10)
        print(f"{'  (torch.profiler.record_function)':34}{'':10}{slow * 1e9:8.2f}ns")
    pytrace_cffi.start()
    tracing = per_call(with_record_function, n // 4)
    pytrace_cffi.stop()
    torch_tracing = None
    if torch:
        with torch["profile"]():
            torch_tracing = per_call(with_torch_fast, n // 4)
    report.row("record_function, tracing", tracing, torch_tracing,
               target=f"<= 1.5x nullcontext: {tracing / null:.2f}x "
                      "(includes tracing the loop itself)")


def stack_costs(report, torch):
    depth = DEPTH - len(traceback.extract_stack())
    reach = per_call(lambda k: [at_depth(depth, tuple) for _ in range(k)], 20_000)

    def existing(capture):
        return at_depth(depth, lambda: per_call(lambda k: [capture() for _ in range(k)],
                                                20_000))

    def fresh(capture, repeat=20_000):
        return per_call(lambda k: [at_depth(depth, capture) for _ in range(k)], repeat) - reach

    frames = len(at_depth(depth, capture_stack))
    ours_existing, ours_fresh = existing(capture_stack), fresh(capture_stack)
    torch_existing = torch and existing(torch["gather"])
    torch_fresh = torch and fresh(torch["gather"])
    report.row(f"capture_stack ({frames} frames), existing", ours_existing, torch_existing,
               unit="us", target=f"<= 1 us: {'met' if ours_existing <= 1e-6 else 'NOT met'}")
    report.row(f"capture_stack ({frames} frames), fresh", ours_fresh, torch_fresh, unit="us",
               target="(frame objects created by the walk)")
    extract = fresh(traceback.extract_stack, 2_000)
    report.row("traceback.extract_stack, fresh", extract, unit="us")

    stacks = [at_depth(depth, capture_stack) for _ in range(1000)]
    sym = per_call(lambda k: [symbolize(stacks) for _ in range(k)], 5)
    torch_sym = None
    if torch:
        theirs = [at_depth(depth, torch["gather"]) for _ in range(1000)]
        torch_sym = per_call(lambda k: [torch["symbolize"](theirs) for _ in range(k)], 5)
    report.row("symbolize 1000 stacks", sym, torch_sym, unit="ms",
               target=f"<= 2 ms: {'met' if sym <= 2e-3 else 'NOT met'}")


def main():
    torch = torch_recorders()
    print(f"Python {platform.python_version()} on {platform.machine()}, "
          f"{time.strftime('%Y-%m-%d')}, torch {torch['version'] if torch else 'not installed'}")
    report = Report()
    recorder_costs(report, torch)
    stack_costs(report, torch)


if __name__ == "__main__":
    sys.exit(main())
