"""The API's options on the command line: --max-events (with --spill), --no-modules,
--record-params, --no-trim-paths. The torch ones run the stand-in torch
(tests/torch_stand_in/) in the traced program, so they run on every interpreter."""
import json
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "torch_stand_in")

FIB = textwrap.dedent("""
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    fib(15)             # 1973 calls of fib
""")
FIB_CALLS = 1973

TORCH_PROGRAM = textwrap.dedent("""
    import sys
    import torch, workload
    assert torch.__file__.startswith(sys.argv[1]), torch.__file__
    model, optimizers, x = workload.make()
    workload.train(model, optimizers, x)
""")


def run_cli(tmp_path, *args, env=None):
    return subprocess.run([sys.executable, "-m", "pytrace_cffi", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)


def chrome(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data, [e for e in data["traceEvents"] if e["ph"] == "X"]


def fib_calls(events):
    return [e for e in events if e["name"].endswith(": fib")]


def test_max_events_keeps_the_newest_and_says_how_many_were_dropped(tmp_path):
    (tmp_path / "prog.py").write_text(FIB)
    # (the chunks hold 512 events at least: a bound under 1024 holds one, at times
    # nearly empty, with only the end of the run's own machinery in it)
    proc = run_cli(tmp_path, "run", "--max-events", "3000", "-o", "t.json", "prog.py")
    assert proc.returncode == 0, proc.stderr
    data, events = chrome(tmp_path / "t.json")
    assert data["otherData"]["dropped_events"] > 0
    # one line, in the command line's words (its flags, not start()'s options)
    dropped = [line for line in proc.stderr.splitlines() if "dropped" in line]
    assert dropped == [f"pytrace_cffi: dropped {data['otherData']['dropped_events']} events "
                       "(--max-events kept the newest; give --spill to keep them all)"], (
        proc.stderr)
    assert "TraceWarning" not in proc.stderr
    assert 0 < len(fib_calls(events)) < FIB_CALLS


def test_max_events_with_spill_keeps_every_call_and_cleans_up(tmp_path):
    (tmp_path / "prog.py").write_text(FIB)
    out = tmp_path / "out"
    out.mkdir()
    proc = run_cli(tmp_path, "run", "--max-events", "600", "--spill",
                   "-o", str(out / "t.json"), "prog.py")
    assert proc.returncode == 0, proc.stderr
    data, events = chrome(out / "t.json")
    assert data["otherData"]["dropped_events"] == 0
    assert len(fib_calls(events)) == FIB_CALLS
    assert sorted(os.listdir(out)) == ["t.json"]          # the spill directory is gone


def test_spill_to_a_saved_directory(tmp_path):
    (tmp_path / "prog.py").write_text(FIB)
    proc = run_cli(tmp_path, "run", "--max-events", "600", "--spill", "-o", "saved",
                   "prog.py")
    assert proc.returncode == 0, proc.stderr
    import pytrace_cffi
    trace = pytrace_cffi.load(tmp_path / "saved")
    assert sum(1 for c in trace if c.name.endswith(": fib")) == FIB_CALLS
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".pytrace_cffi")]


def test_spill_needs_max_events(tmp_path):
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    proc = run_cli(tmp_path, "run", "--spill", "-o", "t.json", "prog.py")
    assert proc.returncode != 0
    assert "--spill goes with --max-events" in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_no_trim_paths_keeps_whole_file_names(tmp_path):
    (tmp_path / "prog.py").write_text(FIB)
    program = os.path.realpath(tmp_path / "prog.py")
    run_cli(tmp_path, "run", "-o", "trimmed.json", "prog.py")
    proc = run_cli(tmp_path, "run", "--no-trim-paths", "-o", "whole.json", "prog.py")
    assert proc.returncode == 0, proc.stderr
    whole = {e["name"] for e in fib_calls(chrome(tmp_path / "whole.json")[1])}
    trimmed = {e["name"] for e in fib_calls(chrome(tmp_path / "trimmed.json")[1])}
    assert whole == {f"{program}(2): fib"}
    assert trimmed == {"prog.py(2): fib"}


def _stand_in_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [STAND_IN] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def test_record_params_and_no_modules(tmp_path):
    (tmp_path / "prog.py").write_text(TORCH_PROGRAM)
    env = _stand_in_env()
    proc = run_cli(tmp_path, "run", "--record-params", "-o", "with", "prog.py", STAND_IN,
                   env=env)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "with" / "params.json", encoding="utf-8") as f:
        params = json.load(f)
    assert {m["name"] for m in params["modules"]} >= {"nn.Module: Sequential_0",
                                                      "nn.Module: Linear_0"}
    assert params["optimizer_steps"]
    import pytrace_cffi
    names = {c.name for c in pytrace_cffi.load(tmp_path / "with")}
    assert "nn.Module: Sequential_0" in names

    proc = run_cli(tmp_path, "run", "-o", "plain", "prog.py", STAND_IN, env=env)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "plain" / "params.json", encoding="utf-8") as f:
        assert json.load(f) == {"modules": [], "optimizer_steps": []}

    proc = run_cli(tmp_path, "run", "--no-modules", "-o", "none", "prog.py", STAND_IN,
                   env=env)
    assert proc.returncode == 0, proc.stderr
    names = {c.name for c in pytrace_cffi.load(tmp_path / "none")}
    assert not [n for n in names if n.startswith(("nn.Module:", "Optimizer."))]
    assert any(n.endswith(": _wrapped_call_impl") for n in names)


def test_the_unfollowed_note_comes_once_the_program_is_found(tmp_path):
    """--max-events without --spill says children are not followed, after the
    program is found: a missing script gets its own error alone."""
    out = str(tmp_path / "out.json")
    missing = run_cli(tmp_path, "run", "--max-events", "1000", "-o", out,
                      str(tmp_path / "missing.py"))
    assert missing.returncode == 2 and "missing.py" in missing.stderr
    assert "not followed" not in missing.stderr
    (tmp_path / "prog.py").write_text("print('ran')\n")
    found = run_cli(tmp_path, "run", "--max-events", "1000", "-o", out,
                    str(tmp_path / "prog.py"))
    assert found.returncode == 0 and found.stdout == "ran\n", found.stderr
    assert found.stderr.startswith("pytrace_cffi: --max-events without --spill drops events, "
                                   "so child processes are not followed")
