"""Size and speed of each export format on one trace (run by hand):

    python benchmarks/export_formats.py [--fib N] [--rounds R]

Traces fib(N) (default 25: 242785 calls, 485570 events; 26 gives ~785k events),
then writes it as .pftrace (uncompressed, and with deflate-compressed packets, the
default), Chrome .json and .json.gz, each R times (default 5) into a temporary
directory. Reports bytes per call and the best time of the rounds as events per
second (a call is two events: its begin and its end). Time is wall clock of the
whole export call, file writing included; the files go to tmpfs when /dev/shm
exists, so the disk's speed does not enter.

Targets (issue 13): .pftrace <= 30 bytes per call uncompressed, <= 4 compressed;
export >= 20 M events/s uncompressed.
"""
import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

import pytrace_cffi


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


FORMATS = [
    (".pftrace", "pftrace, uncompressed", lambda t, p: t.export_perfetto(p, compress=False)),
    (".pftrace", "pftrace, compressed (default)", lambda t, p: t.export_perfetto(p)),
    (".json", "Chrome JSON", lambda t, p: t.export_chrome_trace(p)),
    (".json.gz", "Chrome JSON, gzip", lambda t, p: t.export_chrome_trace(p)),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fib", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with pytrace_cffi.trace() as t:
        fib(args.fib)
    trace = t.trace
    calls = len(trace)
    print(f"Python {platform.python_version()} ({sys.executable}), "
          f"fib({args.fib}): {calls} calls, {2 * calls} events, "
          f"best of {args.rounds} rounds")
    where = "/dev/shm" if os.path.isdir("/dev/shm") else None
    directory = tempfile.mkdtemp(prefix="pt-export-", dir=where)
    try:
        print(f"{'format':32} {'bytes':>12} {'B/call':>8} {'seconds':>9} {'M events/s':>11}")
        for suffix, label, export in FORMATS:
            path = os.path.join(directory, "out" + suffix)
            best = float("inf")
            for _ in range(args.rounds):
                begin = time.perf_counter()
                export(trace, path)
                best = min(best, time.perf_counter() - begin)
            size = os.path.getsize(path)
            print(f"{label:32} {size:12d} {size / calls:8.2f} {best:9.4f} "
                  f"{2 * calls / best / 1e6:11.1f}")
            os.unlink(path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
