#!/usr/bin/env python3
"""The flight recorder's costs, for docs/PERFORMANCE.md ("Flight recorder"). Run
by hand; it is not a test. Three measures, each in one run (only ratios measured
together compare on this VM):

  cost   per workload, in the same processes and rounds: the hook floor, ordinary
         tracing (start(), everything kept) and the flight recorder (a 64 MiB ring,
         its C thread and its Python thread running); median ratios to the floor
         and flight/ordinary. Processes alternate with --passes.
  soak   one process records --soak-millions million events into the ring (many_events
         with its second thread); its RSS is read from /proc every 0.5 s from here;
         prints RSS over time and the growth after the first tenth.
  dump   how long a dump holds the program (the clone), by how much memory the
         process holds, and how long the clone takes to write the dump.
  steps  --steps-millions million torch optimizer steps (the stand-in torch where
         torch does not import) under the recorder; RSS over time, as soak.

    PYTHONPATH=. python benchmarks/flight_recorder.py --floor-dir ~/.cache/pytrace-ab/floor-3.12
    PYTHONPATH=. python benchmarks/flight_recorder.py --only soak --soak-millions 300
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from callgrind import WORKLOADS_DIR      # noqa: E402  (the shared workloads)
from floor_inner import FLOOR, measuring_env  # noqa: E402

COST = r'''
import importlib, json, statistics, sys, tempfile, time
floor_dir, dirs, rounds, names = sys.argv[1:5]
sys.path[:0] = [floor_dir] + dirs.split(__import__("os").pathsep)
import pytrace_cffi
''' + FLOOR + r'''
dumps = tempfile.mkdtemp()


def timed(w, **options):
    pytrace_cffi.start(**options)
    t0 = time.perf_counter(); w(); t1 = time.perf_counter()
    pytrace_cffi.stop()
    return t1 - t0


out = {}
for name in names.split(","):
    w = importlib.import_module(name).run
    w(); timed(w); timed(w, flight_recorder=True, dumps_dir=dumps)
    r = {"trace/floor": [], "flight/floor": []}
    for i in range(int(rounds)):
        a = floor(w)
        if i % 2:
            c = timed(w, flight_recorder=True, dumps_dir=dumps); b = timed(w)
        else:
            b = timed(w); c = timed(w, flight_recorder=True, dumps_dir=dumps)
        r["trace/floor"].append(b / a); r["flight/floor"].append(c / a)
    out[name] = {k: statistics.median(v) for k, v in r.items()}
print("COST " + json.dumps(out))
'''

SOAK = r'''
import sys, tempfile
sys.path.insert(0, sys.argv[1])
import many_events, pytrace_cffi
pytrace_cffi.start(flight_recorder=True, dumps_dir=tempfile.mkdtemp())
print("started", flush=True)
many_events.run(float(sys.argv[2]))
trace = pytrace_cffi.stop()
print("kept", len(trace), "dropped", trace.dropped_events, flush=True)
'''

# torch's optimizer steps (the real torch where it imports, else the tests' stand-in):
# what the recorder keeps per step must not grow (#30: ~300 bytes a step did)
STEPS = r'''
import sys, tempfile
try:
    import torch
except ImportError:
    sys.path.insert(0, sys.argv[1])
    import torch
import pytrace_cffi
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(list(model.parameters()), lr=0.1)
pytrace_cffi.start(flight_recorder=True, dumps_dir=tempfile.mkdtemp())
print("started", flush=True)
for _ in range(int(float(sys.argv[2]) * 1e6)):
    optimizer.step()
pytrace_cffi.stop()
print("torch from", torch.__file__, flush=True)
'''

DUMP = r'''
import json, os, sys, tempfile, time
import pytrace_cffi
from pytrace_cffi._core import lib
held = [bytearray(int(sys.argv[1]) << 20)]      # memory the process holds (touched)
for b in held:
    b[::4096] = b"x" * len(b[::4096])
pytrace_cffi.start(flight_recorder=True, dumps_dir=tempfile.mkdtemp())
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
fib(24)                                         # a ring of a few MiB
holds, writes = [], []
for _ in range(7):
    t0 = time.perf_counter()
    pytrace_cffi.dump(reason="bench")
    t1 = time.perf_counter()
    lib.pt_flight_wait(60_000_000_000)
    holds.append(t1 - t0); writes.append(time.perf_counter() - t0)
pytrace_cffi.stop()
holds.sort(); writes.sort()
print("DUMP " + json.dumps({"hold_ms": holds[3] * 1e3, "write_ms": writes[3] * 1e3}))
'''


def rss_mib(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def cost(args):
    dirs = os.pathsep.join([os.path.join(HERE, "workloads"), WORKLOADS_DIR])
    passes = []
    for _ in range(args.passes):
        r = subprocess.run([sys.executable, "-c", COST, os.path.expanduser(args.floor_dir),
                            dirs, str(args.rounds), ",".join(args.workloads)],
                           capture_output=True, text=True, cwd="/", env=measuring_env())
        if r.returncode or "COST " not in r.stdout:
            raise SystemExit(r.stdout[-2000:] + r.stderr[-3000:])
        passes.append(json.loads(r.stdout.split("COST ", 1)[1]))
    print(f"cost: {args.passes} passes x {args.rounds} rounds, median of the passes' medians")
    print(f"{'workload':14} {'trace/floor':>12} {'flight/floor':>13} {'flight/trace':>13}")
    for name in args.workloads:
        t = statistics.median(p[name]["trace/floor"] for p in passes)
        f = statistics.median(p[name]["flight/floor"] for p in passes)
        print(f"{name:14} {t:12.3f} {f:13.3f} {f / t:13.3f}")


def soak(args):
    _sampled(SOAK, WORKLOADS_DIR, args.soak_millions, "million events")


def steps(args):
    stand_in = os.path.join(os.path.dirname(HERE), "tests", "torch_stand_in")
    _sampled(STEPS, stand_in, args.steps_millions, "million optimizer steps")


def _sampled(program, path, millions, what):
    """Runs program (argv: path, millions) and samples its RSS every 0.5 s."""
    with subprocess.Popen([sys.executable, "-c", program, path,
                           str(millions)], stdout=subprocess.PIPE, text=True,
                          cwd=tempfile.gettempdir(), env=measuring_env()) as proc:
        assert proc.stdout.readline().strip() == "started"
        t0, samples = time.monotonic(), []
        while proc.poll() is None:
            try:
                samples.append((time.monotonic() - t0, rss_mib(proc.pid)))
            except OSError:
                break
            time.sleep(0.5)
        tail = proc.stdout.read().strip()
    if len(samples) < 4:
        raise SystemExit("the soak ended too soon to sample")
    tenth = samples[len(samples) // 10]
    late = max(rss for _, rss in samples[len(samples) // 10:])
    print(f"{millions:g} {what} in {samples[-1][0]:.0f} s; {tail}")
    for when, rss in samples[::max(1, len(samples) // 12)]:
        print(f"  {when:6.1f} s  {rss:7.1f} MiB")
    print(f"RSS at a tenth of the run {tenth[1]:.1f} MiB, highest after it {late:.1f} MiB: "
          f"+{late - tenth[1]:.1f} MiB")


def dump(args):
    print(f"{'held MiB':>9} {'program held ms':>16} {'dump written ms':>16}")
    for size in args.dump_sizes:
        r = subprocess.run([sys.executable, "-c", DUMP, str(size)], capture_output=True,
                           text=True, cwd=tempfile.gettempdir(), env=measuring_env())
        if r.returncode or "DUMP " not in r.stdout:
            raise SystemExit(r.stdout[-2000:] + r.stderr[-3000:])
        got = json.loads(r.stdout.split("DUMP ", 1)[1])
        print(f"{size:9} {got['hold_ms']:16.2f} {got['write_ms']:16.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["cost", "soak", "dump", "steps"], action="append")
    ap.add_argument("--floor-dir", default="~/.cache/pytrace-ab/floor-"
                    f"{sys.version_info[0]}.{sys.version_info[1]}")
    ap.add_argument("--workloads", nargs="+", default=["fib", "builtins_mix"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--soak-millions", type=float, default=300)
    ap.add_argument("--steps-millions", type=float, default=2)
    ap.add_argument("--dump-sizes", type=int, nargs="+", default=[0, 1024, 4096])
    args = ap.parse_args()
    import pytrace_cffi
    print(f"pytrace_cffi from {os.path.dirname(pytrace_cffi.__file__)}, Python "
          f"{sys.version.split()[0]}")
    for name in args.only or ["cost", "dump", "soak", "steps"]:
        globals()[name](args)


if __name__ == "__main__":
    main()
