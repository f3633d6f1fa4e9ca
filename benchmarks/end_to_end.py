#!/usr/bin/env python3
"""End to end: the wall time of a whole traced program, from spawning it to its
output file on disk, as a user would see it (issue 22, item 6). Run by hand; not
a test:

    python benchmarks/end_to_end.py [--python PYTHON] [--rounds 3]
        [--workloads fib,builtins_mix,many_events:10,many_events:100,more_itertools]
        [--ours-json] [--tools untraced,cProfile,...] [--markdown FILE] [--json FILE]

Each workload runs as a program, one subprocess per run, under each tool:

    untraced        PYTHON MAIN
    cProfile        PYTHON -m cProfile -o out.prof MAIN
    VizTracer       PYTHON -m viztracer --tracer_entries N -o out.json -- MAIN
    pytrace_cffi    PYTHON -m pytrace_cffi run -o out.pftrace MAIN   (--ours-json: and -o out.json)

MAIN is a small wrapper, the same under every tool, that runs the workload (a
script, or pytest for the more_itertools suite) and then, as its very last act,
writes the clock to a stamp file. So each run gives:

    start -> exit       spawn to exit of the process (the file checked to exist, non-empty)
    end -> file         the program's end (the stamp) to the file's last write (its mtime)
    end -> exit         the program's end to the exit of the process

A round runs every tool once, in an order rotating from round to round; each cell
is the best (min) over the rounds. Before the rounds, every tool runs once on an
empty script and every workload once untraced, untimed (caches, .pyc files).

PYTHON (default: the one running this) is the interpreter of every run; put
viztracer, pytest and cffi in its environment. The pytrace_cffi measured is, in
this order: PYTHONPATH's, PYTHON's installed one, or this repository's tree (built
with build_ffi.py if its C core is missing). Workloads come from
../../shared/workloads relative to this file, or $PYTRACE_WORKLOADS; the
more_itertools sdist is downloaded once with pip into --cache-dir.
"""
import argparse
import datetime
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS_DIR = os.environ.get("PYTRACE_WORKLOADS") or os.path.join(
    ROOT, "..", "shared", "workloads")
DEFAULT_WORKLOADS = "fib,builtins_mix,many_events:10,many_events:100,more_itertools"
MORE_ITERTOOLS = "more_itertools"
MORE_ITERTOOLS_VERSION = "11.2.1"
# The suite's three slowest tests, ~40 s of its ~50 s untraced (3.12, 2-core VM):
# test_primes alone is ~20 s of subtests; test_concurrent_consumers mostly waits on
# threads. Without them: ~10 s untraced, 33M calls. --full-suite keeps them.
MORE_ITERTOOLS_SLOW = (
    "tests/test_recipes.py::PrimeFunctionTests::test_primes",
    "tests/test_recipes.py::PrimeFunctionTests::test_nth_prime_approximate",
    "tests/test_more.py::TestConcurrentTee::test_concurrent_consumers",
)
# VizTracer keeps its last N entries (one per call) in a circular buffer and drops
# the oldest beyond it; its writer then loads them all as Python objects: ~0.9 kB
# resident per entry (many_events:10, 5M entries: 4.5 GB). 10M caps it near 9 GB.
VIZTRACER_ENTRIES = 10_000_000
STAMP_ENV = "PYTRACE_E2E_STAMP"

UNTRACED, CPROFILE, VIZTRACER, OURS, OURS_WHOLE, OURS_JSON = (
    "untraced", "cProfile", "VizTracer", "pytrace_cffi", "pytrace_cffi after",
    "pytrace_cffi .json")

# Runs the workload as python would (`MAIN script ARGS` or `MAIN -m module ARGS`),
# then writes "monotonic_ns time_ns exit_status" to $PYTRACE_E2E_STAMP, last.
WRAPPER = '''\
import os, runpy, sys, time
_stamp, _status = os.environ.pop("PYTRACE_E2E_STAMP"), 0
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    sys.path[0] = os.getcwd()
    _run = lambda: runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    _run = lambda: runpy.run_path(sys.argv[0], run_name="__main__")
try:
    _run()
except SystemExit as exc:
    _status = exc.code if exc.code is None or isinstance(exc.code, str) else int(exc.code)
    raise
except BaseException:
    _status = "raised"
    raise
finally:
    _end = (time.monotonic_ns(), time.time_ns())
    with open(_stamp, "w") as _f:
        _f.write(f"{_end[0]} {_end[1]} {_status!r}\\n")
'''


class Workload:
    def __init__(self, name, argv, cwd=None, note=""):
        self.name, self.argv, self.cwd, self.note = name, argv, cwd, note


class Tool:
    """How to run MAIN under one tool; suffix is the output file's."""

    def __init__(self, name, suffix, prefix, env=None):
        self.name, self.suffix, self.prefix = name, suffix, prefix
        self.env = env or {}

    def command(self, python, out, main_argv):
        return [python] + [out if part == "{out}" else part for part in self.prefix] \
            + main_argv


def say(message):
    print(message, file=sys.stderr, flush=True)


def probe(python, code, env=None):
    """What PYTHON prints running code (stripped), or None if it fails."""
    done = subprocess.run([python, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tempfile.gettempdir())
    return done.stdout.strip() if done.returncode == 0 else None


# -- what is measured ----------------------------------------------------------

def find_pytrace_cffi(python, env):
    """(env for the runs, location, commit): PYTHONPATH's pytrace_cffi, else the
    installed one, else this repository's tree, built in place if need be."""
    where = "import os, pytrace_cffi; print(os.path.dirname(os.path.dirname(" \
            "os.path.abspath(pytrace_cffi.__file__))))"
    found = probe(python, where, env)
    if found is None and not env.get("PYTHONPATH"):
        if probe(python, "import cffi") is None:
            sys.exit(f"{python} has neither pytrace_cffi nor cffi: "
                     f"`{python} -m pip install cffi` (then this builds the tree), "
                     "or install pytrace_cffi there")
        env = dict(env, PYTHONPATH=ROOT)
        found = probe(python, where, env)
        if found is None:
            say(f"pytrace_cffi does not import from {ROOT}: building its C core "
                f"({python} build_ffi.py) ...")
            subprocess.run([python, "build_ffi.py"], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL)
            found = probe(python, where, env)
    if found is None:
        sys.exit(f"pytrace_cffi does not import in {python} (PYTHONPATH="
                 f"{env.get('PYTHONPATH', '')!r}): build the tree with `python build_ffi.py` "
                 "or install it")
    # a source tree is its repository's top; site-packages may lie inside some other
    # repository (a venv in a work tree), whose commit says nothing of the package
    top = subprocess.run(["git", "-C", found, "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "-C", found, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True)
    if commit.returncode != 0 or not top or not os.path.samefile(top, found):
        version = probe(python, "from importlib.metadata import version; "
                                "print(version('pytrace_cffi'))", env)
        return env, found, f"installed {version or '?'} (no git tree)"
    dirty = subprocess.run(["git", "-C", found, "status", "--porcelain", "--untracked-files=no",
                            "--", "c_src", "pytrace_cffi", "build_ffi.py"],
                           capture_output=True, text=True).stdout.strip()
    return env, found, commit.stdout.strip() + (" + uncommitted changes" if dirty else "")


def ensure_more_itertools(python, cache_dir, version):
    """The unpacked sdist's directory, downloading it with pip if need be."""
    os.makedirs(cache_dir, exist_ok=True)
    name = f"more_itertools-{version}"
    tree = os.path.join(cache_dir, name)
    if os.path.isdir(os.path.join(tree, "tests")):
        return tree
    archive = os.path.join(cache_dir, name + ".tar.gz")
    if not os.path.exists(archive):
        say(f"downloading the more-itertools {version} sdist into {cache_dir} ...")
        subprocess.run([python, "-m", "pip", "download", "-q", "--no-binary", ":all:",
                        "--no-deps", "-d", cache_dir, f"more-itertools=={version}"],
                       check=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(cache_dir, filter="data")
        else:
            tar.extractall(cache_dir)
    return tree


def make_workloads(names, args, notes):
    workloads = []
    for name in names:
        base, _, size = name.partition(":")
        if base == MORE_ITERTOOLS:
            if probe(args.python, "import pytest") is None:
                notes.append(f"{name}: skipped, pytest does not import in {args.python} "
                             f"(`{args.python} -m pip install pytest`)")
                continue
            tree = ensure_more_itertools(args.python, args.cache_dir,
                                         args.more_itertools_version)
            argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
            note = f"more-itertools {args.more_itertools_version}'s tests under pytest"
            if not args.full_suite:
                for test in MORE_ITERTOOLS_SLOW:
                    argv += ["--deselect", test]
                note += f", its {len(MORE_ITERTOOLS_SLOW)} slowest deselected"
            workloads.append(Workload(name, argv, cwd=tree, note=note))
            continue
        script = os.path.join(WORKLOADS_DIR, base + ".py")
        if not os.path.exists(script):
            sys.exit(f"no workload {script} (set PYTRACE_WORKLOADS to the shared workloads)")
        workloads.append(Workload(name, [script] + ([size] if size else [])))
    return workloads


def make_tools(args, notes):
    tools = [Tool(UNTRACED, None, []),
             Tool(CPROFILE, ".prof", ["-m", "cProfile", "-o", "{out}"])]
    viz = probe(args.python, "import viztracer; print(viztracer.__version__)")
    if viz is None:
        notes.append(f"VizTracer: not measured, viztracer does not import in {args.python} "
                     f"(`{args.python} -m pip install viztracer`)")
    else:
        # "--": its parser would take MAIN's own options (-m pytest) for its own
        tools.append(Tool(VIZTRACER, ".json", ["-m", "viztracer", "--tracer_entries",
                                               str(args.viztracer_entries), "-o", "{out}",
                                               "--"]))
    tools.append(Tool(OURS, ".pftrace", ["-m", "pytrace_cffi", "run", "-o", "{out}"]))
    if args.ours_after:
        # the .pftrace encoded after the program, as before issue 22
        tools.append(Tool(OURS_WHOLE, ".pftrace", ["-m", "pytrace_cffi", "run", "-o", "{out}"],
                          {"PYTRACE_CFFI_LIVE": "0"}))
    if args.ours_json:
        tools.append(Tool(OURS_JSON, ".json", ["-m", "pytrace_cffi", "run", "-o", "{out}"]))
    if args.tools:
        wanted = [name.strip() for name in args.tools.split(",") if name.strip()]
        known = [UNTRACED, CPROFILE, VIZTRACER, OURS, OURS_WHOLE, OURS_JSON]
        unknown = [name for name in wanted if name not in known]
        if unknown:
            sys.exit(f"--tools: unknown {unknown} (known: {', '.join(known)})")
        tools = [tool for tool in tools if tool.name in wanted]
    return tools, viz


# -- one run -------------------------------------------------------------------

class RunFailed(Exception):
    pass


def run_once(python, tool, workload, main, where, env, timeout):
    """One run: {"wall", "end_to_file", "end_to_exit", "size", "status", "log"}.
    Whatever it leaves in where (its file, a followed job's OUT.processes/) is
    removed, failed or not."""
    try:
        return _run_once(python, tool, workload, main, where, env, timeout)
    finally:
        for leftover in os.listdir(where):
            path = os.path.join(where, leftover)
            if leftover not in ("main.py", "empty.py"):
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def _run_once(python, tool, workload, main, where, env, timeout):
    out = os.path.join(where, "out" + (tool.suffix or ""))
    stamp = os.path.join(where, "stamp")
    log_path = os.path.join(where, "log")
    command = tool.command(python, out, [main] + workload.argv)
    with open(log_path, "wb") as log:
        start = time.monotonic_ns()
        process = subprocess.Popen(command, cwd=workload.cwd or where, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=dict(env, **tool.env, **{STAMP_ENV: stamp}),
                                   start_new_session=True)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise RunFailed(f"timed out after {timeout} s")
        exited = time.monotonic_ns()
    with open(log_path, "rb") as f:
        log = f.read().decode("utf-8", "replace").replace("\r", "\n")
    tail = " | ".join(line.strip() for line in log.splitlines()[-3:] if line.strip())
    if code != 0:
        raise RunFailed(f"exit code {code}: {tail}")
    if not os.path.exists(stamp):
        raise RunFailed(f"the program did not reach its end: {tail}")
    with open(stamp) as f:
        end_mono, end_real, status = f.read().split(maxsplit=2)
    result = {"wall": (exited - start) / 1e9, "end_to_exit": (exited - int(end_mono)) / 1e9,
              "end_to_file": None, "size": None, "status": status.strip(), "log": log}
    if tool.suffix:
        if not os.path.exists(out) or os.path.getsize(out) == 0:
            raise RunFailed(f"no output file, or an empty one: {tail}")
        info = os.stat(out)
        result["size"] = info.st_size
        # st_mtime comes from the kernel's coarse clock: a few ms of resolution
        result["end_to_file"] = (info.st_mtime_ns - int(end_real)) / 1e9
    return result


def details(tool, result):
    """What the run's output says about what it recorded."""
    found = {}
    if tool.name == VIZTRACER:
        entries = re.findall(r"Total Entries: (\d+)", result["log"])
        if entries:
            found["entries"] = int(entries[-1])
        found["overflow"] = "Circular buffer is full" in result["log"]
    elif tool.name in (OURS, OURS_WHOLE, OURS_JSON):
        calls = re.findall(r"pytrace_cffi: (\d+) calls?", result["log"])
        if calls:
            found["calls"] = int(calls[-1])
    if result["status"] not in ("0", "None"):
        found["program_status"] = result["status"]
    return found


# -- rounds ----------------------------------------------------------------------

def measure(args, workloads, tools, env, where):
    main = os.path.join(where, "main.py")
    with open(main, "w") as f:
        f.write(WRAPPER)
    empty = os.path.join(where, "empty.py")
    open(empty, "w").close()
    results = {}          # (workload, tool) -> {"runs": [...], "info": {...}, "error": str}
    broken = set()
    for tool in tools:    # warm-up, and a check that every tool works at all
        try:
            run_once(args.python, tool, Workload("empty", [empty]), main, where, env, 120)
        except RunFailed as exc:
            say(f"{tool.name}: fails on an empty script, not measured ({exc})")
            broken.add(tool.name)
    tools = [tool for tool in tools if tool.name not in broken]
    for workload in workloads:
        say(f"{workload.name}: warm-up (untraced) ...")
        try:
            run_once(args.python, Tool(UNTRACED, None, []), workload, main, where, env,
                     args.timeout)
        except RunFailed as exc:
            say(f"{workload.name}: fails untraced, skipped ({exc})")
            continue
        started = time.monotonic()
        for round_ in range(args.rounds):
            shift = round_ % len(tools)
            for tool in tools[shift:] + tools[:shift]:
                cell = results.setdefault((workload.name, tool.name),
                                          {"runs": [], "info": {}, "error": None})
                if cell["error"]:
                    continue
                try:
                    result = run_once(args.python, tool, workload, main, where, env,
                                      args.timeout)
                except RunFailed as exc:
                    cell["error"] = str(exc)
                    say(f"  {workload.name} round {round_ + 1}: {tool.name} failed: {exc}")
                    continue
                info = details(tool, result)
                if info.get("overflow"):
                    cell["info"]["overflow"] = True
                cell["info"].update({k: v for k, v in info.items() if k != "overflow"})
                del result["log"]
                cell["runs"].append(result)
                say(f"  {workload.name} round {round_ + 1}/{args.rounds}: {tool.name:18s} "
                    f"{result['wall']:8.2f} s, end->exit {result['end_to_exit']:6.2f} s")
        say(f"{workload.name}: {time.monotonic() - started:.0f} s")
    return results


# -- the table -------------------------------------------------------------------

def best(cell, key):
    values = [run[key] for run in cell["runs"] if run[key] is not None]
    return min(values) if values else None


def seconds(value):
    if value is None:
        return ""
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def size_text(size):
    if size is None:
        return ""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def table(workloads, tools, results, args):
    lines = ["| workload | tool | start -> exit (s) | x untraced | / cProfile "
             "| end -> file (s) | end -> exit (s) | file | notes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for workload in workloads:
        cells = {tool.name: results.get((workload.name, tool.name)) for tool in tools}
        walls = {name: best(cell, "wall") for name, cell in cells.items()
                 if cell and cell["runs"]}
        base, cprofile = walls.get(UNTRACED), walls.get(CPROFILE)
        for tool in tools:
            cell = cells[tool.name]
            if cell is None:
                continue
            notes = []
            info = cell["info"]
            if "calls" in info:
                notes.append(f"{info['calls']:,} calls")
            if tool.name == VIZTRACER and "entries" in info:
                notes.append(f"{info['entries']:,} entries kept")
            if info.get("overflow"):
                notes.append(f"**dropped the run's start** (buffer full at "
                             f"{args.viztracer_entries:,} entries)")
            if "program_status" in info:
                notes.append(f"program exit status {info['program_status']}")
            if cell["error"]:
                notes.append(f"failed: {cell['error'][:150]}")
            if len(cell["runs"]) < args.rounds:
                notes.append(f"{len(cell['runs'])} of {args.rounds} rounds")
            wall = walls.get(tool.name)
            sizes = [run["size"] for run in cell["runs"] if run["size"] is not None]
            lines.append("| " + " | ".join([
                workload.name, tool.name, seconds(wall),
                f"{wall / base:.2f}x" if wall and base else "",
                f"{wall / cprofile:.2f}" if wall and cprofile else "",
                seconds(best(cell, "end_to_file")), seconds(best(cell, "end_to_exit")),
                size_text(max(sizes) if sizes else None), "; ".join(notes)]) + " |")
    return "\n".join(lines)


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter of every run (default: this one)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds; each cell is the best of them (default 3)")
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS,
                        help="comma-separated: a shared workload's name, NAME:ARG for its "
                             f"argument (many_events:10 is 10M events), or {MORE_ITERTOOLS} "
                             f"(default: {DEFAULT_WORKLOADS})")
    parser.add_argument("--ours-after", action="store_true",
                        help="also time run -o out.pftrace encoded after the program "
                             "(PYTRACE_CFFI_LIVE=0)")
    parser.add_argument("--ours-json", action="store_true",
                        help="also time pytrace_cffi run -o out.json")
    parser.add_argument("--tools", default="",
                        help="comma-separated: only these of untraced, cProfile, VizTracer, "
                             "pytrace_cffi (and 'pytrace_cffi .json' with --ours-json); "
                             "the ratios need untraced and cProfile among them")
    parser.add_argument("--viztracer-entries", type=int, default=VIZTRACER_ENTRIES,
                        help="VizTracer's --tracer_entries (its buffer, one entry per call; "
                             f"default {VIZTRACER_ENTRIES:,}: ~0.9 kB each while it writes)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds before a run is killed and its cell marked failed")
    parser.add_argument("--cache-dir", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pytrace-e2e"),
        help="where the more-itertools sdist is downloaded and unpacked")
    parser.add_argument("--more-itertools-version", default=MORE_ITERTOOLS_VERSION)
    parser.add_argument("--full-suite", action="store_true",
                        help="run more-itertools' slowest tests too (~50 s untraced)")
    parser.add_argument("--note", default="",
                        help="a line to print under the table (e.g. 'the machine was not quiet')")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table to FILE")
    parser.add_argument("--json", metavar="FILE", help="save every run's timings to FILE")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.python = shutil.which(args.python) or args.python
    return args


def main(argv=None):
    args = parse_args(argv)
    notes = []
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)      # as an installed program runs
    version = probe(args.python, "import platform; print(platform.python_implementation(), "
                                 "platform.python_version())")
    if version is None:
        sys.exit(f"{args.python} does not run")
    env, location, commit = find_pytrace_cffi(args.python, env)
    tools, viz_version = make_tools(args, notes)
    workloads = make_workloads([w.strip() for w in args.workloads.split(",") if w.strip()],
                               args, notes)
    load_before = loadavg()
    started = time.monotonic()
    say(f"{version} ({args.python}); pytrace_cffi {commit} at {location}; "
        f"load average {load_before}")
    with tempfile.TemporaryDirectory(prefix="pytrace-e2e-") as where:
        results = measure(args, workloads, tools, env, where)
    elapsed = time.monotonic() - started
    header = (f"End to end, {datetime.date.today().isoformat()}: {version} ({args.python}), "
              f"pytrace_cffi {commit} ({location}), "
              f"VizTracer {viz_version or 'not installed'}; best of {args.rounds} "
              f"round{'s' if args.rounds > 1 else ''}, {os.cpu_count()} CPUs "
              f"({platform.platform()}); load average {load_before} at the start, "
              f"{loadavg()} at the end; {elapsed / 60:.1f} minutes in all.")
    workload_notes = [f"{w.name}: {w.note}" for w in workloads if w.note]
    text = "\n\n".join(filter(None, [header, table(workloads, tools, results, args),
                                     "\n".join(f"- {n}" for n in workload_notes + notes)
                                     or None, args.note or None]))
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({"header": header, "notes": workload_notes + notes,
                       "results": [{"workload": w, "tool": t, **cell}
                                   for (w, t), cell in results.items()]}, f, indent=1)


if __name__ == "__main__":
    main()
