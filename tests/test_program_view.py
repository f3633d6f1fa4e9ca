"""What `run`'s program sees of sys.modules: python's own list at its first line
(issue #34 item 1), and its own imports traced as calls."""
import json
import os
import subprocess
import sys
import textwrap

import _cffi_backend
import pytest

import pytrace_cffi
from pytrace_cffi.reading import read_trace

PRINT_MODULES = "import sys\nprint(sorted(sys.modules))\n"
# What the program may see beyond python's list (docs/CLI.md, "What the program
# sees"): warnings, which 3.9 and 3.12+ import only when first needed; on 3.14+
# with the modules its import brings (its code is _py_warnings', which imports
# _contextvars).
ALLOWED_EXTRA = {"warnings"} | ({"_py_warnings", "_contextvars"}
                                if sys.version_info >= (3, 14) else set())

# python -S: nothing but the interpreter's start-up (site imports much of what
# we import, hiding differences); cffi's directory then goes on PYTHONPATH.
FLAGS = {"site": [], "no site": ["-S"]}


def environment():
    paths = [os.path.dirname(os.path.dirname(pytrace_cffi.__file__)),
             os.path.dirname(_cffi_backend.__file__)]
    old = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths + ([old] if old else [])))


def modules_seen(cwd, command):
    proc = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(eval(proc.stdout.splitlines()[-1]))     # noqa: S307 - our own print


@pytest.mark.parametrize("flags", FLAGS.values(), ids=FLAGS.keys())
@pytest.mark.parametrize("options", [
    [], ["--log-async"], ["--flight-recorder"], ["--memory-interval", "1"], ["--log-gc"],
    ["--log-exceptions"], ["-o", "out.json"], ["-o", "out.pftrace"], ["-o", "out.html"],
    ["-o", "saved_dir"], ["--no-follow"], ["--max-events", "100", "--spill"]],
    ids=" ".join)
def test_the_program_sees_the_modules_python_gives_it(tmp_path, flags, options):
    (tmp_path / "prog.py").write_text(PRINT_MODULES)
    expected = modules_seen(tmp_path, [sys.executable, *flags, "prog.py"])
    seen = modules_seen(tmp_path, [sys.executable, *flags, "-m", "pytrace_cffi", "run",
                                   *options, "prog.py"])
    assert sorted(seen - expected - ALLOWED_EXTRA) == [] and sorted(expected - seen) == []


@pytest.mark.parametrize("flags", FLAGS.values(), ids=FLAGS.keys())
def test_a_module_run_with_m_sees_what_python_m_gives_it(tmp_path, flags):
    (tmp_path / "shown.py").write_text(PRINT_MODULES)
    expected = modules_seen(tmp_path, [sys.executable, *flags, "-m", "shown"])
    seen = modules_seen(tmp_path, [sys.executable, *flags, "-m", "pytrace_cffi", "run",
                                   "-m", "shown"])
    assert sorted(seen - expected - ALLOWED_EXTRA) == [] and sorted(expected - seen) == []


@pytest.mark.parametrize("options", [[], ["--log-async"]], ids=["default", "log-async"])
def test_the_programs_own_imports_are_traced(tmp_path, options):
    (tmp_path / "prog.py").write_text(textwrap.dedent("""\
        import argparse
        import json
        import socket
        import asyncio

        async def main():
            await asyncio.sleep(0)
        asyncio.run(main())
        print(json.dumps([argparse.__name__, json.__name__, socket.__name__]))
        """))
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", *options,
                           "-o", "out.json", "prog.py"], cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["argparse", "json", "socket"]
    trace = read_trace(str(tmp_path / "out.json"))
    modules_run = {os.path.basename(call.name.split("(")[0]) for call in trace
                   if "<module>" in call.name}
    for name in ("argparse.py", "socket.py", "__init__.py"):   # json/__init__.py
        assert name in modules_run, sorted(modules_run)
    if options:         # its tasks still go on lanes of their own
        names = {thread.name for thread in trace.threads}
        assert any(name.startswith("task ") for name in names), names


CHILD_PRINTS_MODULES = """\
import subprocess, sys
import multiprocessing as mp

def spawned(queue):
    queue.put(sorted(sys.modules))

if __name__ == "__main__":
    subprocess.run([sys.executable, "-c", "import sys; print(sorted(sys.modules))"], check=True)
    context = mp.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=spawned, args=(queue,))
    child.start()
    print(queue.get())
    child.join()
"""


def test_a_followed_child_sees_the_modules_python_gives_it(tmp_path):
    """A child of the program (subprocess, a multiprocessing spawn child), traced by
    our bootstrap: it sees python's sys.modules but for our sitecustomize (and
    warnings, as the program), not the ~50 modules the bootstrap imported."""
    (tmp_path / "prog.py").write_text(CHILD_PRINTS_MODULES)

    def children(command):
        proc = subprocess.run(command, cwd=tmp_path, env=environment(), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return [set(eval(line)) for line in proc.stdout.splitlines()]  # noqa: S307
    expected = children([sys.executable, "prog.py"])
    seen = children([sys.executable, "-m", "pytrace_cffi", "run", "-o", "out.pftrace",
                     "prog.py"])
    for child, python in zip(seen, expected):
        assert sorted(child - python - ALLOWED_EXTRA - {"sitecustomize"}) == []
        assert sorted(python - child) == []
    assert len(seen) == len(expected) == 2


GIVE_BACK_IN_TWO_THREADS = """
import sys, threading, types
from pytrace_cffi import _program_view as view

sys.setswitchinterval(1e-6)         # a thread switch between any two bytecodes
PACKAGES, SUBMODULES = 30, 30
for thread in range(2):
    for i in range(PACKAGES):
        name = f"fake{thread}_{i}"
        view._kept_aside[name] = types.ModuleType(name)
        for k in range(SUBMODULES):
            view._kept_aside[f"{name}.sub{k}"] = types.ModuleType(f"{name}.sub{k}")
errors = []

def give_back(thread):
    try:
        for i in range(PACKAGES):
            name = f"fake{thread}_{i}"
            module = view._give_back.create_module(view._bootstrap.ModuleSpec(
                name, view._give_back))
            assert module.__name__ == name and f"{name}.sub0" in sys.modules
    except Exception as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=give_back, args=(t,)) for t in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(errors, len(view._kept_aside))
"""


def test_modules_kept_aside_are_given_back_to_two_threads_at_once(tmp_path):
    """Two threads importing modules kept aside at once (a torchrun rank's `import
    torch` and a thread of ours, intermittently: 'dictionary changed size during
    iteration' in create_module, the rank's import failed)."""
    proc = subprocess.run([sys.executable, "-c", GIVE_BACK_IN_TWO_THREADS], cwd=tmp_path,
                          env=environment(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "0"]


@pytest.mark.parametrize("options", [
    "follow_children=True, output='job'", "flight_recorder='1M', output='job'",
    "flight_recorder='1M'"])
def test_following_imports_nothing_that_registers_fork_hooks(tmp_path, options):
    """What every followed process runs to start tracing (the bootstrap's start(),
    a forked child's session) imports neither tempfile nor random: random's
    at-fork hook, registered after ours, would run traced in each forked child
    (random.Random.seed in its trace), and both would be the program's modules."""
    script = ("import sys\nimport pytrace_cffi\n"
              f"pytrace_cffi.start({options})\n"
              "print(sorted(m for m in ('tempfile', 'random') if m in sys.modules))\n"
              "pytrace_cffi.stop()\n")
    proc = subprocess.run([sys.executable, "-S", "-c", script], cwd=tmp_path,
                          env=environment(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout
