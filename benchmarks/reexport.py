#!/usr/bin/env python3
"""Re-export from a .pftrace against the direct path (run by hand; not a test):

    python benchmarks/reexport.py [--calls N] [--module unittest test.test_json]
                                  [--tree LABEL=DIR ...] [--rounds R] [--json]

Makes a .pftrace once (`run -o prog.pftrace`), then times, each round in fresh
processes of the command line, best of R rounds (default 3):

    run -o x.html          the direct path: the program traced, its page written
    export -o x.html       the page written again from the .pftrace
    summary                the summary table from the .pftrace
    export -o x.json       Chrome JSON from the .pftrace (--json; big files)
    run -o x.json          the direct path to JSON (--json)

The program is a synthetic one (--calls N, default 6M: three functions, the main
thread and one more, half the calls each) or, with --module, `python -m` of a
module and its arguments (e.g. `--module unittest test.test_json`: the
standard library's own code). --tree LABEL=DIR measures the pytrace_cffi of each
source tree DIR (built in place: python build_ffi.py), rounds interleaved, so two
builds are compared in one run on the same .pftrace (made by the first tree);
default: the tree this script is in. Files go to tmpfs when /dev/shm exists.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PROGRAM = """
import sys, threading

def leaf(x):
    return x + 1

def mid(n):
    s = 0
    for i in range(n):
        s += leaf(i)
    return s

def top(rounds, n):
    t = 0
    for _ in range(rounds):
        t += mid(n)
    return t

def work():
    top(max(1, int(sys.argv[1]) // 2 // 1000), 999)

helper = threading.Thread(target=work)
helper.start()
work()
helper.join()
"""


def cli(tree, args, cwd):
    """Seconds the command line took, its stderr's last line."""
    env = dict(os.environ, PYTHONPATH=tree)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", *args], cwd=cwd, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0 and args[0] != "run":       # run passes on the program's status
        sys.exit(f"{' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return took, (proc.stderr.strip().splitlines() or [""])[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=6_000_000)
    ap.add_argument("--module", nargs=argparse.REMAINDER,
                    help="python -m MODULE ARGS... as the program (last option)")
    ap.add_argument("--tree", action="append", default=[],
                    help="LABEL=DIR: a source tree to measure (repeat to compare)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="time the Chrome JSON paths too")
    a = ap.parse_args()
    trees = [tuple(t.split("=", 1)) for t in a.tree] or [("this", ROOT)]
    directory = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        if a.module:
            program = ["-m", *a.module]
            what = "python -m " + " ".join(a.module)
        else:
            with open(os.path.join(directory, "prog.py"), "w") as f:
                f.write(PROGRAM)
            program = [os.path.join(directory, "prog.py"), str(a.calls)]
            what = f"synthetic, --calls {a.calls}"
        pftrace = os.path.join(directory, "prog.pftrace")
        took, said = cli(trees[0][1], ["run", "-o", pftrace, *program], directory)
        print(f"CPython {sys.version.split()[0]}, {os.cpu_count()} CPUs; program: {what}")
        print(f"made {pftrace} ({os.path.getsize(pftrace) / 1e6:.1f} MB) in {took:.2f} s: {said}")
        steps = [("run -o x.html", ["run", "-o", "x.html", *program]),
                 ("export -o x.html", ["export", pftrace, "-o", "x.html"]),
                 ("summary", ["summary", pftrace])]
        if a.json:
            steps += [("export -o x.json", ["export", pftrace, "-o", "x.json"]),
                      ("run -o x.json", ["run", "-o", "x.json", *program])]
        best = {}
        for _ in range(a.rounds):
            for label, args in steps:
                for tree_label, tree in trees:
                    took, _ = cli(tree, args, directory)
                    key = (label, tree_label)
                    best[key] = min(best.get(key, took), took)
                    for name in ("x.html", "x.json"):
                        path = os.path.join(directory, name)
                        if os.path.exists(path):
                            os.remove(path)
        print(f"best of {a.rounds} rounds, seconds (and over `run -o x.html` of the same tree):")
        print(f"{'step':18}" + "".join(f"{label:>22}" for label, _ in trees))
        for label, _ in steps:
            cells = []
            for tree_label, _ in trees:
                took = best[(label, tree_label)]
                direct = best[("run -o x.html", tree_label)]
                cells.append(f"{took:8.2f} s ({took / direct:4.2f}x)")
            print(f"{label:18}" + "".join(f"{c:>22}" for c in cells))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
