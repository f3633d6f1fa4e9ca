#!/usr/bin/env python3
"""Paired old-vs-new timing: did a change make recording slower? Run by hand; it
is not a test.

The same method as the project's shared ab.py (../../shared/bench/ab.py, which
also builds the commits for you): processes of two builds alternate (pass after
pass, the order flipped each pass), each process times, per workload and round,
the hook floor, start..last event ("record") and start..stop() returned
("with_stop"), and reports median ratios to the floor; the best pass of each
build is compared. Only ratios measured in one run compare: this VM drifts
between fast and slow phases, and others share its cores.

Unlike ab.py it takes builds you already have (an installed interpreter, or a
source tree built in place with build_ffi.py) and any workload directory, such as
benchmarks/workloads with threads_steady (threads_mix with its thread start-up
made a small part of the time):

    python benchmarks/paired.py --build old=/venv-old/bin/python \\
        --build new=/venv/bin/python@. --floor-dir ~/.cache/pytrace-ab/floor-3.12 \\
        --workloads fib builtins_mix threads_mix threads_steady --passes 3

--build LABEL=PYTHON[@TREE]: TREE goes first on PYTHONPATH (else PYTHONPATH is
cleared and the interpreter's installed pytrace_cffi is measured); the first
build is the base. --floor-dir holds the floor module _mon
(../../shared/bench/floor_build.py builds it; ab.py caches one per interpreter
under ~/.cache/pytrace-ab/floor-X.Y). Workloads are looked up in
benchmarks/workloads, then in the shared workloads directory.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from callgrind import WORKLOADS_DIR      # noqa: E402  (the shared workloads)
from floor_inner import FLOOR            # noqa: E402

OWN_WORKLOADS = os.path.join(HERE, "workloads")

# Runs in each process: argv = floor dir, workload dirs (os.pathsep-joined),
# rounds, workloads (comma-separated). Prints one JSON line of median ratios.
INNER = r'''
import importlib, json, statistics, sys, time
floor_dir, dirs, rounds, names = sys.argv[1:5]
sys.path[:0] = [floor_dir] + dirs.split(__import__("os").pathsep)
import pytrace_cffi
''' + FLOOR + r'''


def record(w):
    t0 = time.perf_counter(); pytrace_cffi.start(); w(); t1 = time.perf_counter()
    pytrace_cffi.stop()
    return t1 - t0


def with_stop(w):
    t0 = time.perf_counter(); pytrace_cffi.start(); w(); pytrace_cffi.stop()
    return time.perf_counter() - t0


out = {}
for name in names.split(","):
    w = importlib.import_module(name).run
    w(); with_stop(w)
    r = {"record/floor": [], "with_stop/floor": []}
    for _ in range(int(rounds)):
        a, b, c = floor(w), record(w), with_stop(w)
        r["record/floor"].append(b / a); r["with_stop/floor"].append(c / a)
    out[name] = {k: statistics.median(v) for k, v in r.items()}
print("PAIRED " + json.dumps(out))
'''


def run_pass(python, tree, floor_dir, workloads, rounds):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if tree:
        env["PYTHONPATH"] = os.path.abspath(tree)
    dirs = os.pathsep.join([OWN_WORKLOADS, WORKLOADS_DIR])
    r = subprocess.run([python, "-c", INNER, floor_dir, dirs, str(rounds), ",".join(workloads)],
                       capture_output=True, text=True, env=env, cwd="/")
    if r.returncode or "PAIRED " not in r.stdout:
        raise SystemExit(f"{python}: failed\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.split("PAIRED ", 1)[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", required=True, metavar="LABEL=PYTHON[@TREE]")
    ap.add_argument("--floor-dir", required=True)
    ap.add_argument("--workloads", nargs="+", default=["fib", "builtins_mix", "threads_mix",
                                                       "threads_steady"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--passes", type=int, default=3)
    a = ap.parse_args()
    builds = []
    for item in a.build:
        label, _, spec = item.partition("=")
        python, _, tree = os.path.expanduser(spec).partition("@")
        builds.append((label, python, tree))
    if len(builds) != 2:
        raise SystemExit("give two builds: --build base=... --build new=...")
    got = {label: [] for label, _, _ in builds}
    floor_dir = os.path.expanduser(a.floor_dir)
    for p in range(a.passes):
        for label, python, tree in (builds if p % 2 == 0 else builds[::-1]):
            got[label].append(run_pass(python, tree, floor_dir, a.workloads, a.rounds))
    (base, _, _), (new, _, _) = builds
    print(f"{a.passes} passes x {a.rounds} rounds, best pass; {base} is the base")
    print(f"{'workload':14} {'measure':16} {base:>8} {new:>8} {'new/base':>9}")
    for w in a.workloads:
        for m in ("record/floor", "with_stop/floor"):
            b = min(x[w][m] for x in got[base])
            n = min(x[w][m] for x in got[new])
            print(f"{w:14} {m:16} {b:8.3f} {n:8.3f} {n / b:9.3f}")


if __name__ == "__main__":
    main()
