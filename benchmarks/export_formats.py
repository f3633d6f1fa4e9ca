"""Size and speed of each export format on one trace (run by hand):

    python benchmarks/export_formats.py [--fib N] [--rounds R] [--memory-fib M]
                                        [--spilled-fib S] [--conversions-fib C]
                                        [--viztracer]

Traces fib(N) (default 25: 242785 calls, 485570 events; 26 gives ~785k events),
then writes it as .pftrace (uncompressed, and with deflate-compressed packets, the
default), Chrome .json and .json.gz, speedscope, collapsed stacks and pprof (whose
sizes follow the distinct stacks, not the calls), each R times (default 5) into a
temporary directory. Reports bytes per call and the best time of the rounds as events per
second (a call is two events: its begin and its end). Time is wall clock of the
whole export call, file writing included; the files go to tmpfs when /dev/shm
exists, so the disk's speed does not enter.

Memory (--memory-fib, default 29: ~3.4M events): for each format (.html too), a fresh
process traces fib(M), and its peak RSS from stop() through the export is
reported in bytes per event above the same process untraced (our modules
imported); VmHWM is reset just before stop() (Linux /proc/self/clear_refs).

Spilled (--spilled-fib S, default 0 = skipped; 35 gives ~60M events, 36 ~97M):
a process traces fib(S) with max_events=2**20 spilling to a directory; another
loads that directory and converts it to .pftrace (compressed, the default, then
uncompressed). Reports its events, seconds, M events/s and peak RSS (ru_maxrss
of the converting process, everything it did included).

Conversions (--conversions-fib C, default 0 = skipped; 29 gives ~1.7M calls, 33
~11.4M): a process traces fib(C) and saves it as a directory, as Chrome JSON and
as .pftrace, and `run` traces a job of two processes (fork, each fib(C - 1));
then, each in a fresh process, those are read back (load, summary.read_trace)
and written as .pftrace, .html, .json or a summary. Reports seconds and peak RSS
above the process before reading, and whether the 40-byte-a-call slice table was
built (it should not be). --conversions-pftrace-only: the .pftrace rows alone.

--viztracer: VizTracer's save() of the same fib(N) workload beside ours (time
and bytes of its JSON), when viztracer is importable.

Slice table (--table-fib T, default 0 = skipped; 31 gives ~8.7M events): a fresh
process per round traces fib(T), then times len() (the scan that counts the
calls) and the first thread_slices() after it (the 40-byte-a-call slice table,
walked from the events), and a spilled fib(T) load() and its thread_slices().
Best of R rounds.

Targets (issue 13): .pftrace <= 30 bytes per call uncompressed, <= 4 compressed;
export >= 20 M events/s uncompressed; peak RSS from stop() through export <= 12
bytes/event above the untraced process; 100M spilled events to .pftrace under
300 MB at >= 10 M events/s.
"""
import argparse
import os
import platform
import shutil
import subprocess
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
    (".speedscope.json", "speedscope", lambda t, p: t.export(p)),
    (".folded", "collapsed stacks", lambda t, p: t.export(p)),
    (".pprof", "pprof", lambda t, p: t.export(p)),
]


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# status(field): a /proc/self/status size in bytes (VmRSS; VmHWM, the peak since
# the process began or since "5" was written to /proc/self/clear_refs)
PROC_STATUS = """
def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
"""

MEMORY_CHILD = PROC_STATUS + r"""
import sys, time
import gzip, concurrent.futures, pytrace_cffi, pytrace_cffi.render.chrome, pytrace_cffi.render.perfetto
import pytrace_cffi.render.html


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)




fib(15)
untraced = status("VmRSS")
pytrace_cffi.start()
fib(int(sys.argv[1]))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")                      # VmHWM from here on
begin = time.perf_counter()
trace = pytrace_cffi.stop()
path = sys.argv[2]
if path.endswith(".pftrace"):
    trace.export_perfetto(path)
elif path.endswith(".html"):
    pytrace_cffi.render.html.write_html(trace, path)
elif path != "-":
    trace.export_chrome_trace(path)
seconds = time.perf_counter() - begin
print(sum(t.n_events for t in trace.threads), status("VmHWM") - untraced, seconds)
"""

SPILL_CHILD = r"""
import sys
import pytrace_cffi


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


pytrace_cffi.start(max_events=1 << 20, output=sys.argv[2])
fib(int(sys.argv[1]))
pytrace_cffi.stop()
"""

CONVERT_CHILD = r"""
import resource, sys, time
import pytrace_cffi

begin = time.perf_counter()
trace = pytrace_cffi.load(sys.argv[1])
trace.export_perfetto(sys.argv[2], compress=sys.argv[3] == "1")
seconds = time.perf_counter() - begin
events = sum(t.n_events for t in trace.threads)
print(events, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, seconds)
"""

CONVERSIONS_MAKE = r"""
import multiprocessing, sys
import pytrace_cffi


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


n, directory = int(sys.argv[1]), sys.argv[2]
pytrace_cffi.start()
fib(n)
trace = pytrace_cffi.stop()
if sys.argv[3] == "all":
    trace.save(directory + "/saved")
    trace.export_chrome_trace(directory + "/trace.json")
trace.export_perfetto(directory + "/trace.pftrace")
print(len(trace))
"""

CONVERSIONS_JOB = r"""
import multiprocessing, sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


if __name__ == "__main__":
    n = int(sys.argv[1])
    child = multiprocessing.get_context("fork").Process(target=fib, args=(n - 1,))
    child.start()
    fib(n - 1)
    child.join()
"""

CONVERSIONS_CHILD = PROC_STATUS + r"""
import sys, time
import pytrace_cffi
from pytrace_cffi import summary
from pytrace_cffi.render import html, perfetto  # noqa: F401




source, out = sys.argv[1], sys.argv[2]
before = status("VmRSS")
begin = time.perf_counter()
if out.endswith(".json") and not source.endswith(".pftrace"):   # a job joined (as `run`)
    from pytrace_cffi import processes
    calls, built = sum(r.calls for r in processes.join(source, out)), 0
else:
    trace = summary.read_trace(source)
    if out == "summary":
        summary.format_summary(summary.summarize(trace, limit=None))
    elif out.endswith(".html"):
        html.write_html(trace, out)
    elif out.endswith(".pftrace"):
        trace.export_perfetto(out)
    else:
        trace.export_chrome_trace(out)
    calls, built = len(trace), int(trace.slices_built())
seconds = time.perf_counter() - begin
print(calls, status("VmHWM") - before, seconds, built)
"""

VIZTRACER_CHILD = r"""
import os, sys, time
from viztracer import VizTracer


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


tracer = VizTracer(tracer_entries=10_000_000, verbose=0)
tracer.start()
fib(int(sys.argv[1]))
tracer.stop()
begin = time.perf_counter()
tracer.save(sys.argv[2])
print(time.perf_counter() - begin, os.path.getsize(sys.argv[2]))
"""


TABLE_CHILD = r"""
import os, sys, time
import pytrace_cffi


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


if sys.argv[2] == "-":
    pytrace_cffi.start()
    fib(int(sys.argv[1]))
    trace = pytrace_cffi.stop()
else:
    if not os.path.exists(sys.argv[2]):
        pytrace_cffi.start(max_events=1 << 20, output=sys.argv[2])
        fib(int(sys.argv[1]))
        pytrace_cffi.stop()
    begin = time.perf_counter()
    trace = pytrace_cffi.load(sys.argv[2])
events = sum(t.n_events for t in trace.threads)
if sys.argv[2] == "-":
    begin = time.perf_counter()
    len(trace)
counted = time.perf_counter() - begin
begin = time.perf_counter()
for _ in trace.thread_slices():
    pass
print(events, counted, time.perf_counter() - begin)
"""


def table(n, rounds, directory):
    spill = os.path.join(directory, "table-spill")
    print(f"\nthe slice table of fib({n}) (thread_slices()), best of {rounds} fresh processes")
    for label, target, first in (("held: len() (the scan)", "-", "len()"),
                                 ("spilled: load()", spill, "load()")):
        best = [float("inf"), float("inf")]
        for _ in range(rounds):
            events, counted, built = _child(TABLE_CHILD, n, target)
            best = [min(best[0], float(counted)), min(best[1], float(built))]
        print(f"  {label:24} {int(events)} events: {first} {best[0]:.3f} s, then "
              f"thread_slices() {best[1]:.3f} s ({int(events) / best[1] / 1e6:.1f} M events/s)")


def _child(script, *argv):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    result = subprocess.run([sys.executable, "-c", script, *map(str, argv)], env=env,
                            capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(result.stderr[-2000:])
    return result.stdout.split()


def memory(n, directory):
    print(f"\npeak RSS from stop() through export, fib({n}), each in a fresh process")
    print(f"{'export':20} {'events':>10} {'B/event above untraced':>24} {'seconds':>9}")
    for target in ("-", "out.pftrace", "out.json", "out.json.gz", "out.html"):
        path = target if target == "-" else os.path.join(directory, target)
        events, peak, seconds = _child(MEMORY_CHILD, n, path)
        label = "stop() alone" if target == "-" else target[4:]
        print(f"{label:20} {int(events):10d} {int(peak) / int(events):24.2f} "
              f"{float(seconds):9.2f}")
        if target != "-":
            os.unlink(path)


def spilled(n, directory):
    spill = os.path.join(directory, "spill")
    begin = time.perf_counter()
    _child(SPILL_CHILD, n, spill)
    traced = time.perf_counter() - begin
    size = os.path.getsize(os.path.join(spill, "events.bin"))
    out = os.path.join(directory, "spilled.pftrace")
    print(f"\nspilled fib({n}) ({size / 1e6:.0f} MB events.bin, traced in {traced:.0f} s), "
          f"load() + export_perfetto() in a fresh process (peak RSS: the whole process):")
    for compress in (1, 0):
        events, peak, seconds = _child(CONVERT_CHILD, spill, out, compress)
        events, peak, seconds = int(events), int(peak), float(seconds)
        print(f"  {'compressed  ' if compress else 'uncompressed'} {events} events -> "
              f"{os.path.getsize(out) / 1e6:.0f} MB in {seconds:.1f} s, "
              f"{events / seconds / 1e6:.1f} M events/s, peak RSS {peak / 1e6:.0f} MB")


def conversions(n, directory, pftrace_only=False):
    """Reading back what a run wrote, in a fresh process each: a saved directory, our
    Chrome JSON, our .pftrace and a job of two processes (its trace directory), to
    .pftrace, .html, .json or a summary. Peak RSS above the process before reading
    (our modules imported). pftrace_only: the .pftrace rows alone."""
    calls = int(_child(CONVERSIONS_MAKE, n, directory, "pftrace" if pftrace_only else "all")[0])
    pftrace_size = os.path.getsize(os.path.join(directory, "trace.pftrace"))
    rows = [(".pftrace -> summary", "trace.pftrace", "summary"),
            (".pftrace -> .json", "trace.pftrace", "out.json"),
            (".pftrace -> .html", "trace.pftrace", "out.html")]
    if pftrace_only:
        print(f"\nconversions of fib({n}) ({calls} calls; the .pftrace "
              f"{pftrace_size / 1e6:.0f} MB), each in a fresh process: peak RSS above the "
              f"process before reading")
        _conversion_rows(directory, rows)
        return
    job = os.path.join(directory, "job")
    program = os.path.join(directory, "job_program.py")
    with open(program, "w") as f:
        f.write(CONVERSIONS_JOB)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--processes-dir", job,
                    "-o", os.path.join(directory, "job.pftrace"), program, str(n)], env=env,
                   check=True, capture_output=True)
    json_size = os.path.getsize(os.path.join(directory, "trace.json"))
    print(f"\nconversions of fib({n}) ({calls} calls; the JSON {json_size / 1e6:.0f} MB), "
          f"each in a fresh process: peak RSS above the process before reading")
    _conversion_rows(directory, [
        ("saved directory -> .pftrace", "saved", "out.pftrace"),
        ("saved directory -> .html", "saved", "out.html"),
        (".json -> summary", "trace.json", "summary"),
        (".json -> .pftrace", "trace.json", "out.pftrace"),
        ("job of 2 processes -> .pftrace", "job", "out.pftrace"),
        ("job of 2 processes -> .json", "job", "out.json"),
        ("job of 2 processes -> summary", "job", "summary")] + rows)


def _conversion_rows(directory, rows):
    print(f"{'source -> output':32} {'calls':>10} {'seconds':>8} {'peak MB':>8} "
          f"{'B/call':>7} {'table built':>11}")
    for label, source, out in rows:
        target = out if out == "summary" else os.path.join(directory, out)
        got, peak, seconds, built = _child(CONVERSIONS_CHILD, os.path.join(directory, source),
                                           target)
        got, peak = int(got), int(peak)
        print(f"{label:32} {got:10d} {float(seconds):8.2f} {peak / 1e6:8.1f} "
              f"{peak / got:7.2f} {'yes' if built == '1' else 'no':>11}")


def viztracer(n, directory, ours):
    path = os.path.join(directory, "viz.json")
    try:
        seconds, size = _child(VIZTRACER_CHILD, n, path)
    except RuntimeError as exc:
        print(f"\nVizTracer: not run ({str(exc).strip().splitlines()[-1]})")
        return
    print(f"\nVizTracer save() of fib({n}): {float(seconds):.3f} s, {int(size)} bytes "
          f"(ours, fastest export: {ours})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fib", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory-fib", type=int, default=29)
    parser.add_argument("--spilled-fib", type=int, default=0)
    parser.add_argument("--viztracer", action="store_true")
    parser.add_argument("--conversions-fib", type=int, default=0)
    parser.add_argument("--conversions-pftrace-only", action="store_true",
                        help="with --conversions-fib: only the rows reading a .pftrace")
    parser.add_argument("--table-fib", type=int, default=0)
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
        results = []
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
            results.append(f"{label} {best:.3f} s, {size} bytes")
            os.unlink(path)
        if args.viztracer:
            viztracer(args.fib, directory, "; ".join(results))
        if args.memory_fib and sys.platform.startswith("linux"):
            memory(args.memory_fib, directory)
        if args.spilled_fib:
            spilled(args.spilled_fib, directory)
        if args.conversions_fib and sys.platform.startswith("linux"):
            conversions(args.conversions_fib, directory, args.conversions_pftrace_only)
        if args.table_fib:
            table(args.table_fib, args.rounds, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
