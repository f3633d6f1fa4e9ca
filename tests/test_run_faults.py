"""`run` under faults: a full disk, the program removing the job's directory, a
second Ctrl-C while OUT is written, a child that outlives the run, and Ctrl-C
itself. The trace is kept (or where it stays is said, with the command that
finishes it) and the program's exit code never changes. Counts are checked
against what the traced program counts itself."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pytrace_cffi

from helpers import SIGNAL_AT_OUR_LINE, assert_nested, small_disk
from test_children import TIMEOUT, _env, run_command


def run(tmp_path, source, *args, env=None, cwd=None):
    """`python -m pytrace_cffi run ARGS prog.py` with TMPDIR tmp_path/tmp (unless
    env gives another)."""
    (tmp_path / "prog.py").write_text(textwrap.dedent(source))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = _env(**{"TMPDIR": str(tmp_path / "tmp"), **(env or {})})
    return run_command([sys.executable, "-m", "pytrace_cffi", "run", *map(str, args),
                        str(tmp_path / "prog.py")], cwd or tmp_path, env, TIMEOUT)


def leaf_calls(trace):
    return sum(1 for call in trace if call.name.endswith(": leaf"))


# The program counts its own calls of leaf: the expected count.
MANY_LEAVES = """
    import sys
    def leaf(i):
        return i
    def work(n):
        for i in range(n):
            leaf(i)
        return n
    print(work({n}))
    sys.exit(3)
"""


CLOSES_EVERY_DESCRIPTOR = """
    import os, sys
    os.closerange(3, 4096)              # a daemon's start-up: every descriptor but 0-2
    mine = open(sys.argv[1], "w")       # takes the lowest number free: the spill's was
    def leaf(i):
        return i
    for i in range({n}):
        leaf(i)
    mine.write("mine\\n")
    mine.close()
    print(open(sys.argv[1]).read(), end="")
"""


@pytest.mark.parametrize("flags", [(), ("--no-follow", "--spill", "--max-events", "50000"),
                                   ("--flight-recorder",)],
                         ids=["follow", "no-follow-spill", "flight-recorder"])
def test_a_program_closing_every_descriptor_keeps_its_files_and_the_trace(tmp_path, flags):
    """The program closes every descriptor, ours too (the spill file, the live
    encoder's reading of it, the flight recorder's), and opens a file of its own,
    which gets the number of one of ours: it holds only what the program wrote
    (the spill used to go into it, 3 MB, and the trace was lost; the flight
    recorder's thread stopped and the trace was lost), and OUT every call."""
    (tmp_path / "prog.py").write_text(textwrap.dedent(CLOSES_EVERY_DESCRIPTOR.format(n=300_000)))
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "out.pftrace"
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", *flags, "-o", str(out),
                        str(tmp_path / "prog.py"), str(tmp_path / "mine.txt")], tmp_path,
                       _env(TMPDIR=str(tmp_path / "tmp")), TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "mine\n"
    assert (tmp_path / "mine.txt").read_bytes() == b"mine\n"
    assert leaf_calls(pytrace_cffi.load(out)) == 300_000, proc.stderr
    assert os.listdir(tmp_path / "tmp") == []


def test_a_full_tmpdir_continues_the_spill_beside_out(tmp_path):
    """TMPDIR (4 MB) takes a fraction of the ~5 MB of events: the process's spill
    moves beside OUT and goes on there; OUT holds every call; nothing is left."""
    with small_disk(tmp_path / "tmpdisk", "4m") as tmpdir:
        out = tmp_path / "out" / "saved"
        proc = run(tmp_path, MANY_LEAVES.format(n=300_000), "-o", out,
                   env={"TMPDIR": str(tmpdir)})
        assert proc.returncode == 3, proc.stderr
        assert "Traceback" not in proc.stderr
        assert leaf_calls(pytrace_cffi.load(out)) == int(proc.stdout) == 300_000
        assert os.listdir(tmpdir) == [] and os.listdir(out.parent) == ["saved"]


def test_every_disk_full_keeps_the_exit_code_and_says_how_to_finish(tmp_path):
    """TMPDIR and OUT's disk (also the current directory) fill up: recording stops,
    the exit code stays the program's, and the job directory stays, named with
    the command that writes OUT once there is room."""
    with small_disk(tmp_path / "tmpdisk", "2m") as tmpdir, \
            small_disk(tmp_path / "outdisk", "2m") as outdir:
        out = outdir / "saved"
        proc = run(tmp_path, MANY_LEAVES.format(n=300_000), "-o", out,
                   env={"TMPDIR": str(tmpdir)}, cwd=outdir)
        assert proc.returncode == 3, proc.stderr
        assert "Traceback" not in proc.stderr and not out.exists()
        assert "No space left on device" in proc.stderr
        match = re.search(r"the per-process traces stay in (\S+) \(write them later with: "
                          r"(python -m pytrace_cffi export \S+ -o \S+)\)", proc.stderr)
        assert match, proc.stderr
        assert os.path.dirname(match.group(1)) == str(tmpdir)
        subprocess.run(["mount", "-o", "remount,size=64m", str(outdir)], check=True)
        finish = run_command(match.group(2).replace("python", sys.executable, 1).split(),
                             tmp_path, _env(), TIMEOUT)
        assert finish.returncode == 0, finish.stderr
        trace = pytrace_cffi.load(out)
        assert 10_000 < leaf_calls(trace) < 300_000      # what fitted: recording stopped
        assert_nested(trace)


def _saved(tmp_path, out):
    """OUT (a .json) read back: exported again to a saved directory."""
    saved = tmp_path / "again"
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "export", str(out), "-o",
                        str(saved)], tmp_path, _env(), TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return saved


def test_a_spill_beside_out_that_fills_keeps_the_exit_code(tmp_path):
    """run --no-follow --spill (the spill beside OUT, on a full disk): recording
    stops, what was spilled is written to the fallback place, exit code kept."""
    with small_disk(tmp_path / "outdisk", "1m") as outdir:
        proc = run(tmp_path, MANY_LEAVES.format(n=200_000), "--no-follow", "--max-events",
                   "4096", "--spill", "-o", outdir / "saved")
        assert proc.returncode == 3, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "writing spilled events failed (No space left on device)" in proc.stderr
        [fallback] = re.findall(r"saved it to '(\S+)' instead", proc.stderr)
        trace = pytrace_cffi.load(fallback)
        assert 10_000 < leaf_calls(trace) < 200_000
        assert_nested(trace)


def test_the_program_removing_the_job_directory_keeps_its_exit_code(tmp_path):
    """The job directory removed (by the program) between two children: the
    running processes are saved again, the exit code stays, and what is lost
    (the processes that had ended) is said."""
    out = tmp_path / "out.json"
    proc = run(tmp_path, """
        import json, os, shutil, subprocess, sys
        child = "def unique_{}(): pass\\nfor _ in range(5): unique_{}()"
        def leaf(i):
            return i
        subprocess.run([sys.executable, "-c", child.format("before", "before")], check=True)
        for i in range(50_000):
            leaf(i)
        shutil.rmtree(json.loads(os.environ["PYTRACE_CFFI_FOLLOW"])["dir"])
        subprocess.run([sys.executable, "-c", child.format("after", "after")], check=True)
        for i in range(50_000):
            leaf(i)
        sys.exit(3)
    """, "-o", out)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "was removed while the program ran: the traces of the processes that had " \
           "ended by then are lost" in proc.stderr
    names = [e["name"] for e in json.loads(out.read_text())["traceEvents"]
             if e.get("ph") == "X"]
    assert sum(name.endswith(": leaf") for name in names) == 100_000
    assert sum(name.endswith(": unique_after") for name in names) == 5
    assert not any(name.endswith(": unique_before") for name in names)
    assert os.listdir(tmp_path / "tmp") == []


# A program's first lines: its stderr (ours too) says when OUT's writing starts;
# a Ctrl-C then comes CTRL_C_LINE lines of our code later, inside the writing
# (~13,000 lines for 300,000 calls), wherever the machine's load would put one.
CTRL_C_LINE = 300
CTRL_C_WHILE_WRITING = SIGNAL_AT_OUR_LINE + f"""
class _CtrlCWhileWriting:
    def __init__(self, stream):
        self._stream, self._armed = stream, False
    def write(self, text):
        self._armed = self._armed or text.startswith("pytrace_cffi: writing ")
        return self._stream.write(text)
    def flush(self):
        self._stream.flush()
        if self._armed:
            self._armed = False
            signal_at_our_line(signal.SIGINT, {CTRL_C_LINE})
    def __getattr__(self, name):
        return getattr(self._stream, name)
sys.stderr = _CtrlCWhileWriting(sys.stderr)
"""


def _ctrl_c_while_writing(tmp_path, source, command):
    """Runs command (ending with prog.py: CTRL_C_WHILE_WRITING, then source) with
    its own TMPDIR: (its stdout, stderr); asserts the process died of the Ctrl-C."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "prog.py").write_text(CTRL_C_WHILE_WRITING + textwrap.dedent(source))
    proc = run_command(command, tmp_path, _env(TMPDIR=str(tmp_path / "tmp")), TIMEOUT)
    assert proc.returncode == -signal.SIGINT, proc.stderr
    return proc.stdout, proc.stderr


def _finished_as_said(tmp_path, out, stderr):
    """OUT not written, not half written, and the command that the lines give
    writes it from what was kept: returns OUT's trace."""
    assert not out.exists() and not list(tmp_path.glob(out.name + ".tmp*"))
    match = re.search(r"\(finish it with: (python -m pytrace_cffi export (\S+) -o \S+)\)",
                      stderr)
    assert match and f"interrupted while writing {out}" in stderr, stderr
    finish = run_command(match.group(1).replace("python", sys.executable, 1).split(),
                         tmp_path, _env(), TIMEOUT)
    assert finish.returncode == 0, finish.stderr
    return pytrace_cffi.load(_saved(tmp_path, out))


@pytest.mark.parametrize("how", ["follow", "no-follow"])
def test_a_second_ctrl_c_while_writing_keeps_the_trace(tmp_path, how):
    """Ctrl-C ends the program, a second one comes as OUT is written: no traceback
    of ours, OUT not half written, the trace kept and the command that finishes
    it printed; then the process dies of SIGINT as python would."""
    out = tmp_path / "out.json"
    extra = ["--no-follow"] if how == "no-follow" else []
    _, stderr = _ctrl_c_while_writing(tmp_path, """
        def leaf(i):
            return i
        for i in range(300_000):
            leaf(i)
        raise KeyboardInterrupt
    """, [sys.executable, "-m", "pytrace_cffi", "run", "-o", str(out), *extra,
          str(tmp_path / "prog.py")])
    assert stderr.startswith(f"pytrace_cffi: writing {out} ...\n"), stderr
    assert stderr.count("Traceback") == 1 and stderr.endswith(
        "    raise KeyboardInterrupt\nKeyboardInterrupt\n"), stderr    # the program's
    assert leaf_calls(_finished_as_said(tmp_path, out, stderr)) == 300_000


def test_a_ctrl_c_while_stop_writes_the_output_file_reaches_the_program(tmp_path):
    """The library's stop() of start(output=FILE): a Ctrl-C as FILE is written stops
    the writing (FILE not half written, the per-process traces kept and the command
    that finishes them printed), then the program gets its KeyboardInterrupt from
    stop(), as it would have untraced: it does not go on as if none came."""
    out = tmp_path / "out.json"
    stdout, stderr = _ctrl_c_while_writing(tmp_path, f"""
        import pytrace_cffi
        def leaf(i):
            return i
        pytrace_cffi.start(output={str(out)!r})
        for i in range(300_000):
            leaf(i)
        pytrace_cffi.stop()
        print("went on after stop()")
    """, [sys.executable, str(tmp_path / "prog.py")])
    assert stdout == ""
    assert stderr.count("Traceback") == 1 and "pytrace_cffi.stop()" in stderr and \
        stderr.endswith("KeyboardInterrupt\n"), stderr
    assert leaf_calls(_finished_as_said(tmp_path, out, stderr)) == 300_000


def test_writing_out_is_said_when_it_starts_and_ends(tmp_path):
    """On a stderr that is no terminal: a line as writing starts, and one with
    OUT's size and the time it took as it ends (windows of --no-follow too)."""
    out = tmp_path / "out.json"
    proc = run(tmp_path, MANY_LEAVES.format(n=10), "--no-follow", "-o", out)
    assert proc.returncode == 3, proc.stderr
    start, end = proc.stderr.splitlines()
    assert start == f"pytrace_cffi: writing {out} ..."
    size = os.path.getsize(out)
    shown = f"{size} bytes" if size < 1000 else f"{size / 1000:.1f} kB"
    assert re.fullmatch(rf"pytrace_cffi: \d{{1,3}}(,\d{{3}})* calls on 1 thread -> {re.escape(str(out))} "
                        rf"\({re.escape(shown)}, \d+\.\d\d s\)", end), end


# The .pftrace encoder never told of a spill while the program runs (as when it
# falls far behind on a busy machine): all of events.bin is left for the end.
ENCODER_BEHIND_RUN = """
import runpy
from pytrace_cffi.follow import live

class NeverAdvanced:
    def __getattr__(self, name):
        return getattr(lib, name)

    def pt_live_advance(self, *args):
        pass

lib, live.lib = live.lib, NeverAdvanced()
runpy.run_module("pytrace_cffi", run_name="__main__", alter_sys=True)
"""


def test_a_long_end_of_the_encoder_is_said_before_writing(tmp_path):
    """What the encoder has left at stop, when it is a second's work or more, is
    said in a line before the "writing" one (#33 item 10: a .pftrace's line came
    seconds after the program ended, silently); OUT and the program's exit code
    as ever. A small run's lines are the test above's (and test_cli_output's)."""
    out = tmp_path / "out.pftrace"
    (tmp_path / "prog.py").write_text(textwrap.dedent(MANY_LEAVES.format(n=4_000_000)))
    (tmp_path / "tmp").mkdir()
    proc = run_command([sys.executable, "-c", ENCODER_BEHIND_RUN, "run", "-o", str(out),
                        str(tmp_path / "prog.py")], tmp_path,
                       _env(TMPDIR=str(tmp_path / "tmp")), TIMEOUT)
    assert proc.returncode == 3 and proc.stdout == "4000000\n", proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 3, proc.stderr
    # 4M calls: 8M events of 8 bytes, and blocks' headers
    match = re.fullmatch(r"pytrace_cffi: stopping: encoding the last ([\d.]+) MB of events "
                         r"for the \.pftrace \.\.\.", lines[0])
    assert match and 64 <= float(match.group(1)) < 70, proc.stderr
    assert lines[1] == f"pytrace_cffi: writing {out} ..."
    assert re.fullmatch(rf"pytrace_cffi: \d{{1,3}}(,\d{{3}})* calls on 1 thread -> {re.escape(str(out))} .*",
                        lines[2]), proc.stderr
    assert leaf_calls(pytrace_cffi.load(out)) == 4_000_000


# -- a child that outlives the run ------------------------------------------------

ORPHAN = """\
import os, subprocess, sys, time
child = '''
import os, sys, time
def leaf(i):
    return i
for i in range(300_000):          # two spills or more: a trace in its directory
    leaf(i)
open("spilled", "w").close()
while os.getppid() == {parent}:   # cheaply, until the run is over
    time.sleep(0.05)
for i in range(10 ** 9):          # then without bound, as the issue's child
    leaf(i)
'''.format(parent=os.getpid())
started = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
while not os.path.exists("spilled"):
    time.sleep(0.02)
print(started.pid)
"""


def test_a_child_that_outlives_the_run_stops_recording(tmp_path):
    """The run reports the child as running, with its directory, and ends; the
    child, at its next spill, stops recording, saves what it has with the reason
    in its meta.json, and runs on untraced (its directory grows no more)."""
    proc = run(tmp_path, ORPHAN, "-o", tmp_path / "out.json")
    child = int(proc.stdout)
    try:
        assert proc.returncode == 0, proc.stderr
        line = next((line for line in proc.stderr.splitlines() if f"pid {child} " in line),
                    "")
        assert re.search(r": running, \d{1,3}(,\d{3})* calls .*\[(\S+)\]$", line), proc.stderr
        directory = re.search(r"\[(\S+)\]$", line).group(1)
        assert f"the per-process traces stay in {os.path.dirname(directory)}" in proc.stderr
        meta = os.path.join(directory, "meta.json")
        deadline = time.monotonic() + 10
        while not os.path.exists(meta) and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(meta, encoding="utf-8") as f:
            assert "its run (pid" in json.load(f)["stopped_early"]
        size = _size(directory)
        time.sleep(0.5)
        assert _size(directory) == size and _alive(child)     # busy, untraced
        assert leaf_calls(pytrace_cffi.load(directory)) > 300_000
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_child_still_starting_as_the_run_ends_is_not_traced(tmp_path):
    """A child started just before the program ends is running, not "ended
    before its bootstrap": it is said so, and it does not trace at all."""
    proc = run(tmp_path, """
        import subprocess, sys
        started = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(started.pid)
    """, "-o", tmp_path / "out.json")
    child = int(proc.stdout)
    try:
        assert proc.returncode == 0, proc.stderr
        assert "ended before its bootstrap" not in proc.stderr
        # still starting (untraced), or already running (then it stops at a spill)
        assert ("was still starting up when its run finished: it is not traced"
                in proc.stderr or re.search(rf"pid {child} \(.*\): running", proc.stderr)), \
            proc.stderr
        time.sleep(1)
        size = _size(tmp_path / "tmp")
        time.sleep(0.5)
        assert _size(tmp_path / "tmp") == size < 4 << 20 and _alive(child)
    finally:
        os.kill(child, signal.SIGKILL)


def _size(directory):
    return sum(os.path.getsize(os.path.join(top, name))
               for top, _, names in os.walk(directory) for name in names)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


# -- Ctrl-C ----------------------------------------------------------------------

def test_ctrl_c_prints_the_traceback_and_dies_of_sigint_as_python_does(tmp_path):
    source = textwrap.dedent("""
        import atexit, sys
        atexit.register(lambda: print("atexit ran"))
        def inner():
            raise KeyboardInterrupt
        def outer():
            inner()
        print("started")
        outer()
    """)
    (tmp_path / "prog.py").write_text(source)
    plain = run_command([sys.executable, str(tmp_path / "prog.py")], tmp_path, _env(),
                        TIMEOUT)
    traced = run(tmp_path, source, "-o", tmp_path / "out.json")
    assert plain.returncode == traced.returncode == -signal.SIGINT
    assert traced.stdout == plain.stdout == "started\natexit ran\n"
    ours = [line for line in traced.stderr.splitlines(True) if line.startswith("pytrace_cffi:")]
    assert "".join(line for line in traced.stderr.splitlines(True)
                   if line not in ours) == plain.stderr
    assert traced.stderr.startswith("".join(ours))             # OUT written first
    assert (tmp_path / "out.json").stat().st_size > 0


# A thread of the program sends SIGTERM to its own process every 2 ms from the
# moment `when` says: the first starts the save, the rest come while the trace
# is stopped and OUT written (as a re-sent or repeated SIGTERM does under load).
KILLED_WHILE_SAVING = """
    import atexit, os, signal, sys, threading, time
    def leaf(i):
        return i
    go = threading.Event()
    def keep_killing():
        go.wait()
        while True:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.002)
    # (started now: 3.12+ starts no thread at the interpreter's exit)
    threading.Thread(target=keep_killing, daemon=True).start()
    def start_killing():
        go.set()
        time.sleep(2)
    for i in range({n}):
        leaf(i)
    print({n}, flush=True)
    if "{when}" == "at_exit":
        atexit.register(start_killing)      # while `run` stops and writes OUT
    else:
        start_killing()                     # while the program runs
        print("not reached: SIGTERM ends it")
"""


@pytest.mark.parametrize("when", ["running", "at_exit"])
@pytest.mark.parametrize("out_name,flags", [("out.pftrace", ()), ("out.json", ()),
                                            ("out.pftrace", ("--no-follow",))])
def test_sigterms_while_the_trace_is_saved_still_write_out(tmp_path, when, out_name, flags):
    """SIGTERM after SIGTERM while the trace is saved and OUT written: OUT is
    written whole, then the process dies of SIGTERM as it would untraced, and
    nothing is left in TMPDIR (a later SIGTERM used to end the process between
    the save of its trace and OUT, silently, the job directory left behind)."""
    out = tmp_path / out_name
    proc = run(tmp_path, KILLED_WHILE_SAVING.format(n=20_000, when=when), *flags, "-o", out)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert proc.stdout == "20000\n"
    assert leaf_calls(pytrace_cffi.load(out)) == 20_000, proc.stderr
    assert f"-> {out}" in proc.stderr
    assert os.listdir(tmp_path / "tmp") == []


@pytest.mark.parametrize("flags", [(), ("--flight-recorder",), ("--memory-interval", "10"),
                                   ("--no-follow", "--duration", "30")])
def test_a_program_blocking_sigterm_keeps_it_pending_as_untraced(tmp_path, flags):
    """The program blocks SIGTERM and sends it to itself: untraced it stays pending
    and the program goes on. Traced too: no thread of ours takes it (which made a
    SIGTERM dump, wrote OUT early and said "no window was traced" while the rest
    of the program ran untraced)."""
    out = tmp_path / "out.pftrace"
    proc = run(tmp_path, """
        import os, signal, time
        def work(i):
            return i
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        for i in range(2000):
            work(i)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)             # (the recorder's and sampler's threads run meanwhile)
        for i in range(2000):
            work(i)
        print("went on")
    """, *flags, "-o", out)
    assert proc.returncode == 0 and proc.stdout == "went on\n", proc.stderr
    assert "SIGTERM" not in proc.stderr and "no window was traced" not in proc.stderr
    assert sum(1 for call in pytrace_cffi.load(out) if call.name.endswith(": work")) == 4000


# -- a disk that fills before the first spill (#33 item 6) ------------------------

# Fills the disk holding path (argv[1]) after `before` calls of leaf, before the
# first spill (an eighth of 1 << 20 events: ~65k calls), then calls on; with
# argv[2] "free" it removes its file before it ends. It prints its own counts.
FILLS_THE_DISK = """
    import os, sys
    def leaf(i):
        return i
    calls = 0
    for i in range(57_000):
        leaf(i)
        calls += 1
    before = calls
    try:
        with open(sys.argv[1], "wb") as f:
            while True:
                f.write(b"x" * 65536)
    except OSError:
        pass
    for i in range(20_000):
        leaf(i)
        calls += 1
    if sys.argv[2] == "free":
        os.unlink(sys.argv[1])
    print(before, calls)
    sys.exit(3)
"""


def _fills(tmp_path, out, big, free, tmpdir, cwd):
    (tmp_path / "prog.py").write_text(textwrap.dedent(FILLS_THE_DISK))
    return run_command([sys.executable, "-m", "pytrace_cffi", "run", "-o", str(out),
                        str(tmp_path / "prog.py"), str(big), free], cwd,
                       _env(TMPDIR=str(tmpdir)), TIMEOUT)


@pytest.mark.parametrize("out_name", ["out.pftrace", "out.json"])
def test_a_disk_full_before_the_first_spill_keeps_the_events_in_memory(tmp_path, out_name):
    """OUT, the current directory and TMPDIR on one 5 MB disk the program fills
    before the first spill (and empties at its end): recording stops there, the
    events not written are kept in memory and written at the end; OUT is written
    (the .pftrace), or, too big for the disk (the .json), the printed command
    writes it once there is room. The events used to be dropped: events.bin held
    its header only and no process could be read."""
    with small_disk(tmp_path / "disk", "5m") as disk:
        (disk / "tmp").mkdir()
        out = disk / out_name
        proc = _fills(tmp_path, out, disk / "big", "free", disk / "tmp", disk)
        assert proc.returncode == 3, proc.stderr
        assert "Traceback" not in proc.stderr
        before, total = map(int, proc.stdout.split())
        assert "recording stopped there: the events not written yet were kept in memory" \
            in proc.stderr
        if not out.exists():
            match = re.search(r"the per-process traces stay in (\S+) \(write them later with: "
                              r"(python -m pytrace_cffi export \S+ -o \S+)\)", proc.stderr)
            assert match and out_name == "out.json", proc.stderr
            subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
            finish = run_command(match.group(2).replace("python", sys.executable, 1).split(),
                                 tmp_path, _env(), TIMEOUT)
            assert finish.returncode == 0, finish.stderr
        trace = pytrace_cffi.load(out) if out_name.endswith(".pftrace") else \
            pytrace_cffi.load(_saved(tmp_path, out))
        assert before <= leaf_calls(trace) < total      # up to the first spill
        assert_nested(trace)


@pytest.mark.parametrize("out_name", ["out.pftrace", "out.json"])
def test_a_full_disk_of_out_and_tmpdir_continues_the_spill_in_the_current_directory(
        tmp_path, out_name):
    """OUT and TMPDIR on one disk the program fills for good before the first
    spill, the current directory on another: the spill goes on in the current
    directory (the documented fallback), and OUT's fallback there holds every
    call. Recording used to fail there, the trace lost."""
    with small_disk(tmp_path / "disk", "5m") as disk, \
            small_disk(tmp_path / "cwd", "32m") as cwd:
        (disk / "tmp").mkdir()
        out = disk / out_name
        proc = _fills(tmp_path, out, disk / "big", "keep", disk / "tmp", cwd)
        assert proc.returncode == 3, proc.stderr
        assert "Traceback" not in proc.stderr and not out.exists()
        [fallback] = re.findall(r"saved it to '(\S+)' instead", proc.stderr)
        assert os.path.dirname(fallback) == str(cwd), proc.stderr
        trace = pytrace_cffi.load(fallback) if out_name.endswith(".pftrace") else \
            pytrace_cffi.load(_saved(tmp_path, fallback))
        assert leaf_calls(trace) == int(proc.stdout.split()[1]) == 77_000
        assert sorted(os.listdir(cwd)) == [os.path.basename(fallback)]
        assert os.listdir(disk / "tmp") == []


def test_a_disk_full_to_the_end_says_the_trace_is_lost_not_a_command(tmp_path):
    """OUT, the current directory and TMPDIR on one disk the program fills for
    good before the first spill: nothing recorded can be kept anywhere; `run`
    says the trace is lost, instead of printing a command that cannot work (it
    used to: "no process could be read" when it was tried)."""
    with small_disk(tmp_path / "disk", "5m") as disk:
        (disk / "tmp").mkdir()
        out = disk / "out.pftrace"
        proc = _fills(tmp_path, out, disk / "big", "keep", disk / "tmp", disk)
        assert proc.returncode == 3, proc.stderr
        assert proc.stdout == "57000 77000\n"
        assert "Traceback" not in proc.stderr and not out.exists()
        assert "the events still in memory at the end could not be written either (No " \
               "space left on device): they are lost" in proc.stderr
        assert re.search(r"the trace is lost: no process of the job kept any events \(.*\); "
                         + re.escape(f"{out} is not written"), proc.stderr), proc.stderr
        assert "write them later with" not in proc.stderr
        assert os.listdir(disk / "tmp") == []
