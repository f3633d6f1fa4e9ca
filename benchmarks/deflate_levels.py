#!/usr/bin/env python3
"""Deflate for .pftrace's compressed packets: Python's zlib against the vendored
libdeflate (c_src/pt_deflate.c), on real .pftrace bodies (issue 22, item 2). Run by
hand; not a test:

    python benchmarks/deflate_levels.py [--rounds 7] [--repeat 4]
                                     [--zlib 1,3,6] [--libdeflate 1,2,3,4,6]

For each workload (fib and builtins_mix from the shared workloads, see
README.md; run() --repeat times in one trace), the trace is exported
uncompressed (export_perfetto(compress=False)) and its Trace.packet entries
are cut, at entry boundaries, into pieces of at most COMPRESSED_INPUT_BYTES, as
the writer's _Sink feeds compressed_packets. Each candidate (a library and a
level) then compresses every piece into bytes, as the writer does: on one
thread, and on a pool of COMPRESS_THREADS threads (zlib and cffi both let go of
the GIL while they work; a libdeflate deflater per pool thread). Each round
times every candidate once in each mode, the order rotating from round to
round; the best round is reported, as MB/s of input, M events/s (a call is two
events) and output bytes per traced call, with each output checked by
zlib.decompress once. Each round also times the whole export (trace.export_perfetto
to tmpfs, the candidate's deflate put in the writer's place), and once
uncompressed. The workloads' traces are made with the pytrace_cffi this
imports (PYTHONPATH=$PWD for the source tree built in place).
"""
import argparse
import concurrent.futures
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import zlib

import pytrace_cffi
from pytrace_cffi._core import ffi, lib
from pytrace_cffi.render import perfetto
from pytrace_cffi.render.perfetto import COMPRESS_LEVEL, COMPRESS_THREADS, COMPRESSED_INPUT_BYTES

WRITERS_DEFLATER = perfetto._Deflater
WORKLOADS_DIR = os.environ.get("PYTRACE_WORKLOADS") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "workloads")


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def builtins_mix():
    out = []
    for i in range(50000):
        out.append(len(str(i)))
    return out


def workload(name, fallback):
    """The shared workload's run(), or the local copy of it when that is missing."""
    path = os.path.join(WORKLOADS_DIR, name + ".py")
    if not os.path.exists(path):
        return fallback
    spec = importlib.util.spec_from_file_location("workload_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run


def packet_entries(body):
    """The Trace.packet entries of an uncompressed .pftrace, as memoryviews."""
    view, at, out = memoryview(body), 0, []
    while at < len(body):
        if body[at] != 0x0A:
            raise ValueError(f"not a Trace.packet entry at {at}")
        length, shift, end = 0, 0, at + 1
        while True:
            byte = body[end]
            length |= (byte & 0x7F) << shift
            shift, end = shift + 7, end + 1
            if byte < 0x80:
                break
        out.append(view[at:end + length])
        at = end + length
    return out


def pieces_of(body):
    """The entries joined into pieces of at most COMPRESSED_INPUT_BYTES (an entry
    bigger than that alone), as _Sink joins what it is given."""
    pieces, pending, size = [], [], 0
    for entry in packet_entries(body):
        if pending and size + len(entry) > COMPRESSED_INPUT_BYTES:
            pieces.append(b"".join(pending))
            pending, size = [], 0
        pending.append(entry)
        size += len(entry)
    if pending:
        pieces.append(b"".join(pending))
    return pieces


def traced(run, repeat):
    with pytrace_cffi.trace() as t:
        for _ in range(repeat):
            run()
    return t.trace


def body_of(trace, where):
    path = os.path.join(where, "body.pftrace")
    trace.export_perfetto(path, compress=False)
    with open(path, "rb") as f:
        body = f.read()
    os.remove(path)
    return body


def export(trace, candidate, where):
    """Seconds of trace.export_perfetto (compressed) with candidate's deflate in
    the writer (None: uncompressed), and the file's size."""
    path = os.path.join(where, "export.pftrace")
    saved = perfetto._Deflater
    if candidate is not None:
        perfetto._Deflater = candidate.deflater
    try:
        t0 = time.perf_counter()
        trace.export_perfetto(path, compress=candidate is not None)
        seconds = time.perf_counter() - t0
    finally:
        perfetto._Deflater = saved
    size = os.path.getsize(path)
    os.remove(path)
    return seconds, size


class Zlib:
    def __init__(self, level):
        self.name, self.level = f"zlib {level}", level

    def compressor(self):
        level = self.level
        return lambda data: zlib.compress(data, level)

    def deflater(self, _level):
        """For the writer's _Sink, in place of its _Deflater."""
        compressor = self.compressor()
        return type("ZlibDeflater", (), {"compress": staticmethod(compressor)})()


class Libdeflate:
    def __init__(self, level):
        self.name, self.level = f"libdeflate {level}", level

    def compressor(self):
        """One deflater and output buffer: one thread's."""
        d = ffi.gc(lib.pt_deflater_new(self.level), lib.pt_deflater_free)
        cap = lib.pt_deflate_bound(d, COMPRESSED_INPUT_BYTES * 2)
        out = ffi.new("char[]", cap)

        def compress(data):
            n = lib.pt_deflate_zlib(d, ffi.from_buffer(data), len(data), out, cap)
            assert n, "did not fit"
            return ffi.buffer(out, n)[:]
        return compress

    def deflater(self, _level):
        return WRITERS_DEFLATER(self.level)


def one_thread(candidate, pieces):
    compress = candidate.compressor()
    t0 = time.perf_counter()
    outputs = [compress(piece) for piece in pieces]
    return time.perf_counter() - t0, outputs


def pooled(candidate, pieces, pool):
    local = threading.local()

    def compress(piece):
        if not hasattr(local, "compress"):
            local.compress = candidate.compressor()
        return local.compress(piece)
    # warm each pool thread's compressor outside the timing
    list(pool.map(compress, pieces[:COMPRESS_THREADS * 2]))
    t0 = time.perf_counter()
    outputs = list(pool.map(compress, pieces))
    return time.perf_counter() - t0, outputs


def levels(text):
    return [int(x) for x in text.split(",") if x]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=4,
                        help="run() of each workload this many times in its trace")
    parser.add_argument("--zlib", type=levels, default=[1, 3, 6])
    parser.add_argument("--libdeflate", type=levels, default=[1, 2, 3, 4, 6])
    args = parser.parse_args()
    candidates = ([Zlib(level) for level in args.zlib]
                  + [Libdeflate(level) for level in args.libdeflate])
    workloads = [("fib", workload("fib", lambda: fib(22))),
                 ("builtins_mix", workload("builtins_mix", builtins_mix))]
    where = "/dev/shm" if os.path.isdir("/dev/shm") else None
    commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)),
                             "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "?"
    print(f"pytrace_cffi {os.path.dirname(pytrace_cffi.__file__)} (commit {commit}), "
          f"CPython {platform.python_version()}, zlib {zlib.ZLIB_RUNTIME_VERSION}, "
          f"{os.cpu_count()} CPUs, {platform.machine()}")
    print(f"pieces of <= {COMPRESSED_INPUT_BYTES >> 10} KiB, {COMPRESS_THREADS} pool threads, "
          f"best of {args.rounds} rounds; the writer's level today: {COMPRESS_LEVEL}")
    with tempfile.TemporaryDirectory(dir=where) as tmp, \
            concurrent.futures.ThreadPoolExecutor(COMPRESS_THREADS) as pool:
        for label, run in workloads:
            trace = traced(run, args.repeat)
            body = body_of(trace, tmp)
            calls = len(trace)
            pieces = pieces_of(body)
            assert b"".join(pieces) == body
            events = 2 * calls
            print(f"\n{label}: {calls} calls, {len(body) / 1e6:.2f} MB uncompressed "
                  f"({len(body) / calls:.1f} B/call), {len(pieces)} pieces")
            modes = {"one": lambda c: one_thread(c, pieces),
                     "pool": lambda c: pooled(c, pieces, pool),
                     "export": lambda c: export(trace, c, tmp)}
            best = {c.name: dict.fromkeys(modes, float("inf")) for c in candidates}
            best["uncompressed"] = {"export": float("inf")}
            sizes, files = {}, {}
            for round_ in range(args.rounds + 1):
                at = round_ % len(candidates)
                for candidate in [None] + candidates[at:] + candidates[:at]:
                    for mode, measure in modes.items():
                        if candidate is None and mode != "export":
                            continue
                        name = candidate.name if candidate is not None else "uncompressed"
                        seconds, outputs = measure(candidate)
                        if mode == "export":
                            files[name] = outputs
                        elif name not in sizes:
                            assert all(zlib.decompress(o) == p for o, p in zip(outputs, pieces))
                            sizes[name] = sum(map(len, outputs))
                        if round_:                  # the first round warms up
                            best[name][mode] = min(best[name][mode], seconds)
            print("| deflate | 1 thread MB/s | M events/s | 2 threads MB/s | M events/s "
                  "| B/call | ratio | export M events/s | file B/call |")
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for c in candidates:
                one, two = best[c.name]["one"], best[c.name]["pool"]
                print(f"| {c.name} | {len(body) / one / 1e6:.0f} | {events / one / 1e6:.1f} "
                      f"| {len(body) / two / 1e6:.0f} | {events / two / 1e6:.1f} "
                      f"| {sizes[c.name] / calls:.2f} | {len(body) / sizes[c.name]:.1f} "
                      f"| {events / best[c.name]['export'] / 1e6:.1f} "
                      f"| {files[c.name] / calls:.2f} |")
            print(f"| uncompressed | | | | | {len(body) / calls:.2f} | 1.0 "
                  f"| {events / best['uncompressed']['export'] / 1e6:.1f} "
                  f"| {files['uncompressed'] / calls:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
