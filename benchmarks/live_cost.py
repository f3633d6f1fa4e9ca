#!/usr/bin/env python3
"""What encoding the .pftrace during the run costs the program (#22): the
program's own time under start(output="x.pftrace") with the encoder on and off
(PYTRACE_CFFI_LIVE=0), against the hook floor, alternating in the same process,
rounds x passes (a process per pass). Run by hand; not a test. Only ratios
measured in one run compare on this VM.

    PYTHONPATH=. python benchmarks/live_cost.py [--millions 10] [--rounds 5] [--passes 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from callgrind import WORKLOADS_DIR      # noqa: E402  (the shared workloads)
from floor_inner import FLOOR, measuring_env  # noqa: E402

INNER = r'''
import json, os, sys, tempfile, time
floor_dir, workloads, millions, rounds = sys.argv[1:5]
sys.path[:0] = [floor_dir, workloads]
import many_events
import pytrace_cffi
''' + FLOOR + r'''
where = tempfile.mkdtemp()
work = lambda: many_events.run(float(millions))


def encoded(live):
    os.environ["PYTRACE_CFFI_LIVE"] = "1" if live else "0"
    path = os.path.join(where, "out.pftrace")
    pytrace_cffi.start(output=path)
    t0 = time.perf_counter(); work(); t1 = time.perf_counter()
    pytrace_cffi.stop()
    t2 = time.perf_counter()
    os.unlink(path)
    return t1 - t0, t2 - t1


out = {"on/floor": [], "off/floor": [], "on_stop_s": [], "off_stop_s": []}
for i in range(int(rounds)):
    f = floor(work)
    order = (True, False) if i % 2 == 0 else (False, True)
    got = {live: encoded(live) for live in order}
    out["on/floor"].append(got[True][0] / f); out["off/floor"].append(got[False][0] / f)
    out["on_stop_s"].append(got[True][1]); out["off_stop_s"].append(got[False][1])
print("LIVE " + json.dumps(out))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--floor-dir", default="~/.cache/pytrace-ab/floor-"
                    f"{sys.version_info[0]}.{sys.version_info[1]}")
    ap.add_argument("--millions", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--passes", type=int, default=3)
    a = ap.parse_args()
    import pytrace_cffi
    print(f"pytrace_cffi from {os.path.dirname(pytrace_cffi.__file__)}, Python "
          f"{sys.version.split()[0]}; many_events {a.millions:g}M, {a.passes} passes x "
          f"{a.rounds} rounds")
    env = measuring_env()
    runs = []
    for _ in range(a.passes):
        r = subprocess.run([sys.executable, "-c", INNER, os.path.expanduser(a.floor_dir),
                            WORKLOADS_DIR, str(a.millions), str(a.rounds)],
                           capture_output=True, text=True, cwd="/", env=env)
        if r.returncode or "LIVE " not in r.stdout:
            raise SystemExit(r.stdout[-2000:] + r.stderr[-3000:])
        runs.append(json.loads(r.stdout.split("LIVE ", 1)[1]))
    every = {k: [v for run in runs for v in run[k]] for k in runs[0]}
    on, off = statistics.median(every["on/floor"]), statistics.median(every["off/floor"])
    best_on, best_off = min(every["on/floor"]), min(every["off/floor"])
    print(f"program time / floor, median: encoder on {on:.3f}, off {off:.3f}, on/off "
          f"{on / off:.3f}; best: on {best_on:.3f}, off {best_off:.3f}, on/off "
          f"{best_on / best_off:.3f}")
    print(f"stop() to file written, median: encoder on "
          f"{statistics.median(every['on_stop_s']):.2f} s, off "
          f"{statistics.median(every['off_stop_s']):.2f} s")


if __name__ == "__main__":
    main()
