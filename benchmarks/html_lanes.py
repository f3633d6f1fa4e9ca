#!/usr/bin/env python3
"""The HTML page of a trace with a thousand asyncio task lanes (run by hand):

    python benchmarks/html_lanes.py [--tasks 1000] [--awaits 50] [--rounds 3]
                                    [--tree LABEL=DIR ...]

Makes two .pftrace files of one asyncio program (TASKS tasks, each awaiting
AWAITS times with a little work between): with --log-async (a lane per task)
and without. Then times, in fresh processes, `export X.pftrace -o X.html` for
each, per source tree (--tree LABEL=DIR, built in place; default: this tree),
rounds interleaved. Reports the best CPU time (user + sys of the child) of the
rounds: the page of the lanes against the page of the same calls on one thread
(#34 item 3's target: the lanes' page near the other's cost).
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PROGRAM = """
import asyncio, sys
TASKS, AWAITS = int(sys.argv[1]), int(sys.argv[2])

async def worker(i):
    for _ in range(AWAITS):
        await asyncio.sleep(0)
        sum(range(50))

async def main():
    await asyncio.gather(*(asyncio.create_task(worker(i)) for i in range(TASKS)))

asyncio.run(main())
"""


def cpu_of(command, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # cwd: not a source tree (python -m puts the working directory first on sys.path)
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, cwd=os.path.dirname(command[-1]))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--awaits", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", default=[],
                        help="LABEL=DIR: a source tree to measure (default: this one)")
    args = parser.parse_args()
    trees = [tree.split("=", 1) for tree in args.tree] or [["this", ROOT]]
    where = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    program = os.path.join(where, "tasks.py")
    with open(program, "w") as f:
        f.write(PROGRAM)
    first_env = dict(os.environ, PYTHONPATH=trees[0][1])
    traces = {}
    for label, option in (("lanes", ["--log-async"]), ("one thread", [])):
        traces[label] = os.path.join(where, f"{label.replace(' ', '_')}.pftrace")
        subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", *option, "-o",
                        traces[label], program, str(args.tasks), str(args.awaits)],
                       env=first_env, cwd=where, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    best = {}
    for _ in range(args.rounds):
        for label, tree in trees:
            env = dict(os.environ, PYTHONPATH=tree)
            for kind, trace in traces.items():
                seconds = cpu_of([sys.executable, "-m", "pytrace_cffi", "export", trace,
                                  "-o", os.path.join(where, "page.html")], env)
                best[label, kind] = min(best.get((label, kind), seconds), seconds)
    print(f"{args.tasks} tasks x {args.awaits} awaits; export X.pftrace -o X.html, "
          f"CPU s, best of {args.rounds}")
    for label, _ in trees:
        print(f"  {label:12} lanes {best[label, 'lanes']:.2f}  "
              f"one thread {best[label, 'one thread']:.2f}")
    for name in os.listdir(where):
        os.remove(os.path.join(where, name))
    os.rmdir(where)


if __name__ == "__main__":
    main()
