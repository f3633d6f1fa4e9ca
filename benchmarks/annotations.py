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
import sys
import time
import traceback

import pytrace_cffi
from pytrace_cffi import capture_stack, record_function, symbolize

ROUNDS = 15
DEPTH = 30


def best_of(loops):
    """{name: best seconds per call} of loops {name: (loop(n), n)}, timeit's way:
    the minimum over ROUNDS rounds, as noise only ever adds time. The loops take
    turns within each round, so a slow spell of the machine (this VM alternates
    between a fast and a slow phase) falls on all of them alike."""
    best = {name: float("inf") for name in loops}
    for _ in range(ROUNDS):
        for name, (loop, repeat) in loops.items():
            start = time.perf_counter()
            loop(repeat)
            best[name] = min(best[name], (time.perf_counter() - start) / repeat)
    return best


def best_traced(loop, repeat, start, stop):
    """(best seconds per call of loop(repeat) while a tracer records, best of the
    nullcontext loop in the same rounds). Each round times the nullcontext loop
    untraced, then the loop under a tracer of its own (started and stopped outside
    the timing), so that both bests come from the same phases of the machine."""
    best, best_null = float("inf"), float("inf")
    for _ in range(ROUNDS):
        began = time.perf_counter()
        with_nullcontext(repeat)
        best_null = min(best_null, (time.perf_counter() - began) / repeat)
        start()
        began = time.perf_counter()
        loop(repeat)
        best = min(best, (time.perf_counter() - began) / repeat)
        stop()
    return best, best_null


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
    n = 50_000
    loops = {"null": (with_nullcontext, n), "idle": (with_record_function, n)}
    if torch:
        loops["torch_idle"] = (with_torch_fast, n)
        loops["torch_slow"] = (with_torch_record_function, n // 20)
    best = best_of(loops)
    null, idle, torch_idle = best["null"], best["idle"], best.get("torch_idle")
    report.row("nullcontext `with`", null)
    report.row("record_function, not tracing", idle, torch_idle,
               target=f"<= 0.5x nullcontext: {idle / null:.2f}x")
    if torch:
        print(f"{'  (torch.profiler.record_function)':34}{'':10}{best['torch_slow'] * 1e9:8.2f}ns")
    tracing, null_then = best_traced(with_record_function, n // 4, pytrace_cffi.start,
                                     pytrace_cffi.stop)
    torch_tracing = None
    if torch:
        profiles = []
        torch_tracing, _ = best_traced(with_torch_fast, n // 4,
                                       lambda: profiles.append(torch["profile"]().__enter__()),
                                       lambda: profiles.pop().__exit__(None, None, None))
    report.row("record_function, tracing", tracing, torch_tracing,
               target=f"<= 1.5x nullcontext: {tracing / null_then:.2f}x "
                      "(nullcontext in the same rounds; includes tracing the loop)")


def stack_costs(report, torch):
    depth = DEPTH - len(traceback.extract_stack())
    captures = {"ours": capture_stack}
    if torch:
        captures["torch"] = torch["gather"]

    def in_fresh_frames(capture):
        return lambda k: [at_depth(depth, capture) for _ in range(k)]

    def in_existing_frames(capture):
        return lambda k: [capture() for _ in range(k)]

    fresh = best_of({"reach": (in_fresh_frames(tuple), 10_000),
                     **{name: (in_fresh_frames(c), 10_000) for name, c in captures.items()},
                     "extract_stack": (in_fresh_frames(traceback.extract_stack), 500)})
    fresh = {name: seconds - fresh["reach"] for name, seconds in fresh.items()}
    existing = at_depth(depth, lambda: best_of(
        {name: (in_existing_frames(c), 10_000) for name, c in captures.items()}))

    frames = len(at_depth(depth, capture_stack))
    report.row(f"capture_stack ({frames} frames), existing", existing["ours"],
               existing.get("torch"), unit="us",
               target=f"<= 1 us: {'met' if existing['ours'] <= 1e-6 else 'NOT met'}")
    report.row(f"capture_stack ({frames} frames), fresh", fresh["ours"], fresh.get("torch"),
               unit="us", target="(frame objects created by the walk)")
    report.row("traceback.extract_stack, fresh", fresh["extract_stack"], unit="us")

    stacks = {name: [at_depth(depth, c) for _ in range(1000)] for name, c in captures.items()}
    symbolizers = {"ours": symbolize, "torch": torch and torch["symbolize"]}
    sym = best_of({name: ((lambda k, f=symbolizers[name], s=s: [f(s) for _ in range(k)]), 5)
                   for name, s in stacks.items()})
    report.row("symbolize 1000 stacks", sym["ours"], sym.get("torch"), unit="ms",
               target=f"<= 2 ms: {'met' if sym['ours'] <= 2e-3 else 'NOT met'}")


def main():
    torch = torch_recorders()
    print(f"Python {platform.python_version()} on {platform.machine()}, "
          f"{time.strftime('%Y-%m-%d')}, torch {torch['version'] if torch else 'not installed'}")
    report = Report()
    recorder_costs(report, torch)
    stack_costs(report, torch)


if __name__ == "__main__":
    sys.exit(main())
