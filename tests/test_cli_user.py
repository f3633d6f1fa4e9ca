"""python -m pytrace_cffi summary / export, run -o by format, progress on terminals."""
import io
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import pytrace_cffi
from pytrace_cffi._progress import PROGRESS_MIN_SLICES, Progress

SCRIPT = textwrap.dedent("""
    import sys, threading

    def leaf(n):
        return n * 2

    def branch(n):
        return [leaf(i) for i in range(n)]

    def main():
        worker = threading.Thread(target=branch, args=(7,), name="user-worker")
        worker.start()
        branch(5)
        worker.join()
        open(sys.argv[1], "w").close()          # shows the program ran
        sys.exit(int(sys.argv[2]))

    main()
""")


def cli(*args):
    return [sys.executable, "-m", "pytrace_cffi", *map(str, args)]


def run_cli(cwd, *args):
    return subprocess.run(cli(*args), cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(SCRIPT)
    return path


@pytest.fixture
def saved(tmp_path, script):
    """A traced run of SCRIPT as a saved-trace directory."""
    out = tmp_path / "saved"
    proc = run_cli(tmp_path, "run", "-o", out, script, tmp_path / "ran", 0)
    assert proc.returncode == 0, proc.stderr
    return out


def function_names(trace):
    return [call.name.rsplit(": ", 1)[-1] for call in trace]


@pytest.mark.parametrize("out", ["trace.html", "saved_dir", "saved_dir" + os.sep])
def test_run_writes_the_format_its_output_names(tmp_path, script, out):
    proc = run_cli(tmp_path, "run", "-o", out, script, tmp_path / "ran", 3)
    assert proc.returncode == 3, proc.stderr          # the program's exit code stays
    assert (tmp_path / "ran").exists()
    path = tmp_path / out
    if out.endswith(".html"):
        text = path.read_text(encoding="utf-8")
        assert text.startswith("<!DOCTYPE html>") and "prog.py(4): leaf" in text
    else:
        names = function_names(pytrace_cffi.load(path))
        assert names.count("leaf") == 12 and names.count("branch") == 2
    # the line names OUT as it was when the run began (the program may chdir)
    assert f"-> {path}" in proc.stderr


def test_run_refuses_a_file_where_a_directory_would_go(tmp_path, script):
    (tmp_path / "notes").write_text("keep me")
    proc = run_cli(tmp_path, "run", "-o", "notes", script, tmp_path / "ran", 0)
    assert proc.returncode != 0 and "is a file" in proc.stderr
    assert not (tmp_path / "ran").exists()             # refused before running
    assert (tmp_path / "notes").read_text() == "keep me"


def summary_rows(stdout):
    """{function: (calls, total ms, self ms)} from the printed table."""
    rows = {}
    for line in stdout.splitlines()[3:]:
        match = re.match(r"\s*(\d+)\s+(\d+\.\d{3})\s+(\d+\.\d{3})\s+(.+)$", line)
        if match:
            rows[match.group(4)] = (int(match.group(1)), float(match.group(2)),
                                    float(match.group(3)))
    return rows


@pytest.mark.parametrize("form", ["dir", "json", "json.gz"])
def test_summary_reads_every_form(tmp_path, saved, form):
    source = saved
    if form != "dir":
        source = tmp_path / f"trace.{form}"
        assert run_cli(tmp_path, "export", saved, "-o", source).returncode == 0
    proc = run_cli(tmp_path, "summary", source, "--limit", "0")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{source}: ") and "calls on 2 threads" in lines[0]
    assert lines[1].split() == ["calls", "total", "ms", "self", "ms", "function"]
    rows = summary_rows(proc.stdout)
    assert rows["prog.py(4): leaf"][0] == 12
    assert rows["prog.py(7): branch"][0] == 2
    assert rows["prog.py(10): main"][0] == 1
    main = rows["prog.py(10): main"]
    assert main[2] <= main[1]


def test_summary_sort_limit_and_per_thread(tmp_path, saved):
    everything = summary_rows(run_cli(tmp_path, "summary", saved, "--sort", "calls",
                                      "--limit", "0").stdout)
    calls = [row[0] for row in everything.values()]
    assert calls == sorted(calls, reverse=True) and len(calls) > 3
    proc = run_cli(tmp_path, "summary", saved, "--sort", "calls", "--limit", "3")
    assert proc.returncode == 0, proc.stderr
    assert list(summary_rows(proc.stdout)) == list(everything)[:3]
    proc = run_cli(tmp_path, "summary", saved, "--per-thread", "--sort", "name", "--limit", "0")
    lines = proc.stdout.splitlines()
    assert lines[1].split()[-2:] == ["thread", "function"]
    leaf_lines = [line.split() for line in lines if line.endswith("leaf")]
    assert sorted((fields[3], fields[0]) for fields in leaf_lines) == [
        ("MainThread", "5"), ("user-worker", "7")]
    names = [line.split(None, 4)[-1] for line in lines[3:] if line and "MainThread" in line]
    assert names == sorted(names)
    assert run_cli(tmp_path, "summary", saved, "--sort", "fastest").returncode == 2
    assert run_cli(tmp_path, "summary", saved, "--limit", "-1").returncode == 2


def test_summary_of_a_bad_file_fails_clearly(tmp_path):
    (tmp_path / "bad.json").write_text("{oops")
    proc = run_cli(tmp_path, "summary", "bad.json")
    assert proc.returncode == 1
    assert proc.stderr.startswith("pytrace_cffi: bad.json: not valid JSON")
    assert "Traceback" not in proc.stderr


def test_export_converts_between_all_formats(tmp_path, saved):
    original = pytrace_cffi.load(saved)
    steps = [(saved, "a.json.gz"), ("a.json.gz", "b.json"), ("b.json", "c_dir"),
             ("c_dir", "d.html")]
    for source, out in steps:
        proc = run_cli(tmp_path, "export", source, "-o", out)
        assert proc.returncode == 0, proc.stderr
        assert f"{len(original):,} calls on 2 threads -> {out}" in proc.stderr
    assert list(pytrace_cffi.load(tmp_path / "c_dir")) == list(original)
    page = (tmp_path / "d.html").read_text(encoding="utf-8")
    data = re.search(r'id="pt-meta">(.*?)</script>', page, re.S).group(1)
    assert json.loads(data)["calls"] == len(original)


def test_export_needs_an_output_and_a_readable_source(tmp_path, saved):
    assert run_cli(tmp_path, "export", saved).returncode == 2
    proc = run_cli(tmp_path, "export", "missing_dir", "-o", "x.json")
    assert proc.returncode == 1 and "does not exist" in proc.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("command, words", [
    ("run", [".json.gz", ".html", "directory", "exit code", "(SCRIPT | -m MODULE) [ARGS ...]",
             "everything after them is the program's", "exit code 2"]),
    ("summary", ["--sort", "--limit", "--per-thread", "self time", "recursive"]),
    ("export", ["DIR_OR_JSON", ".html", "directory"]),
])
def test_help_texts(tmp_path, command, words):
    proc = run_cli(tmp_path, command, "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for word in words:
        assert word in text, word


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("stream, total, shown", [
    (Terminal(), PROGRESS_MIN_SLICES * 2, True),
    (Terminal(), 1000, False),                          # too small to be worth it
    (io.StringIO(), PROGRESS_MIN_SLICES * 2, False),    # not a terminal
])
def test_progress_only_for_big_jobs_on_terminals(stream, total, shown):
    with Progress("writing x", total, stream=stream) as progress:
        for _ in range(4):
            progress.advance(total // 4)
    text = stream.getvalue()
    if shown:
        assert text == "\rwriting x: 25%\rwriting x: 50%\rwriting x: 75%\rwriting x: 100%\n"
    else:
        assert text == ""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_export_of_a_big_trace_shows_progress_on_a_terminal_only(tmp_path):
    from pytrace_cffi._core import ffi
    from pytrace_cffi.model.saved_format import SLICE_RECORD
    from pytrace_cffi.model.trace import ThreadInfo, Trace
    count = PROGRESS_MIN_SLICES + 1
    slices = ffi.new("pt_slice[]", count)
    root = SLICE_RECORD.pack(0, 0, 0, 0, -1, 0, 0)      # start, end, key, flags, parent, ...
    ffi.memmove(slices, root * count, len(root) * count)
    Trace(names=["<unknown>"], key_kinds=["python"], key_args={},
          threads=[ThreadInfo(0, 1, 1, "MainThread", 0, 0)], slices=[(slices, count)],
          start_ns=0, stop_ns=0, pid=1, python_version="3", backend="test",
          clock="monotonic", params={"modules": [], "optimizer_steps": []}).save(tmp_path / "big")
    controller, terminal = os.openpty()
    try:
        proc = subprocess.Popen(cli("export", "big", "-o", "big.html"), cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=terminal)
        os.close(terminal)                   # the child holds the terminal now
        shown = read_all(controller)         # until the child exits
    finally:
        os.close(controller)
    assert proc.wait(timeout=120) == 0
    # Over a million calls the page is reduced, and summarized in C: both take
    # well under a second, so they show no steps in between.
    assert "\rwriting big.html: 100%\r\n" in shown
    piped = run_cli(tmp_path, "export", "big", "-o", "big2.html")
    assert "%" not in piped.stderr


def read_all(fd):
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:           # Linux: EIO once the other end is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_summary_into_a_closed_pipe_is_silent(tmp_path, saved):
    """`summary ... | head`: the reader goes away before the table is written;
    as Python's own tools, no "Broken pipe" message and no traceback, exit 1."""
    proc = subprocess.Popen(cli("summary", saved, "--limit", "0"), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                     # before the program writes anything
    _, errors = proc.communicate(timeout=120)
    assert errors.decode() == ""
    assert proc.returncode == 1


def test_counts_are_said_in_the_singular_for_one(tmp_path):
    (tmp_path / "one.py").write_text("def only():\n    pass\n")
    proc = run_cli(tmp_path, "run", "--no-c-calls", "--no-follow", "-o", "one.json", "one.py")
    assert proc.returncode == 0, proc.stderr
    out = re.escape(str(tmp_path / "one.json"))      # (where it was when the run began)
    assert re.fullmatch(rf"pytrace_cffi: writing {out} \.\.\.\n"
                        rf"pytrace_cffi: 1 call on 1 thread -> {out} \(\d+ bytes, \d+\.\d\d s\)\n",
                        proc.stderr), proc.stderr
    proc = run_cli(tmp_path, "summary", "one.json")
    assert proc.stdout.startswith("one.json: 1 call on 1 thread, "), proc.stdout
    proc = run_cli(tmp_path, "export", "one.json", "-o", "one.html")
    assert proc.stderr == "pytrace_cffi: 1 call on 1 thread -> one.html\n"
    assert repr(pytrace_cffi.load(_saved_copy(tmp_path))).startswith(
        "<pytrace_cffi.Trace 1 call, 1 thread, ")


def _saved_copy(tmp_path):
    assert run_cli(tmp_path, "export", "one.json", "-o", "one_dir").returncode == 0
    return tmp_path / "one_dir"


def test_a_directory_or_zip_with_main_runs_as_python_runs_it(tmp_path):
    """python DIR and python APP.zip run the __main__.py inside (sys.path[0] the
    path, argv[0] as given, __file__ and __spec__ from its importer): so does run,
    which traces it; one without __main__ exits as python does."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text(textwrap.dedent("""
        import sys
        def unique_main():
            return 1
        unique_main()
        print(sys.argv, sys.path[0], __file__, repr(__package__), __spec__.name,
              type(__loader__).__name__, __name__,
                  globals().get("__cached__", "no __cached__"))    # 3.15 sets none
        sys.exit(3)
    """))
    import zipfile
    with zipfile.ZipFile(tmp_path / "app.zip", "w") as z:
        z.write(app / "__main__.py", "__main__.py")
    (tmp_path / "empty").mkdir()
    for target in ("app", "app.zip"):
        plain = subprocess.run([sys.executable, target, "a1"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=60)
        out = f"{target}.json"
        proc = run_cli(tmp_path, "run", "-o", out, target, "a1")
        assert (proc.returncode, proc.stdout) == (plain.returncode, plain.stdout) == \
            (3, plain.stdout), proc.stderr
        assert plain.stdout.startswith(f"['{target}', 'a1'] {tmp_path / target} "
                                       f"{tmp_path / target / '__main__.py'} '' __main__ ")
        from pytrace_cffi.reading import read_trace
        trace = read_trace(str(tmp_path / out))
        assert [c.name for c in trace if c.name.endswith(": unique_main")] == \
            ["__main__.py(3): unique_main"]
        assert trace.label == target
    proc = run_cli(tmp_path, "run", "-o", "empty.json", "empty")
    plain = subprocess.run([sys.executable, "empty"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert proc.returncode == plain.returncode == 1
    where = os.path.join(os.path.realpath(tmp_path), "empty")
    assert proc.stderr == f"pytrace_cffi: can't find '__main__' module in {where!r}\n"
    assert f"can't find '__main__' module in {where!r}" in plain.stderr
    assert not (tmp_path / "empty.json").exists()


def test_a_missing_script_is_said_and_exits_as_python_does(tmp_path):
    proc = run_cli(tmp_path, "run", "-o", "x.json", "missing.py")
    plain = subprocess.run([sys.executable, "missing.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert proc.returncode == plain.returncode == 2
    path = os.path.join(os.path.realpath(tmp_path), "missing.py")
    assert proc.stderr == (f"pytrace_cffi: can't open file {path!r}: [Errno 2] No such file "
                           "or directory\n")
    assert "can't open file" in plain.stderr and "[Errno 2]" in plain.stderr
    assert not (tmp_path / "x.json").exists()


def test_the_programs_module_globals_are_pythons(tmp_path):
    """The names a script's module starts with are those python gives it
    (__annotations__ up to 3.13: python's __main__ has one, and a program reading
    it got NameError under run), as a script and as -m."""
    (tmp_path / "prog.py").write_text(
        "print(sorted(name for name in globals() if name != 'name'), "
        "globals().get('__annotations__', 'none'))\n")
    for how in (["prog.py"], ["-m", "prog"]):
        plain = subprocess.run([sys.executable, *how], cwd=tmp_path, capture_output=True,
                               text=True, timeout=60)
        traced = run_cli(tmp_path, "run", "-o", "out.json", *how)
        assert plain.returncode == traced.returncode == 0, traced.stderr
        assert traced.stdout == plain.stdout


@pytest.mark.parametrize("how", ["script", "-m", "directory", "zip", "ctrl-c -m"])
def test_an_uncaught_exceptions_traceback_is_pythons(tmp_path, how):
    """The program's uncaught exception (a Ctrl-C too) is printed as python
    prints it: a module python runs by runpy (-m, a directory, a zip) has
    runpy's two frames below it (_run_module_as_main, _run_code, at runpy's
    lines); they were missing, so every traced torchrun failure read otherwise."""
    import zipfile
    raised = "KeyboardInterrupt" if how.startswith("ctrl-c") else "ValueError('boom')"
    source = f"def fails():\n    raise {raised}\nfails()\n"
    (tmp_path / "prog.py").write_text(source)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text(source)
    with zipfile.ZipFile(tmp_path / "app.zip", "w") as z:
        z.writestr("__main__.py", source)
    target = {"script": ["prog.py"], "-m": ["-m", "prog"], "directory": ["app"],
              "zip": ["app.zip"], "ctrl-c -m": ["-m", "prog"]}[how]
    plain = subprocess.run([sys.executable, *target], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    traced = run_cli(tmp_path, "run", "-o", "out.json", *target)
    assert traced.returncode == plain.returncode != 0
    theirs = "".join(line for line in traced.stderr.splitlines(True)
                     if not line.startswith("pytrace_cffi:"))
    assert theirs == plain.stderr
    assert ("runpy" in plain.stderr) == (how != "script")


@pytest.mark.parametrize("out", ["out.json", "out.pftrace", "out.html", "saved"])
def test_record_params_says_which_outputs_keep_them(tmp_path, out):
    """Parameter metadata goes to a saved-trace directory's params.json only: for
    any other OUT, run says so before the program starts (it was dropped without
    a word)."""
    (tmp_path / "prog.py").write_text("print('ran')\n")
    proc = run_cli(tmp_path, "run", "--record-params", "-o", out, "prog.py")
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    said = "keeps no parameter metadata; a saved-trace directory does" in proc.stderr
    assert said == (out != "saved"), proc.stderr
