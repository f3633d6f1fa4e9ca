#!/usr/bin/env python3
"""How long a thread waits for the GIL while another is traced, by flight
recorder ring size, for docs/PERFORMANCE.md ("Flight recorder"; #33 item 11).
Run by hand; it is not a test.

One process per configuration and pass: a busy thread calls a small function in
a loop while a sleeper thread does time.sleep(0.001) and notes the time between
its wakeups; the table gives the worst and the 99th percentile of those gaps
(the sleeper's 1 ms included), and how many calls the busy thread made a second.
Untraced and ordinary tracing (start(), everything kept) are the references;
the rings are start(flight_recorder=SIZE) (--via run: `python -m pytrace_cffi
run --flight-recorder SIZE`). Halfway through, a ring's process is sent SIGUSR1
and the table says who wrote the dump: Python, or C when Python did not answer
within a second (see flight/recorder.py). Configurations alternate within each
pass; the worst of the passes is shown (a gap is rare: the worst is the measure).

    PYTHONPATH=. python benchmarks/gil_gaps.py [--seconds 4] [--passes 3]
    PYTHONPATH=. python benchmarks/gil_gaps.py --via run --rings 512k 2M
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from floor_inner import measuring_env  # noqa: E402

PROGRAM = r'''
import json, os, sys, threading, time
seconds, mode, dumps = float(sys.argv[1]), sys.argv[2], sys.argv[3]
if mode.startswith("start:"):
    import pytrace_cffi
    ring = mode.split(":", 1)[1]
    if ring == "trace":
        pytrace_cffi.start()
    else:
        pytrace_cffi.start(flight_recorder=ring, dumps_dir=dumps)

stop = threading.Event()
calls = [0]
gaps = []


def leaf(i):
    return i + 1


def busy():
    n = 0
    while not stop.is_set():
        for i in range(1000):
            leaf(i)
        n += 1000
    calls[0] = n


def sleeper():
    last = time.perf_counter()
    while not stop.is_set():
        time.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now


threads = [threading.Thread(target=busy), threading.Thread(target=sleeper)]
for t in threads:
    t.start()
print("started", flush=True)
time.sleep(seconds)
stop.set()
for t in threads:
    t.join()
if mode.startswith("start:"):
    pytrace_cffi.stop()
gaps.sort()
print("GAPS " + json.dumps({"max_ms": gaps[-1] * 1e3, "p99_ms": gaps[len(gaps) * 99 // 100] * 1e3,
                            "wakeups": len(gaps), "calls_per_s": calls[0] / seconds}),
      flush=True)
'''


def measure(config, args, program):
    """One process of config ("untraced", "trace" or a ring size): its GAPS dict,
    with "dump": who wrote the SIGUSR1 dump (rings only)."""
    work = tempfile.mkdtemp(prefix="gil_gaps-")
    dumps = os.path.join(work, "dumps")
    ring = config not in ("untraced", "trace")
    try:
        if config == "untraced":
            cmd = [sys.executable, program, str(args.seconds), "untraced", dumps]
        elif args.via == "start":
            cmd = [sys.executable, program, str(args.seconds), "start:" + config, dumps]
        else:
            cmd = [sys.executable, "-m", "pytrace_cffi", "run", "-o",
                   os.path.join(work, "out.json")]
            if ring:
                cmd += ["--flight-recorder", config, "--dumps-dir", dumps]
            cmd += [program, str(args.seconds), "run", dumps]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=work, env=measuring_env()) as proc:
            if proc.stdout.readline().strip() != "started":
                raise SystemExit(f"{config}: {proc.stderr.read()[-3000:]}")
            if ring:
                time.sleep(args.seconds / 2)
                proc.send_signal(signal.SIGUSR1)
            out, err = proc.communicate()
        if proc.returncode or "GAPS " not in out:
            raise SystemExit(f"{config} failed:\n{out[-2000:]}\n{err[-3000:]}")
        got = json.loads(out.split("GAPS ", 1)[1].splitlines()[0])
        if ring:
            got["dump"] = _dump_writer(dumps)
        return got
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _dump_writer(dumps):
    """"Python", "C" or "none": who wrote the dump under dumps."""
    for root, _, files in os.walk(dumps):
        if "dump.json" in files:
            deadline = time.monotonic() + 10     # (the clone may still be writing)
            while time.monotonic() < deadline:
                try:
                    with open(os.path.join(root, "dump.json"), encoding="utf-8") as f:
                        return json.load(f).get("written_by", "?")
                except (OSError, ValueError):
                    time.sleep(0.1)
    return "none"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="each process's run")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--rings", nargs="+", default=["512k", "2M", "8M", "16M", "64M"])
    ap.add_argument("--via", choices=["start", "run"], default="start")
    ap.add_argument("--json", help="also save the passes' results here")
    args = ap.parse_args()
    import pytrace_cffi
    print(f"pytrace_cffi from {os.path.dirname(pytrace_cffi.__file__)}, Python "
          f"{sys.version.split()[0]}, via {args.via}, {args.passes} passes x "
          f"{args.seconds:g} s")
    configs = ["untraced", "trace"] + args.rings
    results = {c: [] for c in configs}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PROGRAM)
    try:
        for p in range(args.passes):
            for config in (configs if p % 2 == 0 else configs[::-1]):
                results[config].append(measure(config, args, f.name))
    finally:
        os.unlink(f.name)
    print(f"{'config':10} {'worst gap ms':>13} {'p99 gap ms':>11} {'Mcalls/s':>9} "
          f"{'worst of passes':>24}  dumps by")
    for config in configs:
        rs = results[config]
        worst = max(r["max_ms"] for r in rs)
        p99 = max(r["p99_ms"] for r in rs)
        rate = sorted(r["calls_per_s"] for r in rs)[len(rs) // 2] / 1e6
        each = ", ".join(f"{r['max_ms']:.0f}" for r in rs)
        dumps = ", ".join(r.get("dump", "-") for r in rs)
        print(f"{config:10} {worst:13.1f} {p99:11.2f} {rate:9.2f} {each:>24}  {dumps}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
