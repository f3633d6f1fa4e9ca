"""The flight recorder (pytrace_cffi/flight/, c_src/pt_flight.c): a bounded ring
dumped while the program goes on, by pytrace_cffi.dump(), a signal, an uncaught
exception, SIGTERM, the watchdog, and by C alone when a thread holds the GIL in
C; `run --flight-recorder` with `dump DIR` reaches every process of a job.
Expected call counts are literals (FIB_CALLS: fib(n) makes 2 * F(n + 1) - 1 calls)
or come from the test program's own structure."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pytrace_cffi
from pytrace_cffi.flight.dumps import dump_facts, process_dumps, read_dump

from helpers import small_disk
from test_children import ROOT, TIMEOUT, _env_own_tmp, run_command

FIB_CALLS = {12: 465, 14: 1219, 15: 1973}      # calls of fib(n), fib included


def _run(tmp_path, source, *args, timeout=TIMEOUT):
    script = tmp_path / "prog.py"
    # no blank first line: a module's first line is then 1 on every Python
    script.write_text(textwrap.dedent(source).lstrip("\n"))
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    return run_command([sys.executable, str(script), *map(str, args)], tmp_path, env, timeout)


def _stack_names(thread):
    return [frame["name"] for frame in thread["stack"]]


def _main_thread(facts):
    return next(t for t in facts["threads"] if t["name"] == "MainThread")


def _fib_calls(trace):
    return sum(1 for call in trace if call.name.endswith(": fib"))


PROGRAM = """
import os, signal, sys, time
import pytrace_cffi

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def stuck(dumps):
    for _ in range(200):                # until the signal's dump is under way (10 s at most)
        time.sleep(0.05)
        if dumps[1:]:
            break

pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1])
fib(14)
print("DUMP", pytrace_cffi.dump(reason="from code"))
os.kill(os.getpid(), signal.SIGUSR1)
stuck(pytrace_cffi._running.session.flight.dumps)
trace = pytrace_cffi.stop()
print("CALLS", len(trace), trace.dropped_events)
"""


def test_a_dump_from_code_and_one_by_signal_hold_the_calls_and_where_each_thread_is(tmp_path):
    proc = _run(tmp_path, PROGRAM, tmp_path / "dumps")
    assert proc.returncode == 0, proc.stderr
    by_code = proc.stdout.split("DUMP ", 1)[1].split()[0]
    facts, trace = read_dump(by_code)
    assert facts["reason"] == "from code" and facts["whole"]
    assert _fib_calls(trace) == FIB_CALLS[14]
    dumps = process_dumps(tmp_path / "dumps")           # the newest per process
    assert len(dumps) == 1 and dumps[0] != by_code
    facts = dump_facts(dumps[0])
    assert facts["reason"] == "signal"
    main = _main_thread(facts)
    assert _stack_names(main)[-3:] == ["prog.py(1): <module>", "prog.py(7): stuck",
                                       "time.sleep"]
    # <module> ran before start(): "since before the recorded window" (its call is
    # seeded at the trace's start, not begun then); the calls begun since have theirs
    assert [frame["since_ns"] is not None for frame in main["stack"][-3:]] == [
        False, True, True]
    assert main["stack"][-1]["since_ns"] <= facts["monotonic_ns"]


def test_a_dump_and_its_report_say_the_line_each_frame_is_on(tmp_path):
    """Each frame's current line (#30 item 1), not only its function's first line
    that its name holds (the key the ring's calls are matched by)."""
    proc = _run(tmp_path, """
        import sys
        import pytrace_cffi

        def waits():
            here = 5
            pytrace_cffi.dump(reason="here")
            return here

        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
        there = 10
        waits()
        pytrace_cffi.stop()
        """, tmp_path / "dumps")
    assert proc.returncode == 0, proc.stderr
    [dump] = process_dumps(tmp_path / "dumps")
    stack = _main_thread(dump_facts(dump))["stack"]
    assert [(f["name"], f["line"]) for f in stack] == [("prog.py(1): <module>", 11),
                                                       ("prog.py(4): waits", 6)]
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    report = run_command([sys.executable, "-m", "pytrace_cffi", "report", str(dump)],
                         tmp_path, env, TIMEOUT)
    lines = report.stdout.splitlines()
    assert lines[1].startswith(f"prog.py (pid {facts_pid(dump)}) in waits (prog.py:6) for ")
    assert [line.split()[0] for line in lines[2:]] == ["prog.py:11:", "prog.py:6:"]


def test_a_dump_completes_each_threads_stack_from_its_own_calls(tmp_path):
    """Each thread's frames get their times, and the built-in it waits in, from
    that thread's open calls in the ring, not from another thread's."""
    proc = _run(tmp_path, """
        import sys, threading
        import pytrace_cffi

        def napping(ready, done):
            ready.set()
            done.wait()

        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
        ready, done = threading.Event(), threading.Event()
        worker = threading.Thread(target=napping, args=(ready, done), name="napper")
        worker.start()
        ready.wait()
        pytrace_cffi.dump(reason="here")
        done.set()
        worker.join()
        pytrace_cffi.stop()
        """, tmp_path / "dumps")
    assert proc.returncode == 0, proc.stderr
    [dump] = process_dumps(tmp_path / "dumps")
    facts = dump_facts(dump)
    napper = next(t for t in facts["threads"] if t["name"] == "napper")["stack"]
    names = [frame["name"] for frame in napper]
    # its own frames, each timed from its own open calls (it may be in the lock's
    # built-in or just before it: either way inside napping)
    assert names[0].startswith("threading.py(") and "prog.py(4): napping" in names
    # (threading's own frames below napping may be seeded on 3.9-3.11, where the
    # thread's profile hook starts inside them: "since before the recorded window")
    inner = napper[names.index("prog.py(4): napping"):]
    assert all(frame["since_ns"] is not None for frame in inner), napper
    assert _stack_names(_main_thread(facts)) == ["prog.py(1): <module>"]


def facts_pid(dump):
    return read_dump(dump)[0]["pid"]


def test_a_signal_just_before_stop_is_dumped_by_stop(tmp_path):
    """stop() serves a dump asked for and not yet written (the signal came, its
    threads had not run): nothing asked for is lost."""
    proc = _run(tmp_path, """
        import os, signal, sys
        import pytrace_cffi

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1])
        fib(12)
        os.kill(os.getpid(), signal.SIGUSR1)
        pytrace_cffi.stop()
        """, tmp_path / "dumps")
    assert proc.returncode == 0, proc.stderr
    dumps = process_dumps(tmp_path / "dumps")
    assert len(dumps) == 1, proc.stderr
    facts, trace = read_dump(dumps[0])
    assert facts["reason"] == "signal"
    assert _fib_calls(trace) == FIB_CALLS[12]


def test_the_ring_keeps_the_newest_events_only(tmp_path):
    proc = _run(tmp_path, """
        import pytrace_cffi

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        pytrace_cffi.start(flight_recorder="256k")
        for _ in range(20):
            fib(15)
        trace = pytrace_cffi.stop()
        print(len(trace), trace.dropped_events)
        """)
    assert proc.returncode == 0, proc.stderr
    calls, dropped = map(int, proc.stdout.split())
    # 256 KiB of 8-byte events: 32768 events, in chunks of at most 4096 (the
    # thread's first of 512, each next one twice the last). The oldest chunk
    # goes whole, and only when a new one is needed: 7 full chunks of 4096 stay
    # and the newest, 2 events a call. A ring of 7 chunks, or of chunks of 3584,
    # keeps < 14336.
    assert 7 * 4096 // 2 < calls <= 32768 // 2 + 64 and dropped > 20 * FIB_CALLS[15]
    assert dropped % 512 == 0                   # whole chunks (512 << k events)
    assert "pytrace_cffi-flight-" not in "".join(os.listdir(tmp_path / "tmp"))


def test_a_small_ring_runs_none_of_our_python_on_the_programs_thread(tmp_path):
    """A ring's chunks fill and go without a Python call of ours on the program's
    thread: its spill hook ran at each chunk, and its calls into C (cffi lets the
    GIL go and takes it back) kept a thread waiting for the GIL from asking for it,
    for seconds with small rings (#33 item 11; benchmarks/gil_gaps.py). Its keys
    are still named, by the recorder's thread and before a dump."""
    proc = _run(tmp_path, """
        import sys, threading
        import pytrace_cffi
        from pytrace_cffi.follow import session

        calls = []
        for name in ("__call__", "_write_new"):
            def counted(self, _original=getattr(session._KeyNames, name), _name=name):
                if threading.current_thread() is threading.main_thread():
                    calls.append(_name)
                return _original(self)
            setattr(session._KeyNames, name, counted)

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        pytrace_cffi.start(flight_recorder="512k", dumps_dir=sys.argv[1])
        for _ in range(40):
            fib(15)
        during = len(calls)
        print("DUMP", pytrace_cffi.dump(reason="named"))
        trace = pytrace_cffi.stop()
        print("CALLS", during, trace.dropped_events)
        """, tmp_path / "dumps")
    assert proc.returncode == 0, proc.stderr
    during, dropped = map(int, proc.stdout.split("CALLS ", 1)[1].split())
    assert during == 0 and dropped > 20 * FIB_CALLS[15]     # (chunks went: a ring's)
    facts, trace = read_dump(proc.stdout.split("DUMP ", 1)[1].split()[0])
    assert _fib_calls(trace) > 1000


def test_an_uncaught_exception_dumps_before_the_programs_own_hook(tmp_path):
    source = """
        import sys
        import pytrace_cffi

        def fail():
            raise ValueError("boom")

        if len(sys.argv) > 1:
            pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
        sys.excepthook = lambda t, v, tb: print("OWN HOOK", t.__name__, v)  # after start
        print("before")
        fail()
        """
    traced = _run(tmp_path, source, tmp_path / "dumps")
    untraced = _run(tmp_path, source)
    assert (traced.returncode, traced.stdout) == (untraced.returncode, untraced.stdout) == (
        1, "before\nOWN HOOK ValueError boom\n")
    facts = dump_facts(process_dumps(tmp_path / "dumps")[0])
    assert facts["reason"] == "exception ValueError"


def test_an_exception_in_a_thread_dumps(tmp_path):
    proc = _run(tmp_path, """
        import sys, threading
        import pytrace_cffi

        def work():
            raise KeyError("k")

        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
        t = threading.Thread(target=work, name="worker")
        t.start()
        t.join()
        pytrace_cffi.stop()
        """, tmp_path / "dumps")
    assert proc.returncode == 0 and "KeyError: 'k'" in proc.stderr
    facts = dump_facts(process_dumps(tmp_path / "dumps")[0])
    assert facts["reason"] == "exception KeyError in thread worker"


def test_sigterm_dumps_then_the_process_dies_of_it(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        import pytrace_cffi

        def wait_for_term():
            print("ready", flush=True)
            time.sleep(60)

        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
        wait_for_term()
        """))
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    with subprocess.Popen([sys.executable, str(script), str(tmp_path / "dumps")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        assert proc.stdout.readline() == "ready\n"
        _wait_until_asleep(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(TIMEOUT)
    assert proc.returncode == -signal.SIGTERM
    facts = dump_facts(process_dumps(tmp_path / "dumps")[0])
    assert facts["reason"] == "SIGTERM"
    assert _stack_names(_main_thread(facts))[-2:] == ["prog.py(5): wait_for_term", "time.sleep"]


def _wait_until_asleep(pid):
    """Until the process sleeps in the kernel (a busy machine may run it late)."""
    deadline = time.monotonic() + 30
    asleep = 0
    while asleep < 3:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        asleep = asleep + 1 if state == "S" else 0
        assert time.monotonic() < deadline
        time.sleep(0.05)


HANG = """
import ctypes, sys
import pytrace_cffi

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def spin_in_c():
    ctypes.PyDLL(None).sleep(3)      # holds the GIL: no Python runs anywhere

pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1], watchdog=0.3)
for _ in range(5):
    fib(12)
    pytrace_cffi.step()
spin_in_c()
pytrace_cffi.stop()
print("ended")
"""


def test_a_thread_holding_the_gil_in_c_is_dumped_by_c(tmp_path):
    proc = _run(tmp_path, HANG, tmp_path / "dumps")
    assert proc.returncode == 0 and proc.stdout == "ended\n", proc.stderr
    dumps = process_dumps(tmp_path / "dumps")
    assert len(dumps) == 1 and "watchdog-c" in dumps[0]   # once: Python found it claimed
    facts, trace = read_dump(dumps[0])
    assert facts["written_by"] == "C" and facts["reason"].startswith("hang")
    assert _fib_calls(trace) == 5 * FIB_CALLS[12]
    main = _main_thread(dump_facts(dumps[0]))
    assert _stack_names(main) == ["prog.py(1): <module>", "prog.py(7): spin_in_c"]


def test_a_c_written_dump_is_announced_and_timed_from_the_dump(tmp_path):
    """A followed child started as `python -m hang` holds the GIL in C: C writes
    its dump, says so in one line naming the directory (as Python's dumps do),
    dump.json holds the moment of the dump, so the stuck call has been running
    for the watchdog's 0.3 s and Python's 1 s of grace at least (not "0.0 s":
    the ring's last event is the call's start), and the stack starts at the
    child's module, without runpy's frames, and ends in the built-in it is in,
    named although Python never ran after its first call."""
    (tmp_path / "hang.py").write_text(textwrap.dedent("""\
        import ctypes
        import pytrace_cffi

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        def spin_in_c():        # holds the GIL: no Python runs anywhere
            sorted([3], key=ctypes.PyDLL(None).sleep)

        for _ in range(5):
            fib(12)
            pytrace_cffi.step()
        spin_in_c()
        print("ended")
        """))
    (tmp_path / "parent.py").write_text(
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'hang'], check=True)\n")
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, str(tmp_path)])
    dumps = tmp_path / "dumps"
    before = time.monotonic_ns(), time.time_ns()
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                        "--watchdog", "0.3", "--dumps-dir", str(dumps), "-o",
                        str(tmp_path / "out.json"), str(tmp_path / "parent.py")],
                       tmp_path, env, TIMEOUT)
    after = time.monotonic_ns(), time.time_ns()
    assert proc.returncode == 0 and proc.stdout == "ended\n", proc.stderr
    [dump] = [d for d in process_dumps(dumps) if read_dump(d)[0]["written_by"] == "C"]
    # the moment of the dump on each clock, in its place (#31: the two swapped
    # passed the check of how long the call had run)
    moment = read_dump(dump)[0]
    assert moment["trigger"] == "watchdog"
    assert before[0] <= moment["monotonic_ns"] <= after[0]
    assert before[1] <= moment["realtime_ns"] <= after[1]
    assert (f"pytrace_cffi: flight recorder dump (watchdog; Python did not answer: written "
            f"by C) -> {dump}\n") in proc.stderr
    facts = dump_facts(dump)
    stack = _main_thread(facts)["stack"]
    # builtins.sorted, first seen as the GIL was taken for good: named by C
    assert [frame["name"] for frame in stack] == ["hang.py(1): <module>",
                                                  "hang.py(7): spin_in_c", "builtins.sorted"]
    assert facts["monotonic_ns"] - stack[1]["since_ns"] >= 1.3e9
    report = run_command([sys.executable, "-m", "pytrace_cffi", "report", str(dumps)],
                         tmp_path, env, TIMEOUT)
    assert "runpy" not in report.stdout and " for 0.0 s" not in report.stdout, report.stdout


def test_the_watchdog_dumps_once_per_stall(tmp_path):
    proc = _run(tmp_path, """
        import sys, time
        import pytrace_cffi

        def stalled():
            time.sleep(1.0)

        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1], watchdog=0.3)
        for stall in range(2):
            for _ in range(3):
                pytrace_cffi.step()
            stalled()
        pytrace_cffi.stop()
        """, tmp_path / "dumps")
    assert proc.returncode == 0, proc.stderr
    dumps = sorted(os.listdir(tmp_path / "dumps"))
    names = [d.split("-", 2)[2] for d in dumps if not d.startswith(".")]
    assert [n[:26] for n in names] == ["watchdog-no-step-for-0-3-s"] * 2
    for name in dumps:
        if not name.startswith("."):
            facts = dump_facts(process_dumps(tmp_path / "dumps" / name)[0])
            assert _stack_names(_main_thread(facts))[-2:] == ["prog.py(4): stalled",
                                                               "time.sleep"]


# A parent waiting for a child that sleeps SECONDS: a job of two processes.
SLEEPING_JOB = """
import subprocess, sys, time

def parent_waits():
    child.wait()

child = subprocess.Popen([sys.executable, "-c",
                          "import time\\ndef child_sleeps():\\n    time.sleep({seconds})\\nchild_sleeps()"])
parent_waits()
"""
JOB = SLEEPING_JOB.format(seconds=4)


def dump_job_once_registered(run, dumps, cwd, env, processes=2):
    """`dump DUMPS` once the processes of run (a Popen of `run --flight-recorder`)
    are all in the registry and in their waits; then run's end. (dump's result,
    run's stderr)."""
    registry = dumps / ".live"
    deadline = time.monotonic() + 30
    while len(os.listdir(registry) if registry.exists() else []) < processes:
        assert time.monotonic() < deadline and run.poll() is None, (
            "the processes did not register: " + run.stderr.read())
        time.sleep(0.05)
    time.sleep(0.3)                 # in their waits
    asked = subprocess.run([sys.executable, "-m", "pytrace_cffi", "dump", str(dumps)],
                           cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    _, err = run.communicate(timeout=TIMEOUT)
    return asked, err


def test_dump_reaches_every_process_of_a_job_and_run_writes_the_ring(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(JOB)
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    dumps = tmp_path / "dumps"
    with subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                           "--dumps-dir", str(dumps), "-o", str(tmp_path / "out.json"),
                           str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as run:
        asked, err = dump_job_once_registered(run, dumps, tmp_path, env)
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert run.returncode == 0, err
    request, = [d for d in os.listdir(dumps) if not d.startswith(".")]
    stacks = {}
    for directory in process_dumps(dumps / request):
        facts = dump_facts(directory)
        stacks[facts["label"]] = _stack_names(_main_thread(facts))
    assert sorted(stacks) == ["prog.py", "python -c"]
    assert stacks["python -c"][-2:] == ["<string>(2): child_sleeps", "time.sleep"]
    assert "prog.py(4): parent_waits" in stacks["prog.py"]
    assert stacks["prog.py"][-1] == "posix.waitpid"
    out = pytrace_cffi.formats.read(tmp_path / "out.json")
    assert len({out.thread_pid(t) for t in out.threads}) == 2


def _plant_entry(dumps, pid, sig):
    (dumps / ".live").mkdir(parents=True, exist_ok=True)
    (dumps / ".live" / f"{pid}.json").write_text(json.dumps({"pid": pid, "signal": sig,
                                                             "host": "h", "label": "x"}))


@pytest.mark.parametrize("case", ["entry-names-sigkill", "entry-left-pid-reused",
                                  "job-process-json-names-it"])
def test_dump_dir_signals_no_process_that_is_not_its_live_recorder(tmp_path, case):
    """#33 item 2: an entry of .live/ (or a job's process.json) naming a process
    that does not hold that entry open is not followed: here a `sleep` of ours
    that is no recorder, named with SIGKILL, or with SIGUSR1 as a recorder killed
    by SIGKILL leaves its entry for the pid's next owner."""
    victim = subprocess.Popen(["sleep", "30"])
    try:
        dumps = tmp_path / "dumps"
        _plant_entry(dumps, victim.pid, 9 if case == "entry-names-sigkill"
                     else int(signal.SIGUSR1))
        target = dumps
        if case == "job-process-json-names-it":
            target = tmp_path / "job"
            (target / f"proc-{victim.pid}").mkdir(parents=True)
            (target / f"proc-{victim.pid}" / "process.json").write_text(json.dumps(
                {"pid": victim.pid, "flight": {"dumps_dir": str(dumps),
                                               "signal": int(signal.SIGUSR1)}}))
        env = _env_own_tmp(tmp_path)
        env["PYTHONPATH"] = ROOT
        asked = subprocess.run([sys.executable, "-m", "pytrace_cffi", "dump", str(target),
                                "--wait", "1"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=TIMEOUT)
        with pytest.raises(subprocess.TimeoutExpired):
            victim.wait(timeout=1)
        assert asked.returncode != 0
        why = ("its signal is not one a recorder dumps on" if case == "entry-names-sigkill"
               else f"pid {victim.pid} does not hold it open")
        assert f"{victim.pid}.json: not signalled: {why}" in asked.stderr, asked.stderr
        assert "no running flight recorder found" in asked.stderr
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("options, error", [
    ({"flight_recorder": "lots"}, "flight_recorder must be a size (64M, 512k, 1G) or "
                                  "seconds (30s), not 'lots'"),
    ({"flight_recorder": "1k"}, "the flight recorder's ring must be 64k to 1T bytes, not 1024"),
    ({"watchdog": 3}, "watchdog goes with flight_recorder"),
    ({"flight_recorder": True, "max_events": 10},
     "flight_recorder sizes the ring itself: give no max_events"),
    ({"flight_recorder": True, "dump_signal": "SIGNOPE"}, "unknown signal 'SIGNOPE'"),
])
def test_bad_flight_recorder_options_are_refused_before_anything_starts(options, error):
    with pytest.raises(ValueError, match=f"^{error.replace('(', '[(]').replace(')', '[)]')}$"):
        pytrace_cffi.start(**options)
    assert not pytrace_cffi.is_tracing()


def test_dump_without_a_flight_recorder_says_so():
    with pytest.raises(pytrace_cffi.TracerStateError, match="start\\(flight_recorder"):
        pytrace_cffi.dump()


def test_run_refuses_the_recorder_with_windows(tmp_path):
    (tmp_path / "prog.py").write_text("pass\n")
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                           "--signal", "USR2", str(tmp_path / "prog.py")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode != 0 and "does not combine with --signal" in proc.stderr


def test_the_ring_by_seconds_drops_what_is_older(tmp_path):
    proc = _run(tmp_path, """
        import time
        import pytrace_cffi

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        pytrace_cffi.start(flight_recorder="0.2s")
        end = time.monotonic() + 1.2
        while time.monotonic() < end:
            fib(12)
        trace = pytrace_cffi.stop()
        starts = [call.start_ns for call in trace if call.name.endswith(": fib")]
        print((trace.stop_ns - min(starts)) / 1e9, trace.dropped_events,
              sum(1 for start in starts if start < trace.stop_ns - 0.2e9))
        """)
    assert proc.returncode == 0, proc.stderr
    kept_s, dropped, before_window = proc.stdout.split()
    # chunks go whole: a chunk goes once the next one began before the last new
    # chunk's time less 0.2 s, and less than a chunk came after that one. So what
    # began before stop less 0.2 s is within three chunks (the one across that
    # cut-off, at most one whole one after it, and part of the next: chunks of
    # 2 MiB, 262144 8-byte events, 131072 calls of 2 events), whatever the
    # machine's speed
    # (3.9 in CI: 285,596, more than two chunks)
    assert float(kept_s) > 0.15 and int(dropped) > 0
    assert int(before_window) <= 3 * 131072


def test_the_ring_by_seconds_tests_the_age_of_a_chunks_successor(tmp_path):
    """A chunk goes only once its successor began before the cut-off, since its
    own last events came as late as that: the first chunk, begun before a pause
    longer than the ring's seconds, holds mark(), called just after it, and is
    kept while the next chunks fill at once (in far less than 1 s)."""
    proc = _run(tmp_path, """
        import time
        import pytrace_cffi

        def f():
            pass

        def mark():
            pass

        pytrace_cffi.start(flight_recorder="1s")
        time.sleep(1.2)             # the first chunk began before this
        mark()
        for _ in range(400_000):    # 800000 events: chunks of 262144 begin twice
            f()
        trace = pytrace_cffi.stop()
        print(sum(1 for call in trace if call.name.endswith(": mark")),
              sum(1 for call in trace if call.name.endswith(": f")), trace.dropped_events)
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "400000", "0"]


def test_a_threads_only_chunk_emptied_in_place_counts_as_new(tmp_path):
    """A 64k ring holds 8 chunks of 1024 events. The main thread's only chunk is
    the oldest when the worker's 8th is needed: it is emptied in place, and is then
    the newest (the worker's older chunks go before it). The main thread's after()
    comes next, then the worker needs 2 more chunks: its 2 oldest go, after() stays."""
    proc = _run(tmp_path, """
        import threading
        import pytrace_cffi

        def f():
            pass

        def after():
            pass

        def worker(first, go):
            for _ in range(3800):   # 7600 events: the ring's 8th chunk is needed
                f()
            first.set()
            go.wait()
            for _ in range(1000):   # 2000 events: 2 more chunks
                f()

        first, go = threading.Event(), threading.Event()
        thread = threading.Thread(target=worker, args=(first, go), name="worker")
        pytrace_cffi.start(flight_recorder="64k")
        thread.start()
        first.wait()
        after()
        go.set()
        thread.join()
        trace = pytrace_cffi.stop()
        print(sum(1 for call in trace if call.name.endswith(": after")),
              sum(1 for call in trace if call.name.endswith(": f")))
        """)
    assert proc.returncode == 0, proc.stderr
    after, calls = map(int, proc.stdout.split())
    # the worker's f() calls kept: its last chunks, 6 or 7 of 1024 events (2 a call)
    assert after == 1 and 5 * 512 < calls <= 7 * 512


def test_a_process_killed_right_after_dumping_keeps_its_dump_whole(tmp_path):
    """The clone writes the dump: the process dying at once loses nothing of it."""
    proc = _run(tmp_path, """
        import os, signal, sys
        import pytrace_cffi

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        pytrace_cffi.start(flight_recorder="64M", dumps_dir=sys.argv[1])
        for _ in range(40):
            fib(15)
        print(pytrace_cffi.dump(reason="last words"), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """, tmp_path / "dumps")
    assert proc.returncode == -signal.SIGKILL
    directory = proc.stdout.strip()
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(directory, "done.json")):
        assert time.monotonic() < deadline, "the dump was never finished"
        time.sleep(0.05)
    facts, trace = read_dump(directory)
    assert facts["reason"] == "last words" and facts["whole"]
    assert _fib_calls(trace) == 40 * FIB_CALLS[15]


DDP_HANG = """
import time
import torch
import torch.distributed as dist
import pytrace_cffi


def load_batch(rank, step):
    if rank == 1 and step == 3:
        time.sleep(600)             # stuck in the data path
    return torch.randn(8, 4)


def train():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.zeros(4)
    for step in range(1000):
        load_batch(rank, step)
        dist.all_reduce(total)
        pytrace_cffi.step()


if __name__ == "__main__":
    train()
"""


def _dumps_by_reason(dumps):
    """{(label, reason word): [directories]} of every process dump under dumps."""
    found = {}
    for name in sorted(os.listdir(dumps)):
        for directory in process_dumps(dumps / name) if not name.startswith(".") else ():
            if not os.path.exists(os.path.join(directory, "done.json")):
                continue                    # still being written
            with open(os.path.join(directory, "dump.json"), encoding="utf-8") as f:
                facts = json.load(f)        # (not the ring: polled while the job runs)
            found.setdefault((facts["label"], facts["reason"].split(":")[0]), []).append(
                directory)
    return found


def test_a_stuck_torchrun_job_dumps_every_rank_by_watchdog_request_and_sigterm(tmp_path):
    """Rank 1 sleeps in its data function; rank 0 waits in all_reduce. The watchdog
    dumps each rank once, `dump DIR` every process, SIGTERM (torchrun's agent
    stops its ranks so) each rank: each names where its rank is stuck."""
    pytest.importorskip("torch")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("no torchrun beside this interpreter")
    (tmp_path / "ddp_hang.py").write_text(DDP_HANG.lstrip("\n"))
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    dumps = tmp_path / "dumps"
    with subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                           "--watchdog", "2", "--dumps-dir", str(dumps), "-o",
                           str(tmp_path / "out.json"), torchrun, "--nproc_per_node", "2",
                           "--master_port", str(port), str(tmp_path / "ddp_hang.py")],
                          cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as run:
        try:
            deadline = time.monotonic() + 120
            while not {("rank 0", "watchdog"), ("rank 1", "watchdog")} <= set(
                    _dumps_by_reason(dumps) if dumps.exists() else {}):
                assert time.monotonic() < deadline and run.poll() is None, "no watchdog dump"
                time.sleep(0.2)
            asked = subprocess.run([sys.executable, "-m", "pytrace_cffi", "dump", str(dumps)],
                                   cwd=tmp_path, env=env, capture_output=True, text=True,
                                   timeout=TIMEOUT)
            assert asked.returncode == 0, asked.stdout + asked.stderr
            run.send_signal(signal.SIGTERM)     # torchrun's agent stops the ranks
            run.communicate(timeout=TIMEOUT)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
    found = _dumps_by_reason(dumps)
    # once per stall (a busy machine may make a step itself look like one)
    assert 1 <= len(found[("rank 0", "watchdog")]) <= 2
    assert 1 <= len(found[("rank 1", "watchdog")]) <= 2
    assert ("torchrun", "watchdog") not in found          # it never steps: no stall
    for rank in ("rank 0", "rank 1"):
        assert len(found[(rank, "SIGTERM")]) == 1
    request = os.path.dirname(found[("rank 0", "request")][0])
    stacks = {}
    for directory in process_dumps(request):
        facts = dump_facts(directory)
        main = _main_thread(facts)
        stacks[facts["label"]] = (_stack_names(main),
                                  (facts["monotonic_ns"] - main["stack"][-1]["since_ns"]) / 1e9)
    assert sorted(stacks) == ["rank 0", "rank 1", "torchrun"]
    names, waited = stacks["rank 1"]
    assert names[-2:] == ["ddp_hang.py(7): load_batch", "time.sleep"] and waited > 1.5
    names, waited = stacks["rank 0"]
    assert any(name.endswith(": all_reduce") for name in names[-3:]) and waited > 1.5
    from pytrace_cffi.hang_report import report
    text = report([request])
    assert "rank 1 in time.sleep for " in text and "ddp_hang.py:9: load_batch" in text
    assert "rank 0 in " in text and "all_reduce" in text
    for reason in ("watchdog", "SIGTERM"):
        for rank, expected in (("rank 1", "ddp_hang.py(7): load_batch"),
                               ("rank 0", "ddp_hang.py(13): train")):
            assert expected in _stack_names(_main_thread(dump_facts(found[(rank, reason)][-1])))


DATALOADER_HANG = """
import time
import torch
from torch.utils.data import DataLoader, Dataset


class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 9:
            time.sleep(600)         # a worker stuck on one sample
        return torch.full((4,), float(i))


def main():
    for batch in DataLoader(Data(), batch_size=4, num_workers=2):
        batch.sum()


if __name__ == "__main__":
    main()
"""


def test_a_dataloader_worker_stuck_on_a_sample_is_named_first(tmp_path):
    """`dump DIR` reaches the DataLoader's forked workers; report names the stuck
    worker (sample 9 is in worker 0's third batch) and where: before the main
    process, which only waits for it."""
    pytest.importorskip("torch")
    (tmp_path / "dl_hang.py").write_text(DATALOADER_HANG.lstrip("\n"))
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    dumps = tmp_path / "dumps"
    with subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                           "--dumps-dir", str(dumps), "-o", str(tmp_path / "out.json"),
                           str(tmp_path / "dl_hang.py")], cwd=tmp_path, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as run:
        try:
            deadline = time.monotonic() + 90
            registry = dumps / ".live"
            while len(os.listdir(registry) if registry.exists() else []) < 3:
                assert time.monotonic() < deadline and run.poll() is None, "no workers"
                time.sleep(0.2)
            time.sleep(2)                   # the other batches done: everyone waits
            asked = subprocess.run([sys.executable, "-m", "pytrace_cffi", "dump", str(dumps)],
                                   cwd=tmp_path, env=env, capture_output=True, text=True,
                                   timeout=TIMEOUT)
            assert asked.returncode == 0, asked.stdout + asked.stderr
        finally:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate(timeout=TIMEOUT)
    from pytrace_cffi.hang_report import report
    lines = report([str(dumps)]).splitlines()
    assert lines[0].split(": ", 1)[1].startswith("3 processes dumped")
    assert lines[1].startswith("DataLoader worker 0 (pid ") and " in time.sleep for " in lines[1]
    first_group = lines[1:lines.index(next(l for l in lines[2:] if not l.startswith(" ")))]
    assert "    dl_hang.py:12: __getitem__" in [l.rsplit("  ", 1)[0].rstrip()
                                                 for l in first_group]


def test_the_watchdog_counts_a_named_regions_ends_as_progress(tmp_path):
    """watchdog="SECONDS:REGION": no step() at all, the region's ends arm and feed
    it; a stall after them dumps once, naming where; another region's ends do not."""
    source = """
        import sys, time
        import pytrace_cffi

        def stalled():
            time.sleep(1.0)

        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1],
                           watchdog="0.3:" + sys.argv[2])
        for _ in range(5):
            with pytrace_cffi.record_function("batch"):
                time.sleep(0.01)
        stalled()
        pytrace_cffi.stop()
        """
    for region, expected in (("batch", 1), ("other", 0)):
        dumps = tmp_path / region
        proc = _run(tmp_path, source, dumps, region)
        assert proc.returncode == 0, proc.stderr
        found = [d for d in os.listdir(dumps) if not d.startswith(".")]
        assert len(found) == expected, found
    facts = dump_facts(process_dumps(tmp_path / "batch")[0])
    assert facts["reason"] == "watchdog: no step for 0.3 s"
    assert _stack_names(_main_thread(facts))[-2:] == ["prog.py(4): stalled", "time.sleep"]


@pytest.mark.parametrize("torch_from", ["stand-in", "torch"])
def test_the_watchdog_counts_torchs_record_function_regions_too(tmp_path, torch_from):
    """watchdog="SECONDS:REGION" with torch's record_function (torch imported before
    start, as programs do): its ends arm and feed the watchdog as ours do; the
    wrapper that sees them is left out of the trace, torch's __exit__ stays in, and
    stop() puts it back."""
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    if torch_from == "stand-in":
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(__file__),
                                                          "torch_stand_in"), ROOT])
    elif subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        pytest.skip("torch is not installed (3.11 has it)")
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        import torch.autograd.profiler as profiler
        import pytrace_cffi

        def stalled():
            time.sleep(1.0)

        exit_before = profiler.record_function.__exit__
        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1],
                           watchdog="0.3:" + sys.argv[2])
        for _ in range(5):                  # no step(): only the regions feed it
            with profiler.record_function("batch"):
                time.sleep(0.01)
        stalled()
        trace = pytrace_cffi.stop()
        names = [c.name for c in trace]
        exits = [n for n in names if "autograd/profiler.py" in n and n.endswith(": __exit__")]
        print(len(exits), len(set(exits)), exits[0],
              sum("pytrace_cffi" in n for n in names), sep="|")
        print(profiler.record_function.__exit__ is exit_before)
        """).lstrip("\n"))
    for region, expected in (("batch", 1), ("other", 0)):
        dumps = tmp_path / region
        proc = run_command([sys.executable, str(script), str(dumps), region], tmp_path, env,
                           TIMEOUT)
        assert proc.returncode == 0, proc.stderr
        found = [d for d in os.listdir(dumps) if not d.startswith(".")]
        assert len(found) == expected, found
        count, distinct, name, ours = proc.stdout.splitlines()[0].split("|")
        assert (count, distinct, ours) == ("5", "1", "0") and "profiler.py" in name, name
        assert proc.stdout.splitlines()[1] == "True"
    facts = dump_facts(process_dumps(tmp_path / "batch")[0])
    assert _stack_names(_main_thread(facts))[-2:] == ["prog.py(5): stalled", "time.sleep"]


def test_a_dump_signal_the_program_handles_stays_the_programs(tmp_path):
    proc = _run(tmp_path, """
        import os, signal, sys
        import pytrace_cffi

        signal.signal(signal.SIGUSR1, lambda *_: print("PROGRAM'S HANDLER"))
        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
        os.kill(os.getpid(), signal.SIGUSR1)
        pytrace_cffi.stop()
        """, tmp_path / "dumps")
    assert proc.returncode == 0 and proc.stdout == "PROGRAM'S HANDLER\n", proc.stderr
    assert "the dump signal SIGUSR1 has a handler of the program's" in proc.stderr
    assert [d for d in os.listdir(tmp_path / "dumps") if not d.startswith(".")] == []


STEPPING = """
import json, os, sys
sys.path.insert(0, sys.argv[2])     # the stand-in torch
import torch
import pytrace_cffi

model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(list(model.parameters()), lr=0.1)
pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1], record_params=True)
for _ in range(int(sys.argv[3])):
    optimizer.step()
where = pytrace_cffi.dump(reason="steps")
trace = pytrace_cffi.stop()
print(json.dumps([s["step"] for s in trace.params["optimizer_steps"]]))
tags = 0
with open(os.path.join(where, "keys.jsonl")) as f:
    for line in f:
        tags += len(json.loads(line).get("tags", []))
print(tags, os.path.getsize(os.path.join(where, "keys.jsonl")))
"""


@pytest.mark.parametrize("steps", [300, 3000])
def test_what_the_recorder_keeps_of_optimizer_steps_is_bounded(tmp_path, steps):
    """Ten times the optimizer steps keep as much: the steps' tags (one per
    optimizer, not per step: ~300 bytes a step went into the session and every
    dump, forever) and record_params' metadata of the newest 64 steps only."""
    stand_in = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_stand_in")
    proc = _run(tmp_path, STEPPING, tmp_path / "dumps", stand_in, steps)
    assert proc.returncode == 0, proc.stderr
    kept, counts = proc.stdout.splitlines()
    assert json.loads(kept) == list(range(steps - 64, steps))
    tags, keys_size = map(int, counts.split())
    assert tags <= 4            # none, the step's region end, the optimizer's step
    assert keys_size < 20_000


RAISES_AT_STEP_7 = """
import sys, threading
import pytrace_cffi

def load(step):
    if step == 7:
        raise RuntimeError(f"bad batch at step {step}")

def train():
    for step in range(10):
        load(step)

pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
if sys.argv[2] == "thread":
    worker = threading.Thread(target=train, name="loader")
    worker.start()
    worker.join()
else:
    train()
"""


@pytest.mark.parametrize("where", ["main", "thread", "run"])
def test_an_exceptions_dump_holds_the_exception_and_where_it_was_raised(tmp_path, where):
    """A program dying of an exception at step 7 (or a thread of it, or under `run`,
    which catches the program's exception itself): the dump holds the exception's
    type and message and the raising thread's stack from its traceback, each frame
    with its line; `report` says it ("no open call in its dump" before: the frames
    had unwound)."""
    if where == "run":
        script = tmp_path / "prog.py"
        script.write_text(RAISES_AT_STEP_7.lstrip("\n").replace(
            "pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])\n", ""))
        proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", "--no-follow",
                            "--flight-recorder", "1M", "--dumps-dir", str(tmp_path / "dumps"),
                            "-o", str(tmp_path / "out.json"), str(script), "x", "main"],
                           tmp_path, _env_own_tmp(tmp_path), TIMEOUT)
    else:
        proc = _run(tmp_path, RAISES_AT_STEP_7, tmp_path / "dumps", where)
    assert "RuntimeError: bad batch at step 7" in proc.stderr
    [dump] = process_dumps(tmp_path / "dumps")
    facts = dump_facts(dump)
    assert facts["exception"]["type"] == "RuntimeError"
    assert facts["exception"]["message"] == "bad batch at step 7"
    raising = next(t for t in facts["threads"]
                   if t["native_id"] == facts["exception"]["native_id"])
    assert raising["name"] == ("loader" if where == "thread" else "MainThread")
    frames = [(f["name"], f.get("line")) for f in raising["stack"]]
    assert frames[-2:] == [("prog.py(8): train", 10), ("prog.py(4): load", 6)]
    if where == "main":
        assert frames == [("prog.py(1): <module>", 18)] + frames[-2:]
    report = run_command([sys.executable, "-m", "pytrace_cffi", "report", "--threads",
                          str(tmp_path / "dumps")], tmp_path, _env_own_tmp(tmp_path), TIMEOUT)
    assert "raised RuntimeError: bad batch at step 7 in load (prog.py:6)" in report.stdout, \
        report.stdout


SLEEPS_IN_C = """
import ctypes, sys, time
import pytrace_cffi

def sleeps_in_c(seconds):
    began = time.monotonic()
    left = getattr(ctypes, sys.argv[2])(None).sleep(seconds)
    print("slept", left, time.monotonic() - began >= seconds, flush=True)

pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
print("ready", flush=True)
sleeps_in_c(8)
pytrace_cffi.stop()
"""


def _start(tmp_path, source, *args):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source).lstrip("\n"))
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    proc = subprocess.Popen([sys.executable, str(script), *map(str, args)], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n", proc.stderr.read()
    return proc, env


@pytest.mark.parametrize("library, written_by", [("CDLL", "Python"), ("PyDLL", "C")])
def test_dump_dir_asks_without_a_signal_and_a_c_sleep_goes_on(tmp_path, library, written_by):
    """`dump DIR` of a process in a C sleep() (GIL released: Python dumps; held: C
    does) dumps into DIR and the sleep goes on to its end: sleep() returns 0, no
    second left, which a signal would have cut short (#30 item 2)."""
    dumps = tmp_path / "dumps"
    proc, env = _start(tmp_path, SLEEPS_IN_C, dumps, library)
    with proc:
        _wait_until_asleep(proc.pid)
        asked = run_command([sys.executable, "-m", "pytrace_cffi", "dump", str(dumps)],
                            tmp_path, env, TIMEOUT)
        out, err = proc.communicate(timeout=TIMEOUT)
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert proc.returncode == 0 and out == "slept 0 True\n", err
    [dump] = process_dumps(dumps)
    assert f"pid {proc.pid}: written: {dump}" in asked.stdout
    facts = read_dump(dump)[0]
    assert facts["written_by"] == written_by
    assert (facts["reason"] if written_by == "Python" else facts["trigger"]) == "request"
    if written_by == "Python":
        stack = _main_thread(dump_facts(dump))["stack"]
        assert [(f["name"], f.get("line")) for f in stack[:2]] == [
            ("prog.py(1): <module>", 11), ("prog.py(4): sleeps_in_c", 6)]


def test_dump_dir_dumps_a_process_whose_program_took_the_dump_signal(tmp_path):
    """The program installs its own SIGUSR1 handler after start (Lightning's SLURM
    requeue): said once, and `dump DIR` still dumps it, its handler never run."""
    dumps = tmp_path / "dumps"
    proc, env = _start(tmp_path, """
        import signal, sys, time
        import pytrace_cffi

        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
        signal.signal(signal.SIGUSR1, lambda *_: print("PROGRAM'S HANDLER", flush=True))
        print("ready", flush=True)
        time.sleep(6)
        pytrace_cffi.stop()
        """, dumps)
    with proc:
        asked = run_command([sys.executable, "-m", "pytrace_cffi", "dump", str(dumps)],
                            tmp_path, env, TIMEOUT)
        out, err = proc.communicate(timeout=TIMEOUT)
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert proc.returncode == 0 and out == "", err
    assert err.count("the program installed its own handler of the dump signal SIGUSR1") == 1
    [dump] = process_dumps(dumps)
    assert read_dump(dump)[0]["reason"] == "request"


WAITS_IN_C = """
import ctypes, sys, threading, time
import pytrace_cffi

libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)     # zeroed: PTHREAD_MUTEX_INITIALIZER
held = threading.Event()

def holder():
    libc.pthread_mutex_lock(mutex)
    held.set()
    time.sleep(30)
    print("released", flush=True)
    libc.pthread_mutex_unlock(mutex)

def waits_in_c():
    print("ready", flush=True)
    libc.pthread_mutex_lock(mutex)          # GIL released; a signal does not end it

threading.Thread(target=holder, daemon=True).start()
held.wait()
pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
waits_in_c()
print("waited", flush=True)
"""


def test_sigterm_while_the_main_thread_waits_in_c_dumps_and_kills(tmp_path):
    """The main thread waits in C with the GIL released (a gloo wait, here a
    mutex another thread holds for 30 s): the Python handler cannot run there,
    the recorder's thread serves SIGTERM: dumps, and the process dies of it long
    before the wait ends ("released" never printed) (#30 item 3)."""
    dumps = tmp_path / "dumps"
    proc, _ = _start(tmp_path, WAITS_IN_C, dumps)
    with proc:
        _wait_until_asleep(proc.pid)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGTERM and out == "", err
    deadline = time.monotonic() + 30        # (its clone, a process of its own, may lag)
    while not [d for d in process_dumps(dumps) if os.path.exists(os.path.join(d, "done.json"))]:
        assert time.monotonic() < deadline, err
        time.sleep(0.05)
    [dump] = process_dumps(dumps)
    facts = dump_facts(dump)
    assert facts["reason"] == "SIGTERM"
    stack = _main_thread(facts)["stack"]
    assert [(f["name"], f.get("line")) for f in stack[:2]] == [
        ("prog.py(1): <module>", 22), ("prog.py(15): waits_in_c", 17)]


# -- a dump onto a full disk (#33 item 7) -------------------------------------------

FULL_DISK = """
import os, signal, sys, time
import pytrace_cffi

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def wait_here(dumps, count):
    deadline = time.monotonic() + 30
    while len(dumps) < count and time.monotonic() < deadline:
        time.sleep(0.05)

pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1])
# written as it is (compressed, this ring would fit the disk)
pytrace_cffi._core.lib.pt_flight_set_dump_options(0, 0)
fib(24)                     # a ring of ~2.4 MB: more than the disk holds
if sys.argv[2] == "signal":
    os.kill(os.getpid(), signal.SIGUSR1)
else:
    print("registered", flush=True)
wait_here(pytrace_cffi._running.session.flight.dumps, int(sys.argv[3]))
pytrace_cffi.stop()
print("done")
"""


def test_a_dump_on_a_full_disk_says_it_failed_and_keeps_the_stacks(tmp_path):
    """The dumps directory on a 1 MB disk, the ring bigger: the dump is said to
    have failed, not announced as written; dump.json (the stacks) was written
    before the ring and is kept, and `report` reads it, saying it was cut short.
    (events.bin used to go first: nothing of the stacks was kept, and the line
    said "-> DIR" as if written.)"""
    with small_disk(tmp_path / "dumps", "1m") as dumps:
        proc = _run(tmp_path, FULL_DISK, dumps, "signal", 1)
        assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
        assert "flight recorder dump (signal) ->" not in proc.stderr
        match = re.search(r"flight recorder dump \(signal\) into (\S+) failed \(No space left "
                          r"on device\): its threads' stacks \(dump\.json\) were kept, not "
                          r"the ring's events \(events\.bin\)", proc.stderr)
        assert match, proc.stderr
        process_dump = match.group(1)
        assert not os.path.exists(os.path.join(process_dump, "done.json"))
        with open(os.path.join(process_dump, "dump.json"), encoding="utf-8") as f:
            facts = json.load(f)
        assert _stack_names(_main_thread(facts))[-1].endswith("wait_here")
        report = subprocess.run([sys.executable, "-m", "pytrace_cffi", "report", str(dumps)],
                                cwd=tmp_path, env=_env_own_tmp(tmp_path),
                                capture_output=True, text=True, timeout=TIMEOUT)
        assert report.returncode == 0, report.stderr
        # (in time.sleep: stacks.tsv, small, was kept too, with the call open in the ring)
        assert re.search(r"prog\.py:\d+: wait_here", report.stdout), report.stdout
        assert f"cut short: {process_dump}: its dump was not finished" in report.stdout


def test_a_request_that_cannot_be_rewritten_is_not_taken_again(tmp_path):
    """`dump DIR` twice, the disk full before the second: its request file cannot
    be rewritten, and the process names its own dump instead of taking the first
    request's name again (it used to dump into NAME-2 of the stale request)."""
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    (tmp_path / "prog.py").write_text(textwrap.dedent(FULL_DISK).lstrip("\n"))
    with small_disk(tmp_path / "dumps", "8m") as dumps, \
            subprocess.Popen([sys.executable, str(tmp_path / "prog.py"), str(dumps), "cli",
                              "2"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) as program:
        assert program.stdout.readline() == "registered\n"
        ask = [sys.executable, "-m", "pytrace_cffi", "dump", str(dumps), "--wait", "10"]
        first = subprocess.run(ask, cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=TIMEOUT)
        assert first.returncode == 0, first.stderr
        first_name = re.search(r": written: (\S+)", first.stdout).group(1).split(os.sep)[-2]
        # the disk full; unbuffered: 3.14's 128 KiB default buffer would hold a
        # 64 KiB write that failed and fail again at close
        with open(dumps / "filler", "wb", buffering=0) as f:
            with pytest.raises(OSError):
                while True:
                    f.write(b"x" * 65536)
        second = subprocess.run(ask[:-1] + ["2"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=TIMEOUT)
        assert "each process names its own dump" in second.stderr, second.stderr
        out, err = program.communicate(timeout=TIMEOUT)
    assert out == "done\n", err
    # the first asked by its request file, the second by the signal (no room for one)
    said = re.findall(r"flight recorder dump \((?:request|signal)\) (?:-> |into )(\S+)", err)
    assert len(said) == 2, err
    assert said[0].split(os.sep)[-2] == first_name
    assert not said[1].split(os.sep)[-2].startswith(first_name), err
    assert said[1].split(os.sep)[-2].endswith("-signal"), err


def test_closing_is_not_taken_for_the_program_taking_the_signal_over(tmp_path):
    """close() disarms (the dump signal's handler goes back) while the recorder's
    thread may be between its closing check and its signal check: the signal,
    no longer ours, must not be reported as the program's own handler."""
    proc = _run(tmp_path, """
        import gc, signal, sys
        import pytrace_cffi
        from pytrace_cffi._core import lib
        from pytrace_cffi.flight.recorder import FlightRecorder

        pytrace_cffi.start(flight_recorder=True, dumps_dir=sys.argv[1])
        recorder, = [o for o in gc.get_objects() if isinstance(o, FlightRecorder)]
        assert recorder.signum and lib.pt_flight_signal_ours()
        # close() sets _closing, then pt_flight_disarm puts the handler back and,
        # GIL released, joins its C thread before it counts as disarmed: the
        # recorder's thread may check the signal in between, as here.
        recorder._closing = True
        signal.signal(recorder.signum, signal.SIG_DFL)
        assert not lib.pt_flight_signal_ours()
        recorder._check_signal()
        recorder._closing = False
        pytrace_cffi.stop()
        """, tmp_path / "dumps")
    assert proc.returncode == 0, proc.stderr
    assert "its own handler" not in proc.stderr, proc.stderr


def test_stop_gives_threading_excepthook_back(tmp_path):
    """The recorder dumps on a thread's uncaught exception through
    threading.excepthook; stop() puts the program's back. It never did (a bound
    method is a new object each time: `is` never matched): each start/stop
    chained one more recorder, kept alive, until a thread's exception hit
    RecursionError."""
    before = threading.excepthook
    for _ in range(3):
        pytrace_cffi.start(flight_recorder="1M", dumps_dir=str(tmp_path / "dumps"))
        assert threading.excepthook != before
        pytrace_cffi.stop()
        assert threading.excepthook is before


def test_a_dump_of_a_ring_that_went_round_says_what_it_dropped(tmp_path):
    """A dump's threads.json counts each thread's events its ring let go: the
    dump read back says so (dropped_events was 0, and summary never told of it)."""
    proc = _run(tmp_path, """
        import pytrace_cffi

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        pytrace_cffi.start(flight_recorder="256k", dumps_dir="dumps")
        for _ in range(20):
            fib(15)
        print(pytrace_cffi.dump())
        pytrace_cffi.stop()
        """)
    assert proc.returncode == 0, proc.stderr
    dump = proc.stdout.strip()
    with open(os.path.join(dump, "threads.json")) as f:
        dropped = sum(thread["dropped"] for thread in json.load(f))
    assert dropped > 20 * FIB_CALLS[15]
    assert pytrace_cffi.load(dump).dropped_events == dropped
