"""`run -o OUT.pftrace` encodes the program's calls while it runs (follow/live.py,
c_src/pt_live.c), and OUT then decodes to exactly the calls a whole-trace export
of the same process gives; a trace the encoder cannot finish alone (record_function
args) is written from the whole trace, and live.json says why."""
import collections
import errno
import glob
import json
import os
import re
import sys
import textwrap

from pytrace_cffi import load
from pytrace_cffi.follow.finish import export_job
from pytrace_cffi.formats import read

from test_children import TIMEOUT, _env_own_tmp, run_command
from test_children_run import run_cli

# Runs past the encoder's start (0.2 s), with a second thread, a region and
# an instant, spilling many chunks on the way.
PROGRAM = """
import threading, time
import pytrace_cffi

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def worker():
    for _ in range(40):
        sorted(range(50), key=abs)
        fib(12)

t = threading.Thread(target=worker, name="helper")
t.start()
end = time.monotonic() + 0.8
while time.monotonic() < end:
    with pytrace_cffi.record_function("step"{args}):
        fib(12)
    time.sleep(0.001)
pytrace_cffi.instant("done")
t.join()
"""


def _calls(trace):
    """Every call of every thread: (thread, name, start, end, depth, parent, flags)."""
    out = []
    for index, (_, slices, n) in enumerate(trace.thread_slices()):
        out.extend((index, trace.names[s.key], s.start, s.end, s.depth, s.parent, s.flags)
                   for s in (slices[i] for i in range(n)))
    return out


def _run(tmp_path, args=""):
    run_cli(tmp_path, PROGRAM.format(args=args), "-o", tmp_path / "out.pftrace",
            "--processes-dir", tmp_path / "kept", "--max-events", 65536, "--spill")
    directory, = glob.glob(str(tmp_path / "kept" / "proc-*"))
    with open(f"{directory}/live.json", encoding="utf-8") as f:
        info = json.load(f)
    load(directory).export_perfetto(tmp_path / "whole.pftrace")
    out, whole = read(tmp_path / "out.pftrace"), read(tmp_path / "whole.pftrace")
    return info, out, whole


def test_the_pftrace_is_encoded_while_the_program_runs(tmp_path):
    info, out, whole = _run(tmp_path)
    assert info["complete"], info["reason"]
    calls = _calls(out)
    assert len(calls) > 100_000 and {c[0] for c in calls} == {0, 1}
    assert any(c[1] == "step" for c in calls)
    assert calls == _calls(whole)
    assert [m.name for m in out.marks] == [m.name for m in whole.marks] == ["done"]
    assert [t.name for t in out.threads] == [t.name for t in whole.threads]


def test_a_region_with_args_is_written_from_the_whole_trace(tmp_path):
    info, out, whole = _run(tmp_path, args=', {"batch": 32}')
    assert not info["complete"] and "record_function args" in info["reason"]
    assert _calls(out) == _calls(whole)


def test_a_fork_while_encoding_leaves_both_processes_whole(tmp_path):
    """The child of a fork inherits the encoder's memory, not its thread: it
    neither waits for nor frees it, and the job's file holds both processes."""
    run_cli(tmp_path, PROGRAM.format(args="") + """
import os
pid = os.fork()
if pid == 0:
    fib(14)
    os._exit(0)
os.waitpid(pid, 0)
fib(14)
""", "-o", tmp_path / "out.pftrace", "--processes-dir", tmp_path / "kept",
            "--max-events", 65536, "--spill")
    job = read(tmp_path / "out.pftrace")
    assert len({job.thread_pid(t) for t in job.threads}) == 2
    lives = [json.load(open(f)) for f in glob.glob(str(tmp_path / "kept" / "*" / "live.json"))]
    assert sorted(info["complete"] for info in lives) == [False, True]   # the child's ended
    # the same job written from the whole traces (no live.json: no parts)
    for f in glob.glob(str(tmp_path / "kept" / "*" / "live.json")):
        os.unlink(f)
    export_job([str(tmp_path / "kept")], tmp_path / "whole.pftrace")
    assert _calls(job) == _calls(read(tmp_path / "whole.pftrace"))
    counts = {}
    for thread, slices, n in job.thread_slices():
        pid = job.thread_pid(thread)
        counts[pid] = counts.get(pid, 0) + sum(
            1 for i in range(n) if job.names[slices[i].key].endswith(": fib"))
    assert sorted(counts.values())[0] == 1219      # fib(14) once in the child


# start(output="out.pftrace") from the API: the same encoder, the job directory
# kept here (RunFinish's keep) so the whole trace can be exported beside it.
API_PROGRAM = """
import sys
import pytrace_cffi

# (processes_dir: the per-process trace stays, to be compared with OUT)
pytrace_cffi.start(output=sys.argv[1], max_events=65536, processes_dir=sys.argv[2])
""" + PROGRAM.format(args="") + """
result = pytrace_cffi.stop()
print("RESULT", type(result).__name__, result.written, result.path == sys.argv[1])
"""


def test_start_with_a_pftrace_output_encodes_while_the_program_runs(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(API_PROGRAM)
    out = tmp_path / "api.pftrace"
    job = tmp_path / "processes"
    proc = run_command([sys.executable, str(script), str(out), str(job)], tmp_path,
                       _env_own_tmp(tmp_path), TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert "RESULT WrittenTrace True True" in proc.stdout
    assert "encoding the whole trace now" not in proc.stderr
    assert f"the per-process traces stay in {job}" in proc.stderr
    directory, = glob.glob(f"{job}/proc-*")
    with open(f"{directory}/live.json", encoding="utf-8") as f:
        assert json.load(f)["complete"]
    load(directory).export_perfetto(tmp_path / "whole.pftrace")
    calls = _calls(read(out))
    assert len(calls) > 100_000 and calls == _calls(read(tmp_path / "whole.pftrace"))


def test_a_fallback_is_said_on_the_console(tmp_path):
    proc = run_cli(tmp_path, PROGRAM.format(args=', {"batch": 32}'), "-o",
                   tmp_path / "out.pftrace", "--max-events", 65536, "--spill")
    assert "encoding the whole trace now: the trace has torch names or record_function args" \
        in proc.stderr


def test_run_without_following_encodes_a_pftrace_while_the_program_runs(tmp_path):
    """`run --no-follow -o OUT.pftrace` writes OUT as start(output=OUT) does: from
    the parts encoded while the program ran (live_parts said so), the same calls
    as a run that encodes at the end (PYTRACE_CFFI_LIVE=0)."""
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import threading, time

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        time.sleep(0.3)     # the encoder starts at a spill 0.2 s after the clock's start
        t = threading.Thread(target=fib, args=(20,), name="helper")
        t.start()
        for _ in range(12):
            fib(21)
            sorted(range(100), key=abs)
        t.join()
        """))
    wrapper = ("import sys\n"
               "from pytrace_cffi.follow import live\n"
               "chosen = live.live_parts\n"
               "def noted(*args, **kwargs):\n"
               "    parts = chosen(*args, **kwargs)\n"
               "    print('LIVE', parts is not None)\n"
               "    return parts\n"
               "live.live_parts = noted\n"
               "from pytrace_cffi.__main__ import main\n"
               "sys.exit(main(sys.argv[1:]))\n")
    counts = {}
    for mode in ("1", "0"):
        env = _env_own_tmp(tmp_path)
        env["PYTRACE_CFFI_LIVE"] = mode
        out = tmp_path / f"out{mode}.pftrace"
        proc = run_command([sys.executable, "-c", wrapper, "run", "--no-follow", "-o", str(out),
                            str(tmp_path / "prog.py")], tmp_path, env, TIMEOUT)
        assert proc.returncode == 0, proc.stderr
        assert ("LIVE True" in proc.stdout) == (mode == "1"), proc.stdout + proc.stderr
        counts[mode] = collections.Counter(call[1] for call in _calls(read(out)))
    assert counts["1"] == counts["0"]
    # fib(n) makes 2 * F(n + 1) - 1 calls: fib(21) 35421 times 12, fib(20) 21891
    assert sum(n for name, n in counts["1"].items() if name.endswith(": fib")) == (
        12 * 35421 + 21891)


# More threads than the 512 packet sequences of a process's own range (#34 item 2),
# each thread's chunk filling (--max-events 4096: 512 events) so the spill hook runs.
MANY_THREADS_PROGRAM = """
import threading, time

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

time.sleep(0.3)     # the encoder starts at a spill 0.2 s after the clock's start
started = 0
for _ in range(600):
    t = threading.Thread(target=fib, args=(12,))
    t.start()
    t.join()
    started += 1
print("STARTED", started)
"""


def test_more_threads_than_a_pid_range_are_encoded_while_the_program_runs(tmp_path):
    proc = run_cli(tmp_path, MANY_THREADS_PROGRAM, "-o", tmp_path / "out.pftrace",
                   "--processes-dir", tmp_path / "kept", "--max-events", 4096, "--spill")
    started = int(proc.stdout.split("STARTED ", 1)[1].split()[0])
    assert started == 600
    assert "encoding the whole trace now" not in proc.stderr
    assert re.search(rf" calls on {started + 1} threads -> ", proc.stderr), proc.stderr
    directory, = glob.glob(str(tmp_path / "kept" / "proc-*"))
    with open(f"{directory}/live.json", encoding="utf-8") as f:
        info = json.load(f)
    assert info["complete"], info["reason"]
    assert info["threads"] == started + 1
    load(directory).export_perfetto(tmp_path / "whole.pftrace")
    out = read(tmp_path / "out.pftrace")
    assert len(out.threads) == started + 1
    calls = _calls(out)
    assert calls == _calls(read(tmp_path / "whole.pftrace"))
    # fib(12) makes 465 calls: once in each thread started
    fibs = collections.Counter(c[0] for c in calls if c[1].endswith(": fib") and c[0])
    assert sorted(set(fibs.values())) == [465] and len(fibs) == started


def test_an_encoder_stop_is_said_in_words():
    from pytrace_cffi._core import lib
    from pytrace_cffi.follow.live import stop_words
    assert stop_words(lib.PT_ERR_LIVE_IO, errno.ENOSPC) == (
        "a read of the spill file (events.bin) or a write of its parts failed "
        "(No space left on device)")
    assert stop_words(lib.PT_ERR_NOMEM) == "out of memory"
    for status in (lib.PT_ERR_ARG, lib.PT_ERR_STATE, lib.PT_ERR_LIVE_THREADS, -99):
        assert not any(c.isdigit() for c in stop_words(status).replace("2147484158", ""))
