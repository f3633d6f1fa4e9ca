#!/usr/bin/env python3
"""How fast a stopped trace is first counted (run by hand; not a test):

    python benchmarks/scan.py [--fib N] [--rounds R] [--callgrind]

Traces fib(N) (default 32: ~7M calls, ~14M events) with built-in calls mixed in
(a len() per call), stops, then times, best of R rounds (default 5), each on a
fresh copy of the trace's lazy parts, so every round does the work a stopped
trace does once:

    count     the per-thread counts (calls shown, open at stop, deepest depth):
              what len(trace), the first export's header and the hook-loss
              check need (Streams.stats)
    scan      the full scan an emitting walk needs (Streams.scans: renames,
              calls open at stop by ordinal, args keys)
    first pftrace / first json
              a first export of the trace to /dev/null-like tmpfs files: the
              counting and every walk the export does, encoding included

and prints events/s (M) for each. --callgrind runs the counting, the scan and the
walks of a first .pftrace and a first .json (the scan and emitting walks, not the
encoding) of a smaller trace (fib(22)) under valgrind's callgrind, collecting only
inside the C functions that walk, and prints instructions per event.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytrace_cffi

SCAN_FUNCTIONS = ("pt_walk_feed", "pt_walk_finish", "pt_count_feed", "pt_count_finish")


def fib(n):
    if n < 2:
        return n
    len("x")
    return fib(n - 1) + fib(n - 2)


def traced(n):
    pytrace_cffi.start()
    fib(n)
    return pytrace_cffi.stop()


def fresh_streams(trace):
    """The trace's streams as stop() leaves them: nothing scanned yet."""
    s = trace._streams
    return type(s)(s.plan, s.sources, s.clock, s.stop_ticks, s.min_duration_ns,
                   keep_alive=s.keep_alive, lazy=True)


def best(rounds, fn):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def first_export(n, suffix, directory):
    """A fresh trace's first export (recording not timed)."""
    trace = traced(n)
    path = os.path.join(directory, "t" + suffix)
    t0 = time.perf_counter()
    if suffix == ".json":
        trace.export_chrome_trace(path)
    else:
        trace.export_perfetto(path, compress=False)
    took = time.perf_counter() - t0
    os.unlink(path)
    return took, sum(t.n_events for t in trace.threads)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fib", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--inner", choices=("count", "scan", "pftrace", "json"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner in ("pftrace", "json"):
        directory = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        try:
            _, events = first_export(a.fib, "." + a.inner, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        print("EVENTS", events)
        return
    if a.inner:
        trace = traced(a.fib)
        streams = fresh_streams(trace)
        getattr(streams, "stats" if a.inner == "count" else "scans")
        print("EVENTS", sum(t.n_events for t in trace.threads))
        return
    if a.callgrind:
        return callgrind(a)
    trace = traced(a.fib)
    events = sum(t.n_events for t in trace.threads)
    print(f"pytrace_cffi {os.path.dirname(pytrace_cffi.__file__)}, CPython "
          f"{sys.version.split()[0]}: fib({a.fib}), {events / 1e6:.1f}M events")
    count = best(a.rounds, lambda: fresh_streams(trace).stats)
    scan = best(a.rounds, lambda: fresh_streams(trace).scans)
    print(f"count          {count * 1e3:9.1f} ms  {events / count / 1e6:7.1f} M events/s")
    print(f"scan           {scan * 1e3:9.1f} ms  {events / scan / 1e6:7.1f} M events/s")
    del trace
    directory = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        for suffix, label in ((".pftrace", "first pftrace"), (".json", "first json")):
            runs = [first_export(a.fib, suffix, directory) for _ in range(max(1, a.rounds // 2))]
            took, events = min(runs)
            print(f"{label:14} {took * 1e3:9.1f} ms  {events / took / 1e6:7.1f} M events/s")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def callgrind(a):
    n = 22 if a.fib == 32 else a.fib
    for what in ("count", "scan", "pftrace", "json"):
        toggles = [f"--toggle-collect={f}" for f in SCAN_FUNCTIONS]    # (no encoder's)
        r = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                            "--callgrind-out-file=/dev/null", *toggles, sys.executable,
                            os.path.abspath(__file__), "--inner", what, "--fib", str(n)],
                           capture_output=True, text=True)
        import re
        found = re.search(r"Collected\s*:\s*(\d+)", r.stderr)
        if r.returncode or not found or "EVENTS" not in r.stdout:
            raise SystemExit(f"callgrind {what} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        events = int(r.stdout.split("EVENTS", 1)[1].split()[0])
        print(f"{what:7} fib({n}) {events} events: {int(found.group(1)) / events:7.2f} "
              f"instructions per event")


if __name__ == "__main__":
    main()
