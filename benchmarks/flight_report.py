#!/usr/bin/env python3
"""`report` on the dumps of 1,000 processes, for docs/PERFORMANCE.md ("Flight
recorder: dumps of 1,000 ranks"). Run by hand; it is not a test.

The dumps are made by the real writer: one process records a workload under the
flight recorder (a ring of --ring bytes: nested Python calls, built-ins, 2,000
distinct functions, a second thread) and dumps it --processes times with
pytrace_cffi.dump(path=DUMPDIR/proc-<n>), RANK set to n before each (so each
dump.json says its rank, as torchrun's ranks do; the pid is this one process's),
from the same place but for three "odd" ranks that dump from another function.
Then `python -m pytrace_cffi report DUMPDIR` runs --repeat times, cold start
included, and prints its median time, the dumps' size on disk and the report's
first lines. --dump-format stacks writes the stacks format (its window: the
last --window seconds).

    PYTHONPATH=. python benchmarks/flight_report.py --processes 1000
    PYTHONPATH=/work/main python benchmarks/flight_report.py   # another checkout

Run from the checkout to measure: PYTHONPATH picks which pytrace_cffi writes
and reads the dumps (both, so an older checkout measures its own format).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

WRITER = r'''
import os, sys, threading, time
import pytrace_cffi
from pytrace_cffi._core import lib
place, processes, ring, dump_format, window = sys.argv[1:6]
processes = int(processes)
ns = {}
exec(compile("\n".join(f"def layer{i}(x):\n    return x + {i}\n" for i in range(2000)),
             "/opt/job/model/layers.py", "exec"), ns)
layers = [ns[f"layer{i}"] for i in range(2000)]
options = dict(flight_recorder=ring, dumps_dir=os.path.join(place, "unused"))
if dump_format != "full":
    options.update(dump_format=dump_format, dump_window=float(window))
pytrace_cffi.start(**options)
stop = threading.Event()


def prefetch():                        # a second thread, busy now and then
    while not stop.is_set():
        sorted(range(200), key=lambda v: -v)
        time.sleep(0.001)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def forward(step):
    total = 0
    for layer in layers[step % 1000:step % 1000 + 200]:
        total = layer(total)
    return total + fib(12) + len(sorted([3, 1, 2] * 20))


worker = threading.Thread(target=prefetch, name="prefetch")
worker.start()
t0 = time.perf_counter()
step = 0
while time.perf_counter() - t0 < 3:     # the ring fills up
    forward(step)
    step += 1


def dump_as(rank):
    os.environ["RANK"] = str(rank)
    path = os.path.join(place, "dumps", f"proc-{100000 + rank}")
    if pytrace_cffi.dump(path=path, reason="benchmark") is None:
        raise SystemExit("a dump failed")


def allreduce_wait(rank):
    dump_as(rank)


def load_batch(rank):
    dump_as(rank)


t1 = time.perf_counter()
for rank in range(processes):
    (load_batch if rank in (17, 401, 802) else allreduce_wait)(rank)
    if rank % 8 == 7:
        lib.pt_flight_wait(120_000_000_000)     # (16 clones at most at a time)
lib.pt_flight_wait(120_000_000_000)
written = time.perf_counter() - t1
stop.set()
worker.join()
pytrace_cffi.stop()
print(f"WROTE {written:.1f}")
'''


def size_of(directory):
    total = 0
    by_file = {}
    for root, _, files in os.walk(directory):
        for name in files:
            size = os.path.getsize(os.path.join(root, name))
            total += size
            by_file[name] = by_file.get(name, 0) + size
    return total, by_file


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=1000)
    ap.add_argument("--ring", default="4M")
    ap.add_argument("--dump-format", default="full", choices=["full", "stacks"])
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", help="write the dumps here (kept) instead of a temporary "
                                   "directory")
    args = ap.parse_args()
    import pytrace_cffi
    print(f"pytrace_cffi from {os.path.dirname(pytrace_cffi.__file__)}, Python "
          f"{sys.version.split()[0]}")
    place = args.keep or tempfile.mkdtemp(prefix="flight-report-")
    try:
        r = subprocess.run([sys.executable, "-c", WRITER, place, str(args.processes),
                            args.ring, args.dump_format, str(args.window)],
                           capture_output=True, text=True)
        if r.returncode or "WROTE " not in r.stdout:
            raise SystemExit(r.stdout[-2000:] + r.stderr[-3000:])
        dumps = os.path.join(place, "dumps")
        total, by_file = size_of(dumps)
        print(f"{args.processes} dumps of a {args.ring} ring ({args.dump_format}) written in "
              f"{r.stdout.split('WROTE ')[1].split()[0]} s: {total / 2**20:.1f} MiB, "
              f"{total / args.processes / 2**10:.1f} KiB a process")
        for name, size in sorted(by_file.items(), key=lambda item: -item[1]):
            print(f"  {name:18} {size / args.processes / 2**10:10.1f} KiB a process")
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "pytrace_cffi", "report", dumps],
                                 capture_output=True, text=True)
            times.append(time.perf_counter() - t0)
            if out.returncode:
                raise SystemExit(out.stderr[-3000:])
        print(f"report of {args.processes} processes: median {statistics.median(times):.2f} s "
              f"(of {', '.join(f'{t:.2f}' for t in times)})")
        print("\n".join(out.stdout.splitlines()[:8]))
    finally:
        if not args.keep:
            shutil.rmtree(place, ignore_errors=True)


if __name__ == "__main__":
    main()
