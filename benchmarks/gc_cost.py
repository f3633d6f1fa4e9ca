"""What recording garbage collections (start(log_gc=True)) costs (run by hand):

    python benchmarks/gc_cost.py [--rounds N] [--items N]

The workload allocates containers in small functions (a dict, a tuple and a list
per item, some kept a while), so the collector runs a young collection every few
hundred allocations: the case where log_gc does the most per call. Each pass
times, in an order rotating from pass to pass, the workload untraced, under the
floor (start(noop=True): the hooks installed, nothing recorded), traced, and
traced with log_gc; the ratios are paired within a pass (this VM drifts between
fast and slow phases slower than a pass), medians with quartiles over the passes.
The last line says whether log_gc's cost stands out of the noise: the spread of
traced/floor over the passes against the median difference.
"""
import argparse
import gc
import platform
import statistics
import sys
import time

import pytrace_cffi


def make_item(i):
    return {"index": i, "pair": (i, i + 1), "tags": [i % 7]}


def allocate(items):
    """items dicts, each with a tuple and a list: 3 containers an item, kept in
    batches of 20,000 (the collector counts the containers made less those freed:
    freed at once, they would trigger no collection)."""
    kept = []
    for i in range(items):
        kept.append(make_item(i))
        if len(kept) == 20_000:
            kept = []
    return len(kept)


def collections():
    return sum(stats["collections"] for stats in gc.get_stats())


def timed(run, items, options):
    before = collections()
    started = time.perf_counter()
    if options is not None:
        pytrace_cffi.start(**options)
    run(items)
    if options is not None:
        trace = pytrace_cffi.stop()
    elapsed = time.perf_counter() - started
    gc_slices = (sum(1 for call in trace if call.name.startswith("gc (generation"))
                 if options and options.get("log_gc") else None)
    return elapsed, collections() - before, gc_slices


CONFIGS = {"untraced": None, "floor": {"noop": True}, "traced": {"log_gc": False},
           "traced+log_gc": {"log_gc": True}}


def per_collection_us(log_gc, collections=2000, repeat=7):
    """Microseconds per gc.collect(0) (a young collection of nearly nothing)
    while tracing, best of repeat: what log_gc adds to each collection shows as
    the difference, without the workload's noise around it."""
    best = float("inf")
    for _ in range(repeat):
        pytrace_cffi.start(log_gc=log_gc)
        started = time.perf_counter()
        for _ in range(collections):
            gc.collect(0)
        elapsed = time.perf_counter() - started
        pytrace_cffi.stop()
        best = min(best, elapsed / collections)
    return best * 1e6


def quartiles(values):
    values = sorted(values)
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return statistics.median(values), q[0], q[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--items", type=int, default=100_000)
    args = parser.parse_args()
    names = list(CONFIGS)
    times = {name: [] for name in names}
    for name in names:                          # warm-up
        timed(allocate, args.items, CONFIGS[name])
    collected, slices = [], []
    for round_index in range(args.rounds):
        order = names[round_index % len(names):] + names[:round_index % len(names)]
        for name in order:
            elapsed, made, gc_slices = timed(allocate, args.items, CONFIGS[name])
            times[name].append(elapsed)
            if name == "traced+log_gc":
                collected.append(made)
                slices.append(gc_slices)
    print(f"python {platform.python_version()}, pytrace_cffi from "
          f"{pytrace_cffi.__file__}, {args.items} items, {args.rounds} passes; "
          f"{statistics.median(collected):.0f} collections per run "
          f"({statistics.median(slices):.0f} gc slices in its trace)")
    floor = times["floor"]
    for name in ("untraced", "traced", "traced+log_gc"):
        median, low, high = quartiles([a / b for a, b in zip(times[name], floor)])
        print(f"  {name + '/floor':22} {median:.3f}  (quartiles {low:.3f}-{high:.3f})")
    with_gc = [a / b for a, b in zip(times["traced+log_gc"], times["traced"])]
    median, low, high = quartiles(with_gc)
    per_collection = (statistics.median(times["traced+log_gc"])
                      - statistics.median(times["traced"])) / max(1, statistics.median(collected))
    print(f"  {'log_gc/traced':22} {median:.3f}  (quartiles {low:.3f}-{high:.3f}); "
          f"{per_collection * 1e6:+.2f} us per collection")
    without, with_gc = per_collection_us(False), per_collection_us(True)
    added = (with_gc - without) * statistics.median(collected) / 1e6
    print(f"  gc.collect(0) traced: {without:.2f} us, with log_gc {with_gc:.2f} us: "
          f"{with_gc - without:+.2f} us a collection, so {added * 1e3:.3f} ms of the "
          f"traced run's {statistics.median(times['traced']) * 1e3:.1f} ms "
          f"({added / statistics.median(times['traced']):.2%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
