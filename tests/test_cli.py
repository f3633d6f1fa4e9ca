"""python -m pytrace_cffi run: scripts and modules, threads, argv, exit codes."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import pytrace_cffi

SCRIPT = textwrap.dedent("""
    import sys, threading

    def child(n):
        return sum(len(str(i)) for i in range(n))

    def main():
        t = threading.Thread(target=child, args=(25,), name="cli-worker")
        t.start()
        child(10)
        t.join()
        print("argv", sys.argv[1:], "path0", sys.path[0])
        mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
        if mode == "raise":
            raise RuntimeError("script failed")
        if mode == "exit":
            sys.exit(7)
        if mode == "interrupt":
            raise KeyboardInterrupt

    if __name__ == "__main__":
        main()
""")


def run_cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "pytrace_cffi", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def slices(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data, [e for e in data["traceEvents"] if e["ph"] == "X"]


@pytest.mark.parametrize("mode, code", [("ok", 0), ("raise", 1), ("exit", 7),
                                        ("interrupt", -signal.SIGINT)])
def test_run_script_writes_trace_and_keeps_exit_code(tmp_path, mode, code):
    script_dir = tmp_path / "scripts"
    script_dir.mkdir()
    script = script_dir / "prog.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out.json"
    proc = run_cli(tmp_path, "run", "-o", str(out), str(script), mode, "--flag")
    assert proc.returncode == code, proc.stderr
    assert f"argv ['{mode}', '--flag'] path0 {script_dir}" in proc.stdout
    data, events = slices(out)
    names = [e["name"] for e in events]
    # the script's directory is sys.path[0], so its files read as "prog.py"
    assert names.count("prog.py(4): child") == 2
    assert names.count("prog.py(7): main") == 1
    by_id = {e["args"]["Python id"]: e for e in events}
    lens = [e for e in events if e["name"] == "builtins.len"
            and by_id[e["args"]["Python parent id"]]["name"].startswith("prog.py(")]
    assert len(lens) == 25 + 10 + 1      # the genexprs, and len(sys.argv) in main
    thread_names = {e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M"}
    assert {"MainThread", "cli-worker"} <= thread_names
    if mode == "raise":
        assert "RuntimeError: script failed" in proc.stderr
    if mode == "interrupt":     # as python: its traceback, then death by SIGINT
        assert proc.stderr.endswith('    raise KeyboardInterrupt\nKeyboardInterrupt\n')
    assert not [n for n in names if "pytrace_cffi/" in n and "__main__" not in n]


def test_run_module_with_gzip_output(tmp_path):
    (tmp_path / "mymod.py").write_text(SCRIPT)
    out = tmp_path / "out.json.gz"
    proc = run_cli(tmp_path, "run", "-o", str(out), "--no-c-calls", "-m", "mymod", "ok")
    assert proc.returncode == 0, proc.stderr
    import gzip
    with gzip.open(out, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    assert sum(1 for e in events if e["name"].endswith(": child")) == 2
    assert not [e for e in events if e["name"] == "builtins.len"]


def test_bad_invocations_fail_clearly(tmp_path):
    proc = run_cli(tmp_path, "run", "-o", "x.json", "missing.py")
    assert proc.returncode == 2 and "can't open file" in proc.stderr   # as python says it
    assert "missing.py': [Errno 2] No such file or directory" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x.json").exists()
    # A bad OUT (a file where a saved-trace directory goes) is refused on its own,
    # with an existing script, before the script runs: the script would leave a mark.
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    (tmp_path / "xfile").write_text("keep me")
    proc = run_cli(tmp_path, "run", "-o", "xfile", "prog.py")
    assert proc.returncode == 2 and "'xfile': it is a file" in proc.stderr, proc.stderr
    assert not (tmp_path / "ran").exists() and (tmp_path / "xfile").read_text() == "keep me"
    proc = run_cli(tmp_path, "--help")
    assert proc.returncode == 0 and "run" in proc.stdout


ARGV_PROGRAM = textwrap.dedent("""
    import json, sys
    print("ARGV " + json.dumps(sys.argv))
""")


@pytest.mark.parametrize("args, program_argv, out", [
    # everything after -m MODULE or SCRIPT is the program's, as with python
    (["-o", "a.json", "-m", "argmod", "-o", "y"], ["<argmod>", "-o", "y"], "a.json"),
    (["-m", "argmod", "-m", "z"], ["<argmod>", "-m", "z"], "trace.pftrace"),
    (["-o", "g.json", "-margmod", "-q", "x"], ["<argmod>", "-q", "x"], "g.json"),
    (["--output=e.json", "--no-c-calls", "-m", "argmod", "--nproc_per_node", "2", "x.py"],
     ["<argmod>", "--nproc_per_node", "2", "x.py"], "e.json"),
    (["-o", "s.json", "argscript.py", "--output", "x", "-m", "y"],
     ["argscript.py", "--output", "x", "-m", "y"], "s.json"),
    (["--out", "f.json", "--max-depth", "5", "argscript.py", "-h"], ["argscript.py", "-h"],
     "f.json"),
    (["-of.json", "--", "argscript.py", "--help"], ["argscript.py", "--help"], "f.json"),
])
def test_program_arguments_are_the_programs(tmp_path, args, program_argv, out):
    (tmp_path / "argmod.py").write_text(ARGV_PROGRAM)
    (tmp_path / "argscript.py").write_text(ARGV_PROGRAM)
    proc = run_cli(tmp_path, "run", *args)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.split("ARGV ", 1)[1])
    # python -m sets argv[0] to the module's file
    expected = [str(tmp_path / "argmod.py") if a == "<argmod>" else a for a in program_argv]
    assert seen == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["argmod.py", "argscript.py", out])
    assert f"-> {tmp_path / out}" in proc.stderr


def test_run_module_of_a_package_and_stdlib_modules(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def setup():\n    return 1\n\nsetup()\n")
    (pkg / "__main__.py").write_text(textwrap.dedent("""
        import json, sys
        print("ARGV " + json.dumps([sys.argv, __name__, __spec__.name, __package__,
                                    __file__, sys.path[0]]))
    """))
    proc = run_cli(tmp_path, "run", "-o", "p.json", "-m", "pkg", "-m", "z")
    assert proc.returncode == 0, proc.stderr
    main_py = str(pkg / "__main__.py")
    assert json.loads(proc.stdout.split("ARGV ", 1)[1]) == [
        [main_py, "-m", "z"], "__main__", "pkg.__main__", "pkg", main_py, str(tmp_path)]
    _, events = slices(tmp_path / "p.json")
    names = [e["name"] for e in events]
    # the package is imported inside the trace, as python -m imports it first
    assert "pkg/__init__.py(1): setup" in names
    proc = run_cli(tmp_path, "run", "-o", "t.json", "-m", "timeit", "-n", "1", "pass")
    assert proc.returncode == 0 and proc.stdout.startswith("1 loop"), proc.stderr
    proc = run_cli(tmp_path, "run", "-o", "n.json", "-m", "no_such_module")
    assert proc.returncode == 1 and "No module named 'no_such_module'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "n.json").exists()


def test_run_module_pytest_with_its_options(tmp_path):
    pytest.importorskip("pytest")
    (tmp_path / "test_x.py").write_text("def test_one():\n    assert 1\n")
    proc = run_cli(tmp_path, "run", "-o", "t.json", "--no-c-calls", "-m", "pytest", "-q",
                   "-p", "no:cacheprovider", "test_x.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    _, events = slices(tmp_path / "t.json")
    assert any(e["name"].endswith(": test_one") for e in events)


LAUNCHER_WORDS = ("runpy", "builtins.exec", "pkgutil", "typing", "pytrace_cffi")


@pytest.mark.parametrize("how", ["script", "module"])
def test_the_trace_starts_at_the_programs_first_line(tmp_path, how):
    (tmp_path / "prog.py").write_text(SCRIPT)
    target = ["prog.py", "ok"] if how == "script" else ["-m", "prog", "ok"]
    proc = run_cli(tmp_path, "run", "-o", "out.json", *target)
    assert proc.returncode == 0, proc.stderr
    _, events = slices(tmp_path / "out.json")
    main_tid = events[0]["tid"]
    roots = [e["name"] for e in events
             if e["tid"] == main_tid and e["args"]["Python parent id"] is None]
    # the program's module-level code is the outermost call, and the only one: no
    # call of the launcher's after it, nor the interpreter's exit with no thread
    # to wait for (its first line is 1, or on 3.9 the first line with code)
    module_code = f"prog.py({2 if sys.version_info < (3, 10) else 1}): <module>"
    assert events[0]["name"] == module_code
    assert roots == [module_code]
    assert not [e["name"] for e in events if any(w in e["name"] for w in LAUNCHER_WORDS)]
    names = [e["name"] for e in events]
    assert names.count("prog.py(4): child") == 2 and names.count("prog.py(7): main") == 1


def test_the_programs_own_runpy_calls_stay_in_the_trace(tmp_path):
    # runpy's code is hidden only where it launched the program (frames running
    # when tracing started), not where the program calls it itself.
    (tmp_path / "other.py").write_text("def hello():\n    return 1\n\nhello()\n")
    (tmp_path / "prog.py").write_text("import runpy\nrunpy.run_path('other.py')\n")
    proc = run_cli(tmp_path, "run", "-o", "out.json", "-m", "prog")
    assert proc.returncode == 0, proc.stderr
    _, events = slices(tmp_path / "out.json")
    by_id = {e["args"]["Python id"]: e for e in events}
    [hello] = [e for e in events if e["name"] == "other.py(1): hello"]
    chain = []
    while hello["args"]["Python parent id"] is not None:
        hello = by_id[hello["args"]["Python parent id"]]
        chain.append(hello["name"].rsplit(": ", 1)[-1])
    assert chain == ["<module>", "builtins.exec", "_run_code", "_run_module_code", "run_path",
                     "<module>"]
    assert events[0]["name"] == "prog.py(1): <module>"


BAD_SCRIPT = textwrap.dedent("""
    import sys

    def inner(n):
        return {}[n]

    def outer():
        try:
            inner("key")
        except KeyError as exc:
            raise ValueError("outer failed") from exc

    if __name__ == "__main__":
        print("main", __name__, __file__, sys.argv)
        outer()
""")


@pytest.mark.parametrize("how", ["script", "module"])
def test_tracebacks_look_as_under_plain_python(tmp_path, how):
    (tmp_path / "bad.py").write_text(BAD_SCRIPT)
    target = ["bad.py", "x"] if how == "script" else ["-m", "bad", "x"]
    plain = subprocess.run([sys.executable, *target], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    traced = run_cli(tmp_path, "run", "-o", "out.json", *target)
    assert traced.returncode == plain.returncode == 1
    assert traced.stdout == plain.stdout
    ours = [line for line in traced.stderr.splitlines() if not line.startswith("pytrace_cffi:")]
    theirs = plain.stderr.splitlines()
    # (python -m's runpy frames too, at runpy's lines: cli/program.with_runpy_frames)
    assert ours == theirs
    assert ("runpy" in plain.stderr) == (how == "module")
    assert "pytrace_cffi" not in "\n".join(ours)
    assert f'File "{tmp_path / "bad.py"}", line 15, in <module>' in traced.stderr


WARNING_SCRIPT = textwrap.dedent("""
    import sys, warnings

    def leak():
        open(__file__)          # a ResourceWarning (shown with -W default)

    def rec(n):
        return rec(n - 1) if n else 0

    warnings.warn("the program's own")
    warnings.warn("deprecated here", DeprecationWarning)
    leak()
    rec(600)                    # deeper than Perfetto shows: our TraceWarning
    if sys.argv[1:] == ["lose"]:                # our hook taken: our TraceWarning
        if hasattr(sys, "monitoring"):          # 3.12+: our tool's events switched off
            for tool in range(6):
                if sys.monitoring.get_tool(tool) == "pytrace_cffi":
                    sys.monitoring.set_events(tool, 0)
        else:                                   # 3.9-3.11: the profile hook removed
            sys.setprofile(None)
        rec(3)
""")


@pytest.mark.parametrize("lose", [False, True])
def test_the_programs_warnings_print_as_under_python_and_ours_in_one_line(tmp_path, lose):
    (tmp_path / "warns.py").write_text(WARNING_SCRIPT)
    argv = ["warns.py"] + (["lose"] if lose else [])
    plain = subprocess.run([sys.executable, "-W", "default", *argv], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert "warns.py:10: UserWarning: the program's own" in plain.stderr
    assert "Enable tracemalloc to get the object allocation traceback" in plain.stderr
    traced = subprocess.run([sys.executable, "-W", "default", "-m", "pytrace_cffi", "run",
                             "-o", "out.pftrace", *argv], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout
    ours = [line for line in traced.stderr.splitlines() if line.startswith("pytrace_cffi:")]
    theirs = [line for line in traced.stderr.splitlines() if line not in ours]
    expected = plain.stderr.splitlines()
    assert theirs[:len(expected)] == expected
    # a hook loss's message goes on in lines of its own: where it went and when
    more = theirs[len(expected):]
    assert all(line.startswith("  ") for line in more[:-1]) and len(more) == 2 * lose
    assert more[-1:] == (["(times in ms after start(); details in the trace's hook_lost)"]
                         if lose else [])
    assert ("pytrace_cffi: calls nest 602 deep; Perfetto shows only the outer 512 levels. "
            "Trace with --max-depth 512 to keep the export within them") in ours
    assert any(line.startswith("pytrace_cffi: lost its hook to other code while tracing")
               for line in ours) == lose
    assert "TraceWarning" not in traced.stderr and "max_depth" not in traced.stderr


def test_a_syntax_error_looks_as_under_plain_python(tmp_path):
    (tmp_path / "broken.py").write_text("x = 1\ndef f(:\n    pass\n")
    plain = subprocess.run([sys.executable, "broken.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    traced = run_cli(tmp_path, "run", "-o", "out.json", "broken.py")
    assert traced.returncode == plain.returncode == 1
    assert traced.stderr == plain.stderr and "SyntaxError" in traced.stderr
    assert not (tmp_path / "out.json").exists()


MAIN_SEMANTICS = textwrap.dedent("""
    import multiprocessing, pickle, sys

    class Point:
        def __init__(self, x):
            self.x = x

    def square(p):
        return p.x * p.x

    if __name__ == "__main__":
        main = sys.modules["__main__"]
        assert main.Point is Point and main.square is square
        assert pickle.loads(pickle.dumps(Point(3))).x == 3
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            print("squares", pool.map(square, [Point(2), Point(5)]))
        print("spec", __spec__ and __spec__.name, "file", __file__)
""")


@pytest.mark.parametrize("how", ["script", "module"])
def test_main_module_semantics_and_spawn_pickling(tmp_path, how):
    (tmp_path / "mp.py").write_text(MAIN_SEMANTICS)
    target = ["mp.py"] if how == "script" else ["-m", "mp"]
    proc = run_cli(tmp_path, "run", "-o", "out.json", "--no-c-calls", *target)
    assert proc.returncode == 0, proc.stderr
    assert "squares [4, 25]" in proc.stdout
    spec = "mp" if how == "module" else "None"
    assert f"spec {spec} file {tmp_path / 'mp.py'}" in proc.stdout


def test_demo_docstring_gives_the_readme_command():
    import os
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme_command = re.search(r"```bash\n(.*?)\s+#", f.read()).group(1)
    assert readme_command.startswith("pip install . && cd examples && python -m pytrace_cffi")
    with open(os.path.join(root, "examples", "demo.py"), encoding="utf-8") as f:
        docstring = f.read().split('"""')[1]
    assert readme_command in [line.strip() for line in docstring.splitlines()]


def launcher(then):
    return then()


def test_launcher_code_is_left_out_only_where_it_was_running_at_start(tmp_path):
    # What `run` relies on, in memory and through a spilled trace (hide value 3):
    # the launcher's frame below the traced code goes, its later calls stay.
    import pytrace_cffi
    from pytrace_cffi._hiding import hide_launcher_frames

    def work():
        return launcher(lambda: len("x"))

    def traced(**options):
        pytrace_cffi.start(**options)
        work()
        return pytrace_cffi.stop()

    hide_launcher_frames([launcher.__code__])
    try:
        in_memory = launcher(traced)
        spilled = launcher(lambda: traced(max_events=64, output=tmp_path / "spill"))
    finally:
        hide_launcher_frames([])
    for trace in (in_memory, pytrace_cffi.load(tmp_path / "spill")):
        calls = list(trace)
        by_id = {c.id: c for c in calls}
        shown = [c for c in calls if c.name.endswith(": launcher")]
        assert len(shown) == 1
        assert by_id[shown[0].parent].name.endswith(": work")
        [call] = [c for c in calls if c.name.endswith(": traced")]
        ancestors = []
        while call.parent is not None:
            call = by_id[call.parent]
            ancestors.append(call.name.rsplit(": ", 1)[-1])
        assert "launcher" not in ancestors
        assert "test_launcher_code_is_left_out_only_where_it_was_running_at_start" in ancestors
    assert isinstance(spilled, pytrace_cffi.SpilledTrace)


def test_the_default_output_is_a_pftrace(tmp_path):
    """Without -o, run writes trace.pftrace (compact, encoded while the program runs:
    a big program's JSON ran to gigabytes), which load reads back."""
    (tmp_path / "prog.py").write_text("def unique_f():\n    pass\nfor _ in range(7):\n"
                                      "    unique_f()\n")
    proc = run_cli(tmp_path, "run", "prog.py")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.py", "trace.pftrace"]
    trace = pytrace_cffi.load(tmp_path / "trace.pftrace")
    assert sum(1 for call in trace if call.name.endswith(": unique_f")) == 7


def test_a_big_json_is_told_of_the_pftrace(tmp_path):
    """A Chrome JSON over 200 MB written: one line with its size and the command
    that makes the .pftrace of it; a smaller one, a .json.gz or a .pftrace: none."""
    import io
    from pytrace_cffi import _progress
    big, small = tmp_path / "big.json", tmp_path / "small.json"
    with open(big, "wb") as f:
        f.truncate(300_000_000)         # sparse: its size is all that counts
    small.write_text("{}")
    said = io.StringIO()
    _progress.suggest_smaller(str(big), said)
    assert said.getvalue() == (
        f"pytrace_cffi: {big} is 300.0 MB of JSON; as .pftrace (Perfetto's own format) the "
        f"same trace is some 20 to 80 times smaller: python -m pytrace_cffi export {big} -o "
        f"{tmp_path / 'big.pftrace'}\n")
    quiet = io.StringIO()
    for path in (small, tmp_path / "big.pftrace", tmp_path / "big.json.gz"):
        if not path.exists():
            os.link(big, path)
        _progress.suggest_smaller(str(path), quiet)
    assert quiet.getvalue() == ""
