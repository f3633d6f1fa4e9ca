"""Hangs as a user meets them (#30): a dump's stacks and ring taken at one instant,
SIGTERM of a process stuck in C holding the GIL, and the issue's end-to-end
check: a 2-rank job stuck in C sleep() dumped by `dump DIR`, reported by
`report`, and killed by SIGTERM. Expected names and lines are the test
programs' own (their line numbers as written below)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from pytrace_cffi.flight.dumps import merged_stack, process_dumps, read_dump
from pytrace_cffi.hang_report import report

from test_children import ROOT, TIMEOUT, _env_own_tmp, run_command


def _write(tmp_path, name, source):
    path = tmp_path / name
    # no blank first line: a module's first line is then 1 on every Python
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


def _env(tmp_path):
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    return env


def _whole(dumps, count, deadline_s=30):
    """The process dumps of dumps once count of them are whole (done.json)."""
    deadline = time.monotonic() + deadline_s
    while True:
        found = [d for d in process_dumps(dumps) if os.path.exists(os.path.join(d, "done.json"))]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


# -- frames and ring from one instant (#30 item 7) -----------------------------------

MOVES_ON = """
import json, sys, threading, time
import pytrace_cffi
from pytrace_cffi.flight.dumps import dump_facts

go, in_second = threading.Event(), threading.Event()

def first():
    go.wait()

def second():
    in_second.set()
    time.sleep(30)

def worker():
    first()
    second()

pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
threading.Thread(target=worker, name="mover", daemon=True).start()
def in_first():
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code.co_name == "first":
                return True
            frame = frame.f_back
    return False

while not in_first():
    time.sleep(0.01)
recorder = pytrace_cffi._running.session.flight
journal = recorder._journal

def moved_on():
    # after the frames were read, before the ring is cloned: the thread leaves
    # first() and is in second() by the clone
    go.set()
    in_second.wait()
    time.sleep(0.05)
    journal()

recorder._journal = moved_on
where = pytrace_cffi.dump(reason="now")
recorder._journal = journal
recorder.finish_formatting()
pytrace_cffi.stop()
for _ in range(600):
    try:
        facts = dump_facts(where)
        break
    except Exception:
        time.sleep(0.05)
mover = next(t for t in facts["threads"] if t["name"] == "mover")
print(json.dumps([[f["name"].split(": ")[-1], f.get("line"), f.get("since_ns") is not None]
                  for f in mover["stack"]]))
"""


def test_a_dumps_stacks_and_ring_are_of_one_instant(tmp_path):
    """A thread goes on between the moment its frames are read and the ring's
    clone: its stack is what it was at the frames' instant, each call with the
    time it began (not "since before the recorded window", which it was not),
    and no call of after that instant (second, time.sleep) is mixed into it."""
    dumps = tmp_path / "dumps"
    _write(tmp_path, "prog.py", MOVES_ON)
    proc = run_command([sys.executable, str(tmp_path / "prog.py"), str(dumps)], tmp_path,
                       _env(tmp_path), 60)
    assert proc.returncode == 0, proc.stderr
    stack = json.loads(proc.stdout)
    names = [name for name, _, _ in stack]
    assert names[names.index("worker"):names.index("worker") + 3] == [
        "worker", "first", "wait"], stack
    assert "second" not in names and "time.sleep" not in names, stack
    assert [s for name, line, s in stack if name in ("worker", "first")] == [True, True]
    assert [line for name, line, _ in stack if name in ("worker", "first")] == [15, 8]


def test_frames_and_ring_that_disagree_are_never_made_one_stack():
    """Where a stack's frames and its ring's open calls still disagree, neither is
    made up from the other: a Python call only the ring holds is left out (named
    apart), a frame without a start inside one with a start is not "before the
    recorded window" (the ring reaches back to it), a built-in only the ring
    shows goes in where it ran, and a call running since recording began is."""
    frames = [{"name": "a.py(1): outer", "since_ns": None, "line": 3},
              {"name": "a.py(5): middle", "since_ns": None, "line": 7},
              {"name": "a.py(9): inner", "since_ns": None, "line": 11}]
    chain = [("a.py(1): outer", None), ("a.py(9): inner", 30),
             ("c10d.py(40): wrapper", 40), ("time.sleep", 50)]
    stack, ring_only = merged_stack(frames, chain)
    assert stack == [{"name": "a.py(1): outer", "since_ns": None, "line": 3},
                     {"name": "a.py(5): middle", "since_ns": None, "line": 7,
                      "start_seen": False},
                     {"name": "a.py(9): inner", "since_ns": 30, "line": 11},
                     {"name": "time.sleep", "since_ns": 50}]
    assert ring_only == ["c10d.py(40): wrapper"]
    # the ring reaching back to no frame: every frame's start is before the window
    stack, ring_only = merged_stack(frames, [("time.sleep", 50)])
    assert [f.get("start_seen", True) for f in stack] == [True, True, True, True]
    # the launcher (python -m: runpy), which dumps' frames leave out, is no
    # "call only the ring holds"
    launched = [("<frozen runpy>(173): _run_module_as_main", 1),
                ("<frozen runpy>(65): _run_code", 2), ("builtins.exec", 3)] + chain
    stack, ring_only = merged_stack(frames, launched)
    assert ring_only == ["c10d.py(40): wrapper"]
    assert [f["name"] for f in stack] == ["a.py(1): outer", "a.py(5): middle",
                                          "a.py(9): inner", "time.sleep"]


def test_report_says_which_part_of_a_stack_is_from_which_source(tmp_path):
    process_dir = tmp_path / "proc-42"
    process_dir.mkdir()
    (process_dir / "dump.json").write_text(json.dumps({
        "version": 1, "reason": "request", "pid": 42, "label": "rank 0", "rank": 0,
        "host": "vm", "monotonic_ns": 9_000_000_000, "threads": [{
            "native_id": 42, "name": "MainThread",
            "ring_only": ["c10d.py(40): wrapper"],
            "stack": [{"name": "a.py(1): outer", "since_ns": 1_000_000_000, "line": 3},
                      {"name": "a.py(5): middle", "since_ns": None, "line": 7,
                       "start_seen": False}]}]}))
    assert report([str(process_dir)]).splitlines()[1:] == [
        "rank 0 in middle (a.py:7) (start not in the ring)",
        "    a.py:3: outer   8.0 s",
        "    a.py:7: middle  start not in the ring",
        "note: rank 0 (pid 42), thread 'MainThread': the ring holds c10d.py(40): wrapper "
        "open, which its Python frames do not show: the stack above is its frames' (with "
        "the ring's built-in calls)"]


# -- SIGTERM of a process deadlocked in C holding the GIL ----------------------------

DEADLOCKED = """
import ctypes, sys, threading, time
import pytrace_cffi

libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)     # zeroed: PTHREAD_MUTEX_INITIALIZER
held = threading.Event()

def holder():
    libc.pthread_mutex_lock(mutex)
    held.set()
    time.sleep(1)                           # then needs the GIL: never again
    libc.pthread_mutex_unlock(mutex)

def locks_holding_the_gil():
    print("ready", flush=True)
    ctypes.PyDLL(None).pthread_mutex_lock(mutex)

pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
threading.Thread(target=holder, daemon=True).start()
held.wait()
locks_holding_the_gil()
print("never", flush=True)
"""


def test_sigterm_of_a_process_deadlocked_holding_the_gil_dumps_and_kills(tmp_path):
    """The main thread waits on a mutex in C holding the GIL; the mutex's holder
    needs the GIL to let it go: a deadlock no Python code can leave, which
    SIGTERM kills at once untraced. Only C can dump it; then the process dies of
    SIGTERM, as it would have (it lived on for good before). report gives the
    line the main thread is on, read by C's clone; without it, says why."""
    dumps = tmp_path / "dumps"
    _write(tmp_path, "prog.py", DEADLOCKED)
    with subprocess.Popen([sys.executable, str(tmp_path / "prog.py"), str(dumps)],
                          cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout.readline() == "ready\n"
            time.sleep(0.5)     # (the main thread holds the GIL, deadlocked or not yet)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM and out == "", err
    [dump] = _whole(dumps, 1)
    facts = read_dump(dump)[0]
    assert (facts["written_by"], facts["trigger"]) == ("C", "sigterm")
    assert "-sigterm-c" in dump and f"-> {dump}" in err
    # the frame's current line: the clone read it (lines.tsv); the function's first
    # is 14, where its mutex_lock is 16
    assert "locks_holding_the_gil (prog.py:16) for " in report([dump]), report([dump])
    lines = os.path.join(dump, "lines.tsv")
    with open(lines, "w") as f:     # as the clone writes it for a Python it cannot read
        f.write("unknown\tPython 3.99's frames are not known to this pytrace_cffi\nend\n")
    assert ("locks_holding_the_gil (prog.py:14; line not known: Python 3.99's frames are "
            "not known to this pytrace_cffi) for ") in report([dump]), report([dump])
    os.unlink(lines)                # (a dump written before lines.tsv was)
    text = report([dump])
    assert ("locks_holding_the_gil (prog.py:14; line not known: the dump has no lines.tsv "
            "(its frames were not read)) for ") in text, text
    assert ("prog.py(14): locks_holding_the_gil (line not known: the dump has no lines.tsv "
            "(its frames were not read))") in text, text


# -- the end-to-end check (#30: "done when") ---------------------------------

JOB = """
import ctypes, os, subprocess, sys

def stuck_released(seconds):
    os.write(1, f"rank 0 asleep {os.getpid()}\\n".encode())    # (one write: ranks share it)
    return ctypes.CDLL(None).sleep(seconds)          # the GIL released

def stuck_holding(seconds):
    os.write(1, f"rank 1 asleep {os.getpid()}\\n".encode())    # (one write: ranks share it)
    return ctypes.PyDLL(None).sleep(seconds)         # the GIL held

if len(sys.argv) > 1:
    rank = int(sys.argv[1])
    left = (stuck_holding if rank else stuck_released)(60)
    print(f"rank {rank} woke, {left} s left", flush=True)
else:
    ranks = [subprocess.Popen([sys.executable, __file__, str(rank)],
                              env=dict(os.environ, RANK=str(rank), WORLD_SIZE="2"))
             for rank in range(2)]
    print("codes", [rank.wait() for rank in ranks], flush=True)
"""


def _asleep(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


def test_a_two_rank_job_stuck_in_c_is_dumped_reported_and_killed(tmp_path):
    """Two ranks of `run --flight-recorder --processes-dir job -o out.pftrace`
    sleep in C, rank 0 with the GIL released, rank 1 holding it. `dump
    out-dumps` dumps both into that directory (rank 1's by C) and they sleep on;
    `report job` (the job's directory: its processes dump beside OUT) names
    each rank's function, its current line (rank 1's from the frames C's
    clone read) and how long it has been there; SIGTERM
    then dumps each and each dies of it. (How fast: benchmarks/flight_hang.py.)"""
    job, dumps = tmp_path / "job", tmp_path / "out-dumps"
    _write(tmp_path, "job.py", JOB)
    env = _env(tmp_path)
    with subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                           "--processes-dir", str(job), "-o", str(tmp_path / "out.pftrace"),
                           str(tmp_path / "job.py")], cwd=tmp_path, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as run:
        try:
            pids = {}
            while len(pids) < 2:
                line = run.stdout.readline()
                assert line, run.stderr.read()
                _, rank, _, pid = line.split()
                pids[int(rank)] = int(pid)
            deadline = time.monotonic() + 30
            while not all(_asleep(pid) for pid in pids.values()):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            asked = run_command([sys.executable, "-m", "pytrace_cffi", "dump", str(dumps)],
                                tmp_path, env, TIMEOUT)
            assert asked.returncode == 0, asked.stdout + asked.stderr
            written = sorted(_whole(dumps, 3))      # the job's process and its two ranks
            assert len(written) == 3 and all(_asleep(pid) for pid in pids.values())
            text = run_command([sys.executable, "-m", "pytrace_cffi", "report", str(job)],
                               tmp_path, env, TIMEOUT).stdout
            for pid in pids.values():
                os.kill(pid, signal.SIGTERM)
            out, err = run.communicate(timeout=TIMEOUT)
        finally:
            if run.returncode is None:
                os.killpg(run.pid, signal.SIGKILL)
    lines = text.splitlines()
    assert lines[0].startswith(f"{dumps}: 3 processes dumped at "), text
    rank0 = next(line for line in lines if line.startswith("rank 0 in "))
    rank1 = next(line for line in lines if line.startswith("rank 1 in "))
    assert rank0.startswith("rank 0 in stuck_released (job.py:5) for "), text
    assert rank1.startswith("rank 1 in stuck_holding (job.py:9) for "), text   # (its
    # current line, as rank 0's: the C-written dump's lines.tsv; 7 is its first)
    for line in (rank0, rank1):
        assert float(line.split(" for ")[1].split(" s")[0]) > 0, text
    assert "woke" not in out and "codes [-15, -15]" in out, out + err
    by_rank = {}
    deadline = time.monotonic() + 30        # (the SIGTERM dumps' clones may lag)
    while len(list(dumps.glob("*/proc-*/done.json"))) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    for directory in dumps.glob("*/proc-*"):
        facts = read_dump(str(directory))[0]
        by_rank.setdefault(facts.get("rank"), []).append(
            facts.get("trigger") or facts["reason"])
    assert sorted(by_rank[0]) == ["SIGTERM", "request"]
    assert sorted(by_rank[1]) == ["SIGTERM", "request"]
