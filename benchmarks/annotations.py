"""Costs of the user-facing recorders (run by hand):

    python benchmarks/annotations.py

record_function per `with` (not tracing / tracing) against contextlib.nullcontext,
capture_stack 30 frames deep against traceback.extract_stack, and symbolize of
1000 such stacks. Medians of several rounds, in one process.
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


def per_call(function, repeat):
    timings = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        function(repeat)
        timings.append((time.perf_counter() - start) / repeat)
    return statistics.median(timings)


def with_nullcontext(n):
    for _ in range(n):
        with contextlib.nullcontext():
            pass


def with_record_function(n):
    for _ in range(n):
        with record_function("region"):
            pass


def at_depth(depth, function):
    if depth > 1:
        return at_depth(depth - 1, function)
    return function()


def main():
    print(f"Python {platform.python_version()} on {platform.machine()}, "
          f"{time.strftime('%Y-%m-%d')}")
    n = 200_000
    null = per_call(with_nullcontext, n)
    idle = per_call(with_record_function, n)
    pytrace_cffi.start()
    tracing = per_call(with_record_function, n // 4)
    pytrace_cffi.stop()
    print(f"nullcontext with:               {null * 1e9:8.1f} ns")
    print(f"record_function, not tracing:   {idle * 1e9:8.1f} ns  ({idle / null:.2f}x nullcontext)")
    print(f"record_function, tracing:       {tracing * 1e9:8.1f} ns  "
          f"({tracing / null:.2f}x nullcontext; includes the tracer's own cost of the loop)")

    # Each capture runs in fresh frames 30 deep; the cost of reaching that depth
    # (measured with a no-op at the bottom) is subtracted.
    depth = 30 - len(traceback.extract_stack())
    reach = per_call(lambda k: [at_depth(depth, tuple) for _ in range(k)], 20_000)
    capture = per_call(lambda k: [at_depth(depth, capture_stack) for _ in range(k)], 20_000)
    extract = per_call(lambda k: [at_depth(depth, traceback.extract_stack) for _ in range(k)],
                       2_000)
    frames = len(at_depth(depth, capture_stack))
    print(f"capture_stack ({frames} frames):     {(capture - reach) * 1e6:8.2f} us  (fresh frames)")
    same = at_depth(depth, lambda: per_call(lambda k: [capture_stack() for _ in range(k)], 20_000))
    print(f"capture_stack, same frames again:{same * 1e6:8.2f} us  (frame objects exist)")
    print(f"traceback.extract_stack:        {(extract - reach) * 1e6:8.2f} us")
    stacks = [at_depth(depth, capture_stack) for _ in range(1000)]
    sym = per_call(lambda k: [symbolize(stacks) for _ in range(k)], 5)
    print(f"symbolize 1000 stacks:          {sym * 1e3:8.2f} ms")


if __name__ == "__main__":
    sys.exit(main())
