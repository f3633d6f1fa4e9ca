#!/usr/bin/env python3
"""How fast the flight recorder serves a process stuck in C (#30's "done when"), for
docs/PERFORMANCE.md ("Flight recorder"). Run by hand; it is not a test
(tests/test_flight_hangs.py checks the same facts without the clock).

For each way of being stuck, one process recording with --flight-recorder:
  released   ctypes.CDLL(None).sleep(60): in C, the GIL released
  holding    ctypes.PyDLL(None).sleep(60): in C, the GIL held (a signal ends sleep())
  deadlock   ctypes.PyDLL(None).pthread_mutex_lock on a mutex whose holder needs the
             GIL: held for good, no signal ends it
it measures, --rounds times: `dump DIR` until the dump is whole (done.json), whether
the process still waits after it, and SIGTERM until the process is gone (and its
SIGTERM dump whole). Prints the median and the worst of each.

    PYTHONPATH=. python benchmarks/flight_hang.py --rounds 5
"""
import argparse
import glob
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

STUCK = {
    "released": "ctypes.CDLL(None).sleep(60)",
    "holding": "ctypes.PyDLL(None).sleep(60)",
    "deadlock": "ctypes.PyDLL(None).pthread_mutex_lock(mutex)",
}
PROGRAM = """
import ctypes, threading, time
mutex = ctypes.create_string_buffer(64)
held = threading.Event()

def holder():
    ctypes.CDLL(None).pthread_mutex_lock(mutex)
    held.set()
    time.sleep(2)                    # then needs the GIL
    ctypes.CDLL(None).pthread_mutex_unlock(mutex)

threading.Thread(target=holder, daemon=True).start()
held.wait()
print("ready", flush=True)
{stuck}
"""


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _wait(predicate, limit_s=60):
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > limit_s:
            return None
        time.sleep(0.005)
    return time.monotonic() - start


def one_round(kind, workdir):
    program = os.path.join(workdir, f"{kind}.py")
    with open(program, "w") as f:
        f.write(textwrap.dedent(PROGRAM).format(stuck=STUCK[kind]))
    dumps = os.path.join(workdir, f"{kind}-dumps-{time.monotonic_ns()}")
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                             "--no-follow", "--dumps-dir", dumps, "-o",
                             os.path.join(workdir, "out.pftrace"), program],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        _wait(lambda: _state(proc.pid) == "S")
        time.sleep(2.5)                 # (deadlock: the holder wants the GIL by then)
        start = time.monotonic()
        asked = subprocess.run([sys.executable, "-m", "pytrace_cffi", "dump", dumps],
                               env=env, capture_output=True, text=True)
        if asked.returncode:
            print(f"{kind}: dump said: {asked.stdout}{asked.stderr}".strip())
        dumped = (_wait(lambda: glob.glob(os.path.join(dumps, "*", "proc-*", "done.json")))
                  or 0) + (time.monotonic() - start)
        still = _state(proc.pid) == "S"
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        killed = time.monotonic() - start
        whole = len(glob.glob(os.path.join(dumps, "*", "proc-*", "done.json")))
        return dumped, still, killed, proc.returncode, whole
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        for kind in STUCK:
            rounds = [one_round(kind, workdir) for _ in range(args.rounds)]
            dumped = [r[0] for r in rounds]
            killed = [r[2] for r in rounds]
            print(f"{kind:9s} dump DIR -> whole: median {statistics.median(dumped):.2f} s, "
                  f"worst {max(dumped):.2f} s; still waiting after: "
                  f"{sum(r[1] for r in rounds)}/{len(rounds)}; SIGTERM -> gone: median "
                  f"{statistics.median(killed):.2f} s, worst {max(killed):.2f} s; "
                  f"exit codes {sorted({r[3] for r in rounds})}; dumps whole per round "
                  f"{sorted({r[4] for r in rounds})}")


if __name__ == "__main__":
    main()
