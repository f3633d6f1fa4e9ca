"""What log_exceptions and log_args cost, on and off (docs/PERFORMANCE.md).

Off they register nothing, so ab.py's ratios measure that; this measures them on:
fib(22) traced with each option on but nothing to record (no exception, no function
matching) against plain tracing, and per exception raised and caught, and per call
of a logged function (2 arguments and a return value summarized), against the same
work traced without the option. Each round runs every configuration once, in a new
random order (this VM drifts between fast and slow phases, and what ran just before
matters); the best round of each is kept.

    python benchmarks/log_options.py [rounds]
"""
import random
import sys
import time

import pytrace_cffi


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def raiser(i):
    raise ValueError(i)


def exceptions(n=20000):
    for i in range(n):
        try:
            raiser(i)
        except ValueError:
            pass


def logged(a, b):
    return a + b


def calls(n=20000):
    for i in range(n):
        logged(i, 2.5)


CONFIGS = {
    "fib": (lambda: fib(22), {}),
    "fib, log_exceptions": (lambda: fib(22), {"log_exceptions": True}),
    "fib, log_args matching nothing": (lambda: fib(22), {"log_args": "no_such_function"}),
    "exceptions": (exceptions, {}),
    "exceptions, log_exceptions": (exceptions, {"log_exceptions": True}),
    "calls": (calls, {}),
    "calls, log_args": (calls, {"log_args": "logged"}),
}


def timed(work, options):
    pytrace_cffi.start(c_calls=False, **options)
    begin = time.perf_counter()
    work()
    end = time.perf_counter()
    pytrace_cffi.stop()
    return end - begin


def main(rounds=7):
    best = {name: float("inf") for name in CONFIGS}
    names = list(CONFIGS)
    for _ in range(rounds):
        random.shuffle(names)
        for name in names:
            work, options = CONFIGS[name]
            best[name] = min(best[name], timed(work, options))
    version = ".".join(map(str, sys.version_info[:2]))
    print(f"{version}: fib(22) with log_exceptions / without: "
          f"{best['fib, log_exceptions'] / best['fib']:.3f}; with log_args matching "
          f"nothing / without: {best['fib, log_args matching nothing'] / best['fib']:.3f}")
    print(f"  per exception raised and caught: +"
          f"{(best['exceptions, log_exceptions'] - best['exceptions']) / 20000 * 1e6:.1f} us "
          f"(traced without: {best['exceptions'] / 20000 * 1e6:.2f} us)")
    print(f"  per logged call: +{(best['calls, log_args'] - best['calls']) / 20000 * 1e6:.1f} us "
          f"(traced without: {best['calls'] / 20000 * 1e6:.2f} us)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
