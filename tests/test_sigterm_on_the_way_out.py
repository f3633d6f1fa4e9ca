"""A SIGTERM that lands while a followed process is on its way out (its exit, an
exec) or imports what the save uses: the trace is saved (and `run`'s OUT written
when this process owes it), then the process dies of the signal as it would
untraced. A multiprocessing Pool's worker meets the first often: the pool's
sentinel lets it exit while Pool.terminate() signals it.

Each traced program serves the SIGTERM at a chosen line of pytrace_cffi's own
code (signal.raise_signal in a sys.settrace function runs the handler before
that line runs): every one of the first lines of a child's exit, and lines
spread over `run`'s end, not only where a race happens to land."""
import signal
import sys

import pytest

import pytrace_cffi

from helpers import SIGNAL_AT_OUR_LINE
from test_children import TIMEOUT, _env_own_tmp, counts, run_command, run_script

# (a program calls sigterm_at_our_line(k) where it chooses)
SIGTERM_AT_OUR_LINE = SIGNAL_AT_OUR_LINE + (
    "def sigterm_at_our_line(k):\n"
    "    signal_at_our_line(signal.SIGTERM, k)\n")

# The first lines of the way out: finishing a followed process (its guards,
# then the start of its save) lies within them.
FIRST_LINES = range(0, 24)
# Lines across `run`'s end: an exec's guards (the first ~100 lines), the save of
# the trace (~12,000 lines at the exec or the exit), then OUT's writing.
RUN_LINES = (4, 16, 256, 4096)


def test_a_child_signalled_at_any_line_of_its_exit_keeps_its_trace(tmp_path):
    """A followed child ends (atexit) and a SIGTERM is served at line k of ours:
    its trace is saved whole and it dies of SIGTERM. Served between "this
    process is finishing" and its save begun, the handler found a save under way,
    returned, and the process died unsaved ("lost")."""
    child = tmp_path / "child.py"
    child.write_text(SIGTERM_AT_OUR_LINE + (
        "import atexit, pytrace_cffi\n"
        "def unique_child(): pass\n"
        "for _ in range(3): unique_child()\n"
        "atexit.register(sigterm_at_our_line, int(sys.argv[1]))\n"))
    job = tmp_path / "job"
    proc = run_script(tmp_path, f"""
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        for k in {list(FIRST_LINES)!r}:
            child = subprocess.Popen([sys.executable, {str(child)!r}, str(k)])
            print(k, child.pid, child.wait(timeout=60))
        pytrace_cffi.stop()
    """, str(job))
    found = counts(job)
    for k, pid, code in (map(int, line.split()) for line in proc.stdout.splitlines()):
        assert code == -signal.SIGTERM, (k, proc.stderr)
        label, state, names = found[pid]
        assert (state, names) == ("complete", {"unique_child": 3}), (k, proc.stderr)


@pytest.mark.parametrize("where", ["exit", "exec"])
@pytest.mark.parametrize("k", RUN_LINES)
def test_run_signalled_at_any_line_of_its_end_writes_out(tmp_path, where, k):
    """`run -o OUT` of a program that execs Python: the new image owes OUT. A
    SIGTERM served at line k of ours as that image exits, or as the first image
    execs: OUT holds what both (or the first) traced, and the process dies of
    SIGTERM. One that landed during the trace's save ended the process before
    OUT was written; one during an exec, before the hand-over's finish was done."""
    image = tmp_path / "image.py"
    image.write_text(SIGTERM_AT_OUR_LINE + (
        "import atexit, pytrace_cffi\n"
        "def unique_image(): pass\n"
        "for _ in range(5): unique_image()\n"
        "if sys.argv[1] == 'exit': atexit.register(sigterm_at_our_line, int(sys.argv[2]))\n"))
    (tmp_path / "prog.py").write_text(SIGTERM_AT_OUR_LINE + (
        "import pytrace_cffi\n"
        "def unique_first(): pass\n"
        "for _ in range(4): unique_first()\n"
        "if sys.argv[1] == 'exec': sigterm_at_our_line(int(sys.argv[2]))\n"
        f"os.execv(sys.executable, [sys.executable, {str(image)!r}] + sys.argv[1:])\n"))
    out = tmp_path / "out.json"
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", "-o", str(out),
                        str(tmp_path / "prog.py"), where, str(k)], tmp_path,
                       _env_own_tmp(tmp_path), TIMEOUT)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    names = [call.name.rsplit(": ", 1)[-1] for call in pytrace_cffi.load(out)]
    expected = {"exit": {"unique_first": 4, "unique_image": 5}, "exec": {"unique_first": 4}}
    assert {name: names.count(name) for name in ("unique_first", "unique_image")
            if name in names} == expected[where], proc.stderr


@pytest.mark.parametrize("k", (4, 24))
def test_run_signalled_while_the_program_imports_what_the_save_uses(tmp_path, k):
    """`run -o OUT` of a program signalled while it imports json, collections
    (the standard library's modules the save uses; our code runs there, giving
    back the modules it holds aside): OUT is written and the program dies then,
    as untraced, without running on. The save found json half made and the
    trace was lost ("saving its trace failed")."""
    (tmp_path / "prog.py").write_text(SIGTERM_AT_OUR_LINE + (
        "def unique_first(): pass\n"
        "for _ in range(4): unique_first()\n"
        "sigterm_at_our_line(int(sys.argv[1]))\n"
        "import json, collections, shutil, tempfile\n"
        "print('imported')\n"))
    out = tmp_path / "out.json"
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", "-o", str(out),
                        str(tmp_path / "prog.py"), str(k)], tmp_path,
                       _env_own_tmp(tmp_path), TIMEOUT)
    assert proc.returncode == -signal.SIGTERM and proc.stdout == "", proc.stderr
    assert "failed" not in proc.stderr
    names = [call.name.rsplit(": ", 1)[-1] for call in pytrace_cffi.load(out)]
    assert names.count("unique_first") == 4, proc.stderr


@pytest.mark.parametrize("ending", ["os._exit", "exec"])
@pytest.mark.parametrize("k", (None, 4, 256))
def test_run_without_following_writes_its_window_as_the_program_ends_another_way(
        tmp_path, ending, k):
    """`run --no-follow -o OUT`: the process owes its open window (cli.run.Run,
    as follow/exits.py pays it). os._exit or an exec of a program that is not
    followed writes it first; with a SIGTERM served at line k of ours on that way
    out, it is written too, and the process dies of the signal."""
    (tmp_path / "prog.py").write_text(SIGTERM_AT_OUR_LINE + (
        "def unique_first(): pass\n"
        "for _ in range(4): unique_first()\n"
        "sys.stdout.flush()\n"
        "if sys.argv[2] != '-': sigterm_at_our_line(int(sys.argv[2]))\n"
        "if sys.argv[1] == 'exec': os.execv('/bin/echo', ['echo', 'image'])\n"
        "os._exit(5)\n"))
    out = tmp_path / "out.json"
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", "--no-follow", "-o",
                        str(out), str(tmp_path / "prog.py"), ending,
                        "-" if k is None else str(k)], tmp_path, _env_own_tmp(tmp_path),
                       TIMEOUT)
    expected_code = -signal.SIGTERM if k is not None else 0 if ending == "exec" else 5
    assert proc.returncode == expected_code, proc.stderr
    assert proc.stdout == ("image\n" if ending == "exec" and k is None else ""), proc.stderr
    names = [call.name.rsplit(": ", 1)[-1] for call in pytrace_cffi.load(out)]
    assert names.count("unique_first") == 4, proc.stderr


STUCK_IN_C = """
import ctypes, sys
def unique_first(): pass
for _ in range(4): unique_first()
mutex = ctypes.create_string_buffer(64)         # a default pthread mutex
libc = ctypes.CDLL(None)
libc.pthread_mutex_lock(mutex)
print("stuck", flush=True)
libc.pthread_mutex_lock(mutex)                  # for ever: signals do not end it
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the relay is Linux's")
@pytest.mark.parametrize("flags", [(), ("--no-follow",), ("--flight-recorder",)],
                         ids=["follow", "no-follow", "flight-recorder"])
def test_a_sigterm_ends_a_program_stuck_in_c_and_says_what_is_lost(tmp_path, flags):
    """The main thread never comes back from C, so no Python handler can run:
    untraced, SIGTERM ends the process at once; traced, 2 s later (the relay's
    patience), unsaved, with a line that says so and where the rest is. It
    used to live on for ever; with a flight recorder (which dumps and ends it)
    OUT was left unwritten without a word."""
    import subprocess
    import time
    (tmp_path / "prog.py").write_text(STUCK_IN_C)
    out = tmp_path / "out.json"
    proc = subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "run", *flags, "-o",
                             str(out), str(tmp_path / "prog.py")], cwd=tmp_path,
                            env=_env_own_tmp(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "stuck\n"
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGTERM, stderr
    assert stdout == ""
    assert "SIGTERM came while the main thread was in C code that does not return" \
        in stderr
    if flags == ("--no-follow",):
        assert f"its window's trace is lost ({out} is not written)" in stderr
    else:
        assert f"{out} is not written: the job's per-process traces stay in " in stderr
    # (the flight recorder serves it from its own thread, after its dump: 0.25 s)
    assert ("its flight recorder's dump holds its ring" in stderr) == bool(
        flags == ("--flight-recorder",)), stderr
