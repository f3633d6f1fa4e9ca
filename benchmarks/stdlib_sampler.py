#!/usr/bin/env python3
"""pytrace_cffi beside the standard library's sampling profiler (Python 3.15's
`python -m profiling.sampling`, PEP 799), on the same workloads in one run
(issue 29, item 3). Run by hand with a 3.15 interpreter; not a test:

    python3.15 benchmarks/stdlib_sampler.py [--rounds 3] [--markdown FILE] [--json FILE]

Each workload runs as a program, one subprocess per run, under each tool:

    untraced            PYTHON prog.py
    pytrace_cffi        PYTHON -m pytrace_cffi run -o out.pftrace prog.py
    sampling 1 kHz      PYTHON -m profiling.sampling run -a --collapsed -o out.txt prog.py
    sampling 10 kHz     the same with -r 10khz

(-a: every thread, as pytrace_cffi records; the sampler's default is the main
thread only. 1 kHz is its default rate.) A round runs every tool once, in an
order rotating from round to round; each time is the best over the rounds.
Measured per run: spawn to exit (the file written), CPU time of every process
the run made (the sampler samples from a process of its own), the file's size.
Then what each saw of the workload's own functions: our trace's calls (counted)
and the samples in which each function is on a stack (the sampler counts no
calls). Once per workload, untimed, the sampler's other files are written
(--gecko, --flamegraph, --pstats) for their sizes.

The pytrace_cffi measured is PYTHONPATH's, else this repository's tree (its
in-place build is abi3: it loads in 3.15). Workloads come from
../../shared/workloads relative to this file, or $PYTRACE_WORKLOADS.
"""
import argparse
import collections
import datetime
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS_DIR = os.environ.get("PYTRACE_WORKLOADS") or os.path.join(
    ROOT, "..", "shared", "workloads")

# Each program runs a shared workload enough times for 1-3 s untraced (3.15,
# this 2-core VM); short_calls is this file's own (below).
PROGRAMS = {
    "fib": ("fib", 300),
    "builtins_mix": ("builtins_mix", 300),
    "threads_mix": ("threads_mix", 150),
    "short_calls": (None, 1),
}
# Short calls among long ones: work() runs ~2 ms, 1000 times; tiny() well under
# 1 us, 1000 times; rare() ~30 us, 20 times; once() ~100 us, once. spin() is a
# plain loop (no built-in calls) of a fixed number of turns. Its short
# functions are what a sampler sees by chance only (their time over its interval).
SHORT_CALLS = '''\
import time

PER_US = 50     # loop turns per microsecond, roughly (3.15, this VM): fixed work

def spin(us):
    x = 0
    for _ in range(int(us * PER_US)):
        x += 1

def work():
    spin(2000)

def tiny():
    return 1

def rare():
    spin(30)

def once():
    spin(100)

def run():
    once()
    for i in range(1000):
        work()
        tiny()
        if i % 50 == 0:
            rare()

run()
'''
OWN = {"fib": {"fib", "run"},
       "builtins_mix": None, "threads_mix": None,          # filled from the workload file
       "short_calls": {"spin", "work", "tiny", "rare", "once", "run"}}
TOOLS = ("untraced", "pytrace_cffi", "sampling 1 kHz", "sampling 10 kHz")


def program_text(name):
    module, times = PROGRAMS[name]
    if module is None:
        return SHORT_CALLS
    return (f"import sys\nsys.path.insert(0, {os.path.abspath(WORKLOADS_DIR)!r})\n"
            f"import {module}\nfor _ in range({times}):\n    {module}.run()\n")


def own_functions(name):
    if OWN[name] is not None:
        return OWN[name]
    with open(os.path.join(WORKLOADS_DIR, f"{PROGRAMS[name][0]}.py"), encoding="utf-8") as f:
        return set(re.findall(r"^def (\w+)", f.read(), re.M))


def command(tool, prog, out):
    py = [sys.executable]
    if tool == "untraced":
        return py + [prog]
    if tool == "pytrace_cffi":
        return py + ["-m", "pytrace_cffi", "run", "-o", out, prog]
    rate = ["-r", "10khz"] if "10" in tool else []
    return py + ["-m", "profiling.sampling", "run", "-a", *rate, "--collapsed", "-o", out, prog]


def out_name(tool):
    return {"untraced": None, "pytrace_cffi": "out.pftrace"}.get(tool, "out.txt")


def run_once(tool, prog, workdir, env):
    out = out_name(tool)
    out_path = os.path.join(workdir, out) if out else None
    if out_path and os.path.exists(out_path):
        os.unlink(out_path)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(command(tool, prog, out_path), cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{tool} on {prog} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    facts = {"wall": wall, "cpu": cpu,
             "size": os.path.getsize(out_path) if out_path else None}
    found = re.search(r"Captured (\d+) samples", proc.stdout + proc.stderr)
    if found:
        facts["samples"] = int(found.group(1))
    found = re.search(r"Error rate: ([\d.]+)", proc.stdout + proc.stderr)
    if found:
        facts["error_rate"] = float(found.group(1))
    return facts


def own_files(name):
    """The workload's files: its program's and its shared module's."""
    return {f"{name}.py", f"{PROGRAMS[name][0]}.py"}


def seen_by_us(path, own, files):
    import pytrace_cffi
    calls = collections.Counter()
    total = collections.Counter()
    for call in pytrace_cffi.load(path):
        where, _, name = call.name.rpartition(": ")
        if name in own and os.path.basename(where.partition("(")[0]) in files:
            calls[name] += 1
            total[name] += call.end_ns - call.start_ns
    return {name: {"calls": calls[name], "ms": total[name] / 1e6} for name in calls}


def seen_by_sampler(path, own, files):
    """Samples in which each own function is on the stack (collapsed stacks:
    `tid:N;file:function:line;... COUNT`)."""
    samples = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            names = {frame.split(":")[-2] for frame in stack.split(";")[1:]
                     if frame.count(":") >= 2
                     and os.path.basename(frame.rsplit(":", 2)[0]) in files}
            for name in names & own:
                samples[name] += int(count)
    return {name: {"samples": n} for name, n in samples.items()}


def other_sizes(prog, workdir, env):
    sizes = {}
    for fmt, name in (("--gecko", "out.gecko.json"), ("--flamegraph", "out.html"),
                      ("--pstats", "out.pstats")):
        path = os.path.join(workdir, name)
        subprocess.run([sys.executable, "-m", "profiling.sampling", "run", "-a", fmt, "-o",
                        path, prog], cwd=workdir, env=env, capture_output=True, timeout=600,
                       check=True)
        sizes[fmt.lstrip("-")] = os.path.getsize(path)
    return sizes


def measure(names, rounds):
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", ROOT)
    results = {}
    with tempfile.TemporaryDirectory(prefix="stdlib-sampler-") as workdir:
        for name in names:
            prog = os.path.join(workdir, f"{name}.py")
            with open(prog, "w", encoding="utf-8") as f:
                f.write(program_text(name))
            for tool in TOOLS:              # warm-up: .pyc files, caches
                run_once(tool, prog, workdir, env)
            best = {}
            seen = {}
            for r in range(rounds):
                order = TOOLS[r % len(TOOLS):] + TOOLS[:r % len(TOOLS)]
                for tool in order:
                    facts = run_once(tool, prog, workdir, env)
                    if tool not in best or facts["wall"] < best[tool]["wall"]:
                        best[tool] = facts
                    if r == 0 and tool != "untraced":
                        kept = os.path.join(workdir, f"{name}-{tool.replace(' ', '_')}-"
                                            + out_name(tool))
                        shutil.copy(os.path.join(workdir, out_name(tool)), kept)
                        seen[tool] = kept
            own, files = own_functions(name), own_files(name)
            for tool, path in seen.items():
                best[tool]["seen"] = (seen_by_us(path, own, files) if tool == "pytrace_cffi"
                                      else seen_by_sampler(path, own, files))
            results[name] = {"tools": best, "own": sorted(own),
                             "sampler_files": other_sizes(prog, workdir, env)}
            print(console_rows(name, results[name]), flush=True)
    return results


def size_text(n):
    if n is None:
        return ""
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def seen_text(tool, facts, own):
    seen = facts.get("seen")
    if seen is None:
        return ""
    if tool == "pytrace_cffi":
        return ", ".join(f"{n} {seen[n]['calls']} calls {seen[n]['ms']:.1f} ms"
                         for n in own if n in seen) or "-"
    missed = [n for n in own if n not in seen]
    parts = [f"{n} {seen[n]['samples']}" for n in own if n in seen]
    return (", ".join(parts) + (f"; never seen: {', '.join(missed)}" if missed else ""))


def console_rows(name, result):
    base = result["tools"]["untraced"]["wall"]
    lines = [f"{name}:"]
    for tool in TOOLS:
        f = result["tools"][tool]
        lines.append(f"  {tool:16} {f['wall']:.3f} s ({f['wall'] / base:.2f}x) cpu "
                     f"{f['cpu']:.3f} s  {size_text(f['size'])}  "
                     f"{seen_text(tool, f, result['own'])}")
    lines.append("  sampler's other files (1 kHz): " + ", ".join(
        f"{k} {size_text(v)}" for k, v in result["sampler_files"].items()))
    return "\n".join(lines)


def markdown(results, rounds):
    rows = ["| workload | tool | spawn to exit (s) | / untraced | CPU, all processes (s) "
            "| file | the workload's functions seen (ours: calls; sampler: samples on "
            "the stack) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, result in results.items():
        base = result["tools"]["untraced"]["wall"]
        for tool in TOOLS:
            f = result["tools"][tool]
            extra = ""
            if "error_rate" in f:
                extra = f" ({f['samples']} samples, {f['error_rate']:.0f}% failed)"
            rows.append(f"| {name} | {tool}{extra} | {f['wall']:.3f} | {f['wall'] / base:.2f} | "
                        f"{f['cpu']:.3f} | {size_text(f['size'])} | "
                        f"{seen_text(tool, f, result['own'])} |")
    sizes = ["| workload | " + " | ".join(
        ["pytrace_cffi .pftrace"] + [f"sampler {k}" for k in ("collapsed", "gecko",
                                                             "flamegraph", "pstats")]) + " |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, result in results.items():
        t, s = result["tools"], result["sampler_files"]
        sizes.append(f"| {name} | {size_text(t['pytrace_cffi']['size'])} | "
                     f"{size_text(t['sampling 1 kHz']['size'])} | {size_text(s['gecko'])} | "
                     f"{size_text(s['flamegraph'])} | {size_text(s['pstats'])} |")
    head = (f"Measured {datetime.date.today()} by `python3.15 benchmarks/stdlib_sampler.py "
            f"--rounds {rounds}` on {os.cpu_count()} CPUs, {platform.platform()}, "
            f"{platform.python_implementation()} {platform.python_version()}; best of "
            f"{rounds} rounds.")
    return head + "\n\n" + "\n".join(rows) + "\n\nFile sizes (sampler at 1 kHz):\n\n" \
        + "\n".join(sizes) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", choices=sorted(PROGRAMS))
    parser.add_argument("--markdown", metavar="FILE")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    import importlib.util
    if importlib.util.find_spec("profiling") is None:
        raise SystemExit("needs Python 3.15+ (profiling.sampling); this is "
                         + platform.python_version())
    results = measure(args.only or list(PROGRAMS), args.rounds)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown(results, args.rounds))


if __name__ == "__main__":
    main()
