#!/usr/bin/env python3
"""What an empty start() and stop() cost, build against build (run by hand; not a
test):

    python benchmarks/startstop.py --build old=/venv-old/bin/python \\
        --build new=python3.12@. [--cycles 3000] [--passes 4]

Processes of the builds alternate (the order flipped each pass); each does
--cycles empty start()/stop() pairs (after 100 unmeasured ones; the garbage
collector runs between every 100, untimed) and reports the median and the 10th percentile of
each, in microseconds; the best pass of each build is shown. A median of
thousands moves little when others share the machine; compare builds within one
run only. --build LABEL=PYTHON[@TREE] as for paired.py: TREE goes first on
PYTHONPATH, else the interpreter's installed pytrace_cffi is measured.
"""
import argparse
import json
import os
import subprocess

INNER = r'''
import gc, json, statistics, sys, time
import pytrace_cffi
n = int(sys.argv[1])
clock = time.perf_counter_ns
for _ in range(100):
    pytrace_cffi.start(); pytrace_cffi.stop()
starts, stops = [], []
for i in range(n):
    if i % 100 == 0:
        gc.collect()        # (untimed) what dropped traces leave for the collector
    t0 = clock(); pytrace_cffi.start(); t1 = clock()
    trace = pytrace_cffi.stop(); t2 = clock()
    del trace
    starts.append(t1 - t0)
    stops.append(t2 - t1)


def summary(values):
    values = sorted(values)
    return [statistics.median(values) / 1e3, values[len(values) // 10] / 1e3]


print("STARTSTOP " + json.dumps({"start": summary(starts), "stop": summary(stops)}))
'''


def run(python, tree, cycles):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if tree:
        env["PYTHONPATH"] = os.path.abspath(tree)
    r = subprocess.run([python, "-c", INNER, str(cycles)], capture_output=True, text=True,
                       env=env, cwd="/")
    if r.returncode or "STARTSTOP " not in r.stdout:
        raise SystemExit(f"{python} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.split("STARTSTOP ", 1)[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", required=True, metavar="LABEL=PYTHON[@TREE]")
    ap.add_argument("--cycles", type=int, default=3000)
    ap.add_argument("--passes", type=int, default=4)
    a = ap.parse_args()
    builds = []
    for spec in a.build:
        label, _, rest = spec.partition("=")
        python, _, tree = os.path.expanduser(rest).partition("@")
        builds.append((label, python, tree))
    best = {}
    for p in range(a.passes):
        for label, python, tree in (builds if p % 2 == 0 else builds[::-1]):
            got = run(python, tree, a.cycles)
            print(f"pass {p + 1} {label:10} start {got['start'][0]:7.1f} us (p10 "
                  f"{got['start'][1]:6.1f})  stop {got['stop'][0]:7.1f} us (p10 "
                  f"{got['stop'][1]:6.1f})", flush=True)
            mine = best.setdefault(label, {"start": got["start"], "stop": got["stop"]})
            for what in ("start", "stop"):
                if got[what][0] < mine[what][0]:
                    mine[what] = got[what]
    print("best pass (median of the cycles, us):")
    for label, _, _ in builds:
        print(f"  {label:10} start {best[label]['start'][0]:7.1f}  stop "
              f"{best[label]['stop'][0]:7.1f}")


if __name__ == "__main__":
    main()
