"""run --schedule wait,warmup,active[,repeat]: only the steps the schedule picks
are traced (torch.profiler.schedule's rules), each window to its own file when
there can be several. A step ends at pytrace_cffi.step() and, with torch, after
each training step of the optimizers. The stand-in torch (tests/torch_stand_in/)
runs on every interpreter; the real torch on 3.11."""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import pytrace_cffi

HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "torch_stand_in")

# A function of its own per step (step_0 ... step_11), called with the step number.
STEP_FUNCTIONS = textwrap.dedent("""
    def _step_function(i):
        def f(n):
            return n
        f.__code__ = f.__code__.replace(co_name=f"step_{i}")
        return f

    STEP_FUNCTIONS = [_step_function(i) for i in range(12)]
""")

STEP_LOOP = STEP_FUNCTIONS + textwrap.dedent("""
    import pytrace_cffi

    for i in range(12):
        STEP_FUNCTIONS[i](i)
        pytrace_cffi.step()
""")

TRAIN_LOOP = STEP_FUNCTIONS + textwrap.dedent("""
    import torch, workload
    model, optimizers, x = workload.make()
    for i in range(12):
        STEP_FUNCTIONS[i](i)
        workload.train(model, optimizers, x, steps=1)      # SGD, then Adam, step
""")


def run_cli(tmp_path, *args, env=None):
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    return proc


def names(path):
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    return collections.Counter(e["name"] for e in events if e["ph"] == "X")


def steps_in(counter):
    return sorted((int(name.rsplit("step_", 1)[1]), n) for name, n in counter.items()
                  if name.rsplit(": ", 1)[-1].startswith("step_"))


def traces(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("t."))


def test_schedule_traces_the_active_steps_only(tmp_path):
    (tmp_path / "prog.py").write_text(STEP_LOOP)
    proc = run_cli(tmp_path, "--schedule", "5,1,3", "-o", "t.json", "prog.py")
    assert proc.returncode == 0, proc.stderr
    assert traces(tmp_path) == ["t.json"]
    # wait 5 (steps 0-4), warm up 1 (step 5), trace 3: the 7th to 9th steps
    assert steps_in(names(tmp_path / "t.json")) == [(6, 1), (7, 1), (8, 1)]


def test_schedule_with_repeat_writes_numbered_windows(tmp_path):
    (tmp_path / "prog.py").write_text(STEP_LOOP)
    proc = run_cli(tmp_path, "--schedule", "2,1,2,2", "-o", "t.json", "prog.py")
    assert proc.returncode == 0, proc.stderr
    assert traces(tmp_path) == ["t.1.json", "t.2.json"]
    assert steps_in(names(tmp_path / "t.1.json")) == [(3, 1), (4, 1)]
    assert steps_in(names(tmp_path / "t.2.json")) == [(8, 1), (9, 1)]


def test_schedule_repeating_forever_and_warmup_is_not_written(tmp_path):
    (tmp_path / "prog.py").write_text(STEP_LOOP)
    proc = run_cli(tmp_path, "--schedule", "1,2,3,0", "-o", "t.json", "prog.py")
    assert proc.returncode == 0, proc.stderr
    # cycles of 6 steps: 3-5 and 9-11 traced
    assert traces(tmp_path) == ["t.1.json", "t.2.json"]
    assert steps_in(names(tmp_path / "t.1.json")) == [(3, 1), (4, 1), (5, 1)]
    assert steps_in(names(tmp_path / "t.2.json")) == [(9, 1), (10, 1), (11, 1)]


def test_schedule_with_fewer_steps_than_it_waits_says_so(tmp_path):
    (tmp_path / "prog.py").write_text(STEP_LOOP)
    proc = run_cli(tmp_path, "--schedule", "20,1,3", "-o", "t.json", "prog.py")
    assert proc.returncode == 0, proc.stderr
    assert traces(tmp_path) == []
    assert "no window was traced" in proc.stderr


@pytest.mark.parametrize("value", ["5,1", "5,1,0", "a,b,c", "1,2,3,4,5", "-1,1,1"])
def test_bad_schedules_are_refused_before_the_program_runs(tmp_path, value):
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    proc = run_cli(tmp_path, "--schedule=" + value, "-o", "t.json", "prog.py")
    assert proc.returncode != 0 and "--schedule" in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_schedule_and_signal_do_not_combine(tmp_path):
    (tmp_path / "prog.py").write_text("pass\n")
    proc = run_cli(tmp_path, "--schedule", "1,1,1", "--signal", "USR2", "prog.py")
    assert proc.returncode != 0 and "do not combine" in proc.stderr


def check_training_window(tmp_path, counter):
    assert steps_in(counter) == [(6, 1), (7, 1), (8, 1)]
    # each training step: one forward of the model, one step of each optimizer
    assert counter["nn.Module: Sequential_0"] == 3
    assert counter["Optimizer.step#SGD.step"] == 3
    assert counter["Optimizer.step#Adam.step"] == 3


def test_schedule_counts_optimizer_steps_with_the_stand_in_torch(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN_LOOP)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [STAND_IN] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = run_cli(tmp_path, "--schedule", "5,1,3", "-o", "t.json", "train.py", env=env)
    assert proc.returncode == 0, proc.stderr
    assert traces(tmp_path) == ["t.json"]
    check_training_window(tmp_path, names(tmp_path / "t.json"))


def test_schedule_counts_optimizer_steps_with_torch(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(TRAIN_LOOP)
    shutil.copy(os.path.join(STAND_IN, "workload.py"), tmp_path)    # torch stays torch
    proc = run_cli(tmp_path, "--schedule", "5,1,3", "-o", "t.json", "train.py")
    assert proc.returncode == 0, proc.stderr
    counter = names(tmp_path / "t.json")
    assert not [n for n in counter if "torch_stand_in" in n]
    check_training_window(tmp_path, counter)


@pytest.mark.parametrize("step_first", [False, True])
def test_program_steps_and_optimizer_steps_are_not_counted_twice(tmp_path, step_first):
    # A loop that marks its steps and also steps torch's optimizers: each
    # iteration is one step, whether step() comes after the optimizers or before.
    loop = TRAIN_LOOP.replace(
        "    workload.train(model, optimizers, x, steps=1)      # SGD, then Adam, step\n",
        "    import pytrace_cffi\n"
        + ("    pytrace_cffi.step()\n" if step_first else "")
        + "    workload.train(model, optimizers, x, steps=1)\n"
        + ("" if step_first else "    pytrace_cffi.step()\n"))
    assert loop != TRAIN_LOOP
    (tmp_path / "train.py").write_text(loop)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [STAND_IN] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = run_cli(tmp_path, "--schedule", "5,1,3", "-o", "t.json", "train.py", env=env)
    assert proc.returncode == 0, proc.stderr
    counter = names(tmp_path / "t.json")
    if step_first:
        # step() at the top of iteration i ends iteration i-1: iteration 0 ended
        # with the optimizers, the step() of iteration 1 ends nothing new
        assert steps_in(counter) == [(6, 1), (7, 1), (8, 1)]
    else:
        check_training_window(tmp_path, counter)


def test_step_is_a_no_op_without_a_schedule():
    assert pytrace_cffi.step() is None and not pytrace_cffi.is_tracing()
    with pytrace_cffi.trace() as t:
        pytrace_cffi.step()
        still = pytrace_cffi.is_tracing()
    assert still and t.trace is not None


def test_step_drives_an_open_scheduled_trace(tmp_path):
    ready = []
    functions = {}
    exec(compile(STEP_FUNCTIONS, "steps.py", "exec"), functions)
    with pytrace_cffi.trace(schedule=pytrace_cffi.schedule(wait=1, warmup=1, active=2),
                            on_trace_ready=ready.append):
        for i in range(6):
            functions["STEP_FUNCTIONS"][i](i)
            pytrace_cffi.step()
    pytrace_cffi.step()                 # after the block: nothing runs it
    assert len(ready) >= 1
    assert steps_in(collections.Counter(c.name for c in ready[0])) == [(2, 1), (3, 1)]


@pytest.mark.parametrize("out, windows", [
    ("T.JSON", ["T.1.JSON", "T.2.JSON"]),
    ("t.dir", None),                             # refused: a suffix of no format
    ("t", ["t.1", "t.2"]),                       # saved-trace directories
    ("t.v2" + os.sep, ["t.v2.1", "t.v2.2"]),
])
def test_numbered_windows_keep_the_output_format(tmp_path, out, windows):
    (tmp_path / "prog.py").write_text(STEP_LOOP)
    proc = run_cli(tmp_path, "--schedule", "2,1,2,2", "-o", out, "prog.py")
    if windows is None:
        assert proc.returncode == 2 and "not a trace format" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    made = sorted(p.name for p in tmp_path.iterdir() if p.name != "prog.py")
    assert made == windows
    for window, steps in zip(windows, ([(3, 1), (4, 1)], [(8, 1), (9, 1)])):
        if (tmp_path / window).is_dir():
            counter = collections.Counter(c.name for c in pytrace_cffi.load(tmp_path / window))
        else:
            counter = names(tmp_path / window)
        assert steps_in(counter) == steps


def test_numbered_windows_keep_their_processes_in_numbered_directories(tmp_path):
    """--processes-dir DIR with numbered windows: each window's per-process traces
    stay in DIR.<n>/, beside its OUT.<n>."""
    (tmp_path / "prog.py").write_text(STEP_LOOP)
    proc = run_cli(tmp_path, "--schedule", "2,1,2,2", "-o", "t.json", "--processes-dir",
                   "kept", "prog.py")
    assert proc.returncode == 0, proc.stderr
    made = sorted(p.name for p in tmp_path.iterdir() if p.name != "prog.py")
    assert made == ["kept.1", "kept.2", "t.1.json", "t.2.json"], made
    for window, steps in (("1", [(3, 1), (4, 1)]), ("2", [(8, 1), (9, 1)])):
        [process] = [p for p in (tmp_path / f"kept.{window}").iterdir()
                     if p.name.startswith("proc-")]
        counter = collections.Counter(c.name for c in pytrace_cffi.load(process))
        assert steps_in(counter) == steps
        assert steps_in(names(tmp_path / f"t.{window}.json")) == steps


def test_a_numbered_processes_directory_in_use_leaves_that_window_out(tmp_path):
    """kept.2/ holding another job's traces (the same command run before): that
    window is not traced, and says why; the others are, and the program's exit
    is its own."""
    (tmp_path / "prog.py").write_text(STEP_LOOP)
    (tmp_path / "kept.2" / "proc-1").mkdir(parents=True)
    proc = run_cli(tmp_path, "--schedule", "2,1,2,2", "-o", "t.json", "--processes-dir",
                   "kept", "prog.py")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^pytrace_cffi: window 2 is not traced: cannot keep the per-process "
                     rf"traces in '{re.escape(str(tmp_path / 'kept.2'))}/?': it is not empty",
                     proc.stderr, re.M), proc.stderr
    made = sorted(p.name for p in tmp_path.iterdir() if p.name != "prog.py")
    assert made == ["kept.1", "kept.2", "t.1.json"], made
    assert steps_in(names(tmp_path / "t.1.json")) == [(3, 1), (4, 1)]
    assert os.listdir(tmp_path / "kept.2") == ["proc-1"]
