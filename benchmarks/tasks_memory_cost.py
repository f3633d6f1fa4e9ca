"""What log_async and memory_interval_ms cost when on (run by hand):

    python benchmarks/tasks_memory_cost.py [--rounds N]

log_async on an asyncio workload that is all task steps (200 tasks each awaiting
50 times: 10,200 steps, each a few calls), traced with and without it; the
memory sampler on fib(25) (243k calls, no allocation to speak of), traced without
it and with a sample every 10 ms and every 1 ms. Each pass times every
configuration once, in an order rotating from pass to pass; ratios are paired
within a pass (this VM drifts between fast and slow phases slower than a pass),
medians with quartiles over the passes.
"""
import argparse
import asyncio
import platform
import statistics
import sys
import time

import pytrace_cffi

TASKS, AWAITS, FIB_N = 200, 50, 25


async def step_a_lot(awaits):
    total = 0
    for i in range(awaits):
        await asyncio.sleep(0)
        total += i
    return total


async def many_tasks():
    return sum(await asyncio.gather(*(asyncio.create_task(step_a_lot(AWAITS))
                                      for _ in range(TASKS))))


def run_tasks():
    asyncio.run(many_tasks())


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def run_fib():
    fib(FIB_N)


def timed(run, options):
    started = time.perf_counter()
    pytrace_cffi.start(**options)
    run()
    trace = pytrace_cffi.stop()
    elapsed = time.perf_counter() - started
    del trace
    return elapsed


def quartiles(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return statistics.median(values), q[0], q[-1]


def compare(title, run, configs, rounds):
    names = list(configs)
    times = {name: [] for name in names}
    for name in names:                          # warm-up
        timed(run, configs[name])
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed(run, configs[name]))
    base = names[0]
    print(f"  {title}: {base} {statistics.median(times[base]) * 1e3:.1f} ms")
    for name in names[1:]:
        median, low, high = quartiles([a / b for a, b in zip(times[name], times[base])])
        print(f"    {name + '/' + base:36} {median:.3f}  (quartiles {low:.3f}-{high:.3f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, pytrace_cffi from {pytrace_cffi.__file__}, "
          f"{args.rounds} passes")
    compare(f"{TASKS} tasks x {AWAITS} awaits", run_tasks,
            {"traced": {}, "traced+log_async": {"log_async": True}}, args.rounds)
    compare(f"fib({FIB_N})", run_fib,
            {"traced": {}, "traced+memory 10 ms": {"memory_interval_ms": 10},
             "traced+memory 1 ms": {"memory_interval_ms": 1}}, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
