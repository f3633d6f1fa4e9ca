"""run's filters and windows: --include/--exclude/--max-depth/--min-duration,
--signal toggling numbered windows, --delay/--duration."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import os, signal, sys, time

    def phase_a():
        return sum(len(str(i)) for i in range(200))

    def phase_b():
        return sum(len(str(i)) for i in range(300))

    def phase_c():
        return sum(len(str(i)) for i in range(400))

    def nap(seconds):
        time.sleep(seconds)

    def main():
        mode = sys.argv[1]
        if mode == "signals":
            phase_a()
            os.kill(os.getpid(), signal.SIGUSR2)     # opens window 1
            phase_b()
            os.kill(os.getpid(), signal.SIGUSR2)     # closes it
            phase_a()
            os.kill(os.getpid(), signal.SIGUSR2)     # opens window 2, closed at exit
            phase_c()
        elif mode == "timed":
            start = time.monotonic()
            phase_a()
            nap(0.6 - (time.monotonic() - start))
            phase_b()
            nap(2.0 - (time.monotonic() - start))
            phase_c()
        else:
            phase_a(); phase_b(); phase_c(); nap(0.05)

    main()
""")


def run_cli(tmp_path, *args):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    return subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def names(path):
    with open(path) as f:
        return [e["name"] for e in json.load(f)["traceEvents"] if e["ph"] == "X"]


def functions(path):
    return {n.rsplit(": ", 1)[-1] for n in names(path) if n.startswith("prog.py(")}


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="needs SIGUSR2")
def test_signal_toggles_numbered_windows(tmp_path):
    proc = run_cli(tmp_path, "--signal", "USR2", "-o", "out.json", "prog.py", "signals")
    assert proc.returncode == 0, proc.stderr
    assert "out.1.json" in proc.stderr and "out.2.json" in proc.stderr
    assert not os.path.exists(tmp_path / "out.json")
    assert "phase_b" in functions(tmp_path / "out.1.json")
    assert "phase_a" not in functions(tmp_path / "out.1.json")
    assert "phase_c" in functions(tmp_path / "out.2.json")
    assert {"phase_a", "phase_b"}.isdisjoint(functions(tmp_path / "out.2.json"))


def test_delay_and_duration_bound_one_window(tmp_path):
    proc = run_cli(tmp_path, "--delay", "0.3", "--duration", "1.0", "-o", "out.json",
                   "prog.py", "timed")
    assert proc.returncode == 0, proc.stderr
    found = functions(tmp_path / "out.json")
    assert "phase_b" in found and not {"phase_a", "phase_c"} & found


def test_filters_on_the_command_line(tmp_path):
    proc = run_cli(tmp_path, "--exclude", "*/prog.py", "-o", "ex.json", "prog.py", "plain")
    assert proc.returncode == 0, proc.stderr
    assert not functions(tmp_path / "ex.json")
    proc = run_cli(tmp_path, "--include", "*/prog.py", "--no-c-calls", "-o", "in.json",
                   "prog.py", "plain")
    assert proc.returncode == 0, proc.stderr
    assert functions(tmp_path / "in.json") >= {"main", "phase_a", "phase_b", "phase_c", "nap"}
    assert all(n.startswith("prog.py(") for n in names(tmp_path / "in.json"))
    # Depth counts from the program's module-level code (1) and main (2): exactly
    # those two, not an empty trace (the launcher's frames used to fill the budget).
    proc = run_cli(tmp_path, "--max-depth", "2", "-o", "depth.json", "prog.py", "plain")
    assert proc.returncode == 0, proc.stderr
    module_line = 2 if sys.version_info < (3, 10) else 1     # 3.9: its first line of code
    # ... and the program's own import of what python had not loaded at start
    # (signal: no longer loaded by us first, #34 item 1)
    loading = subprocess.run([sys.executable, "-c", "import sys; print(len({'os', 'signal', "
                              "'sys', 'time'} - set(sys.modules)))"],
                             capture_output=True, text=True, timeout=60).stdout
    depth = names(tmp_path / "depth.json")
    assert sorted(n for n in depth if not n.startswith("<frozen")) == sorted([
        f"prog.py({module_line}): <module>", "prog.py(16): main"])
    # (3.15 may also run an import's module-lock callback, cb, from C: at depth 1)
    imports = [n for n in depth if n.startswith("<frozen") and not n.endswith(": cb")]
    assert len(imports) == int(loading) and all(n.endswith(": _find_and_load")
                                                  for n in imports), imports
    proc = run_cli(tmp_path, "--max-depth", "3", "-o", "depth3.json", "prog.py", "plain")
    assert proc.returncode == 0, proc.stderr
    assert functions(tmp_path / "depth3.json") == {"<module>", "main", "phase_a", "phase_b",
                                                   "phase_c", "nap"}
    assert not [n for n in names(tmp_path / "depth3.json") if n in ("builtins.sum", "time.sleep")]
    # phase_a takes ~0.1 ms, nap 50 ms: a wide margin on a loaded machine
    proc = run_cli(tmp_path, "--min-duration", "20000", "-o", "long.json", "prog.py", "plain")
    assert proc.returncode == 0, proc.stderr
    long_names = names(tmp_path / "long.json")
    assert any(n.endswith(": nap") for n in long_names)
    assert not [n for n in long_names if n.endswith(": phase_a")]


@pytest.mark.parametrize("args", [["--signal", "NOPE"], ["--max-depth", "0"],
                                  ["--delay", "-1"], ["--signal", "USR2", "--delay", "1"]])
def test_bad_window_options(tmp_path, args):
    proc = run_cli(tmp_path, *args, "-o", "x.json", "prog.py", "plain")
    assert proc.returncode != 0
    assert not os.path.exists(tmp_path / "x.json")


# --- none of our own threads or calls in a window ------------------------------------

WRITER_SIGNALLED = textwrap.dedent("""
    import os, signal, sys
    from pytrace_cffi.render import perfetto_packets as perfetto

    def work(n):
        return sum(i * i for i in range(n))

    def unique_second():
        return work(50)

    # The second window's signal comes while the first is written, its encoder
    # threads at work: the handler runs inside the writer (as a signal sent by
    # hand at that moment would).
    sink_write = perfetto.PacketSink.write

    def write_and_signal(self, data):
        if self.in_flight and not hasattr(perfetto, "signalled"):
            perfetto.signalled = True
            os.kill(os.getpid(), signal.SIGUSR2)
        sink_write(self, data)

    perfetto.PacketSink.write = write_and_signal
    os.kill(os.getpid(), signal.SIGUSR2)          # opens window 1
    for _ in range(2000):
        work(100)
    os.kill(os.getpid(), signal.SIGUSR2)          # closes it: written, signalled inside
    assert perfetto.signalled
    for _ in range(30):
        unique_second()
""")

SCHEDULED = textwrap.dedent("""
    import pytrace_cffi

    def work(n):
        return sum(i * i for i in range(n))

    for step in range(4):
        for _ in range(500):
            work(100)
        pytrace_cffi.step()
""")


def decoded_threads_and_names(path):
    """({thread name}, Counter of slice names) of a .pftrace, by the perfetto protos."""
    pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from collections import Counter
    from test_perfetto import decode
    decoded = decode(path)
    return ({name for _, _, name in decoded["threads"].values()},
            Counter(s["name"] for s in decoded["slices"]))


def assert_only_the_programs(path, thread_names=("MainThread",)):
    threads, slice_names = decoded_threads_and_names(path)
    assert threads == set(thread_names)
    ours = [name for name in slice_names if "pytrace_cffi" in name or "concurrent" in name]
    assert not ours
    return slice_names


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="needs SIGUSR2")
def test_a_signal_while_a_window_is_written_opens_the_next_once_written(tmp_path):
    """The window written from its whole trace by the parallel encoder (a window
    longer than 0.2 s is encoded while it runs: PYTRACE_CFFI_LIVE=0 keeps this
    test's signal inside the writer whatever the machine's speed)."""
    (tmp_path / "prog.py").write_text(WRITER_SIGNALLED)
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--no-follow",
                           "--signal", "USR2", "-o", "out.pftrace", "prog.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTRACE_CFFI_LIVE="0"))
    assert proc.returncode == 0, proc.stderr
    first = assert_only_the_programs(tmp_path / "out.1.pftrace")
    assert sum(n for name, n in first.items() if name.endswith(": work")) == 2000
    second = assert_only_the_programs(tmp_path / "out.2.pftrace")
    assert sum(n for name, n in second.items() if name.endswith(": unique_second")) == 30
    assert not os.path.exists(tmp_path / "out.3.pftrace")


@pytest.mark.parametrize("delay", ["0", "0.2"])
def test_the_timers_of_delay_and_duration_are_never_traced(tmp_path, delay):
    proc = run_cli(tmp_path, "--no-follow", "--delay", delay, "--duration", "0.6", "-o",
                   "out.pftrace", "prog.py", "timed")
    assert proc.returncode == 0, proc.stderr
    assert_only_the_programs(tmp_path / "out.pftrace")


def test_scheduled_windows_hold_the_programs_threads_only(tmp_path):
    (tmp_path / "prog.py").write_text(SCHEDULED)
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--no-follow",
                           "--schedule", "0,0,1,3", "-o", "out.pftrace", "prog.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for number in (1, 2, 3):
        found = assert_only_the_programs(tmp_path / f"out.{number}.pftrace")
        assert sum(n for name, n in found.items() if name.endswith(": work")) == 500
