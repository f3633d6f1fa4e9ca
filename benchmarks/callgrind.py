#!/usr/bin/env python3
"""Instructions per event under callgrind: what recording costs, counted rather than
timed (wall-clock numbers on a shared VM move by several percent; instruction counts
move by less than 0.1%). Run by hand; it is not a test. Needs valgrind (with its
callgrind.h) and a C compiler.

For each interpreter (--python LABEL=PATH, repeatable: builds side by side, e.g. the
work tree and an older commit installed in another venv) and each workload, one
process per measure runs the workload `--runs` times under callgrind, collecting only
inside the measured region (callgrind's client requests, through a small helper built
here once per interpreter):

    untraced   run()
    floor      the hook floor around run(): /work/shared/bench/floor_build.py's _mon
               (3.9-3.11: an empty C profile hook, new threads hooked too; 3.12+:
               sys.monitoring callbacks that only count), when --floor-dir has it
    noop       pytrace_cffi.start(noop=True) .. run() .. stop(): our hooks, recording nothing
    record     pytrace_cffi.start(**options) .. run(): the last event recorded
    stop       stop() alone, after such a run
    start      start() alone (the empty session's cost; the toggle after it is a
               built-in call the new trace names, ~10k instructions, counted too)
    empty_stop stop() of an empty session, alone (not by default)
    cycle      start() and stop() of an empty session: start alone is cycle -
               empty_stop, without the toggle's naming (not by default)

and prints, per workload, the instructions per run and per recorded event (the
event count is the trace's: calls and returns, as the hooks write them), and
(record - untraced) / events against (floor - untraced) / events: the hook's own
cost per event, ours against the interpreter's floor.

    python benchmarks/callgrind.py --python new=/tmp/venv-new/bin/python \\
        --python old=~/.cache/pytrace-ab/0946cf0e0d74-3.12/bin/python \\
        --floor-dir ~/.cache/pytrace-ab/floor-3.12 [--workloads fib builtins_mix]
        [--option max_depth=50] [--runs 3] [--keep DIR]

`--python new=python3.12@<work tree>` measures a source tree (built in place with
build_ffi.py) put first on PYTHONPATH; without @, the interpreter's installed
pytrace_cffi (PYTHONPATH is cleared). --keep DIR keeps each callgrind.out for
callgrind_annotate (per-function counts).
"""
import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _workloads_dir():
    """$PYTRACE_WORKLOADS, else the nearest shared/workloads above this file (beside
    the repository, or beside the folder of a worktree)."""
    if os.environ.get("PYTRACE_WORKLOADS"):
        return os.environ["PYTRACE_WORKLOADS"]
    d = os.path.dirname(HERE)
    while os.path.dirname(d) != d:
        d = os.path.dirname(d)
        if os.path.isdir(os.path.join(d, "shared", "workloads")):
            return os.path.join(d, "shared", "workloads")
    return os.path.join(HERE, "..", "..", "shared", "workloads")


WORKLOADS_DIR = _workloads_dir()
CACHE = os.path.expanduser("~/.cache/pytrace-callgrind")
MEASURES = ("untraced", "floor", "noop", "record", "stop", "start", "empty_stop", "cycle")
DEFAULT_MEASURES = MEASURES[:6]

HELPER = r'''
import cffi, sys
ffi = cffi.FFI()
ffi.cdef("void cg_toggle(void); void cg_zero(void);")
ffi.set_source("_cg_helper", """
#include <valgrind/callgrind.h>
static void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
static void cg_zero(void) { CALLGRIND_ZERO_STATS; }
""")
ffi.compile(verbose=False)
'''

# Runs inside the measured interpreter: argv = helper dir, floor dir or "", workloads
# dir, workload, measure, runs, options (a Python literal dict). Prints one JSON line.
INNER = r'''
import ast, importlib, json, sys, threading
helper_dir, floor_dir, workloads, name, measure, runs, options = sys.argv[1:8]
runs, options = int(runs), ast.literal_eval(options)
sys.path[:0] = [helper_dir, workloads] + ([floor_dir] if floor_dir else [])
from _cg_helper import lib as cg
import pytrace_cffi
w = importlib.import_module(name).run
if measure == "floor":
    import _mon
    if sys.version_info >= (3, 12):
        floor_on, floor_off = (lambda: _mon.lib.mon_start(1)), _mon.lib.mon_stop
    else:
        floor_on, floor_off = _mon.lib.noop_start_threads, _mon.lib.noop_stop_threads
w()
t = None
pytrace_cffi.start(**options); w(); t = pytrace_cffi.stop()     # warm: code, pools, imports
events = sum(th.n_events for th in t.threads)
del t
toggle = cg.cg_toggle
for _ in range(runs):
    if measure == "untraced":
        toggle(); w(); toggle()
    elif measure == "floor":
        toggle(); floor_on(); w(); floor_off(); toggle()
    elif measure == "noop":
        toggle(); pytrace_cffi.start(noop=True); w(); pytrace_cffi.stop(); toggle()
    elif measure == "record":
        toggle(); pytrace_cffi.start(**options); w(); toggle(); pytrace_cffi.stop()
    elif measure == "stop":
        pytrace_cffi.start(**options); w(); toggle(); t = pytrace_cffi.stop(); toggle(); del t
    elif measure == "start":
        toggle(); pytrace_cffi.start(**options); toggle(); pytrace_cffi.stop()
    elif measure == "empty_stop":
        pytrace_cffi.start(**options); toggle(); t = pytrace_cffi.stop(); toggle(); del t
    elif measure == "cycle":
        toggle(); pytrace_cffi.start(**options); t = pytrace_cffi.stop(); toggle(); del t
print("CG " + json.dumps({"events": events}))
'''


def helper_dir(python):
    """Builds the callgrind client-request helper for this interpreter, once."""
    version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    d = os.path.join(CACHE, f"helper-{version}")
    if not any(f.startswith("_cg_helper") and f.endswith(".so") for f in
               (os.listdir(d) if os.path.isdir(d) else ())):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "build_helper.py"), "w") as f:
            f.write(HELPER)
        subprocess.run([python, "build_helper.py"], cwd=d, check=True, capture_output=True)
    return d


def measure(label, python, tree, floor_dir, workload, what, runs, options, keep):
    """(instructions per run, events per run) of one measure."""
    out = os.path.join(keep, f"callgrind.{label}.{workload}.{what}") if keep else "/dev/null"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    # str hashes are salted per process: dict probes (global lookups) then
    # differ by millions of instructions between two runs of the same build
    env["PYTHONHASHSEED"] = "0"
    if tree:
        env["PYTHONPATH"] = tree
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(INNER)
    try:
        r = subprocess.run(
            ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}",
             python, f.name, helper_dir(python), floor_dir or "", WORKLOADS_DIR, workload, what,
             str(runs), repr(options)],
            capture_output=True, text=True, env=env)
    finally:
        os.unlink(f.name)
    found = re.search(r"Collected\s*:\s*(\d+)", r.stderr)
    if r.returncode or not found or "CG " not in r.stdout:
        raise SystemExit(f"{python} {workload} {what} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    events = json.loads(r.stdout.split("CG ", 1)[1])["events"]
    return int(found.group(1)) / runs, events


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", required=True, metavar="LABEL=PATH[@TREE]")
    ap.add_argument("--floor-dir", help="directory holding the _mon floor module")
    ap.add_argument("--workloads", nargs="+", default=["fib", "builtins_mix", "threads_mix"])
    ap.add_argument("--measures", nargs="+", default=list(DEFAULT_MEASURES), choices=MEASURES)
    ap.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                    help="a start() option for record/stop/start, e.g. max_depth=50")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", help="directory to keep callgrind.out files in")
    a = ap.parse_args()
    options = {}
    for item in a.option:
        k, v = item.split("=", 1)
        options[k] = ast.literal_eval(v)
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
    measures = [m for m in a.measures if m != "floor" or a.floor_dir]
    pythons = [p.split("=", 1) for p in a.python]
    print(f"options: {options or 'defaults'}; {a.runs} runs per measure; instructions per run")
    for workload in a.workloads:
        print(f"== {workload}")
        header = f"{'build':10} {'events':>8} " + " ".join(f"{m:>12}" for m in measures)
        header += f" {'hook/ev':>8} {'floor/ev':>8} {'stop/ev':>8}"
        print(header)
        for label, python in pythons:
            python, _, tree = os.path.expanduser(python).partition("@")
            got, events = {}, 0
            for m in measures:
                got[m], events = measure(label, python, tree, a.floor_dir, workload, m, a.runs,
                                         options, a.keep)
            line = f"{label:10} {events:8d} " + " ".join(f"{got[m]:12.0f}" for m in measures)

            def per_event(m):
                if m not in got or "untraced" not in got:
                    return "-"
                return f"{(got[m] - got['untraced']) / events:8.1f}"
            line += f" {per_event('record'):>8} {per_event('floor'):>8}"
            line += f" {got['stop'] / events:8.2f}" if "stop" in got else f" {'-':>8}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
