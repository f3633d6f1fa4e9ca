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
    assert sorted(names(tmp_path / "depth.json")) == sorted([
        f"prog.py({module_line}): <module>", "prog.py(16): main"])
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
