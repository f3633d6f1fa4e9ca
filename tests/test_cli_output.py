"""Where a trace goes when its output cannot be written: refused before the program
runs (exit code 2), or saved elsewhere when writing fails at the end; API errors
name the path given, never the temporary file written first.

Tests run as root here, where a chmod-ed directory stays writable: the failures are
provoked with paths under a regular file, missing directories and /proc."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import pytrace_cffi

PROGRAM = textwrap.dedent("""
    import shutil, sys

    def work():
        return sorted(str(i) for i in range(50))

    open("ran", "w").close()                # shows the program ran
    work()
    if len(sys.argv) > 1:
        shutil.rmtree(sys.argv[1])          # the output's directory goes away,
        open(sys.argv[1], "w").close()      # a file in its place (save() would remake it)
""")


def run_cli(cwd, *args, env=None):
    return subprocess.run([sys.executable, "-m", "pytrace_cffi", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env=None if env is None else {**os.environ, **env})


@pytest.fixture
def prog(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "afile").write_text("a regular file")
    return tmp_path


@pytest.mark.parametrize("out, reason", [
    ("afile/out.json", "is not a directory"),
    ("afile/out.html", "is not a directory"),
    ("nodir/out.json.gz", "does not exist"),
    ("afile/sub/saved", "is not a directory"),        # a saved-trace directory
    ("afile", "it is a file"),
    ("existing_dir.json", "it is a directory"),
    ("/proc/pytrace_cffi_out.json", ""),
    ("/proc/pytrace_cffi_saved", ""),
    ("", "the name is empty"),                        # -o "$OUT" with OUT unset
    ("  ", "the name is empty"),
])
def test_unwritable_output_is_refused_before_the_program_runs(prog, out, reason):
    if out.startswith("/proc") and not os.path.isdir("/proc/self"):
        pytest.skip("needs Linux /proc")
    (prog / "existing_dir.json").mkdir()
    proc = run_cli(prog, "run", "-o", out, "prog.py")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"pytrace_cffi: cannot write trace to {out!r}: ")
    assert reason in lines[0]
    assert ".tmp" not in proc.stderr
    assert not (prog / "ran").exists()


@pytest.mark.parametrize("out", ["out/t.json", "out/t.pftrace", "out/saved"])
def test_a_relative_output_is_where_it_named_when_the_run_began(prog, out):
    """The program changes its working directory: OUT still goes where it named
    when `run` began (as --processes-dir does), and the line says where."""
    (prog / "out").mkdir()
    (prog / "elsewhere").mkdir()
    (prog / "moves.py").write_text("import os\nos.chdir('elsewhere')\n"
                                   "def work():\n    return 1\nwork()\n")
    proc = run_cli(prog, "run", "-o", out, "moves.py")
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(prog / "elsewhere") == []
    trace = pytrace_cffi.load(prog / out)
    assert sum(call.name.endswith(": work") for call in trace) == 1
    assert f"-> {prog / out}" in proc.stderr


@pytest.mark.parametrize("out", ["gone/out.json", "gone/out.html", "gone/saved"])
def test_a_write_failing_at_the_end_saves_the_trace_elsewhere(prog, out):
    (prog / "gone").mkdir()
    fallback_dir = prog / "tmp"
    fallback_dir.mkdir()
    proc = run_cli(prog, "run", "-o", out, "prog.py", "gone", env={"TMPDIR": str(fallback_dir)})
    assert proc.returncode == 0, proc.stderr
    assert (prog / "ran").exists() and (prog / "gone").is_file()
    assert "Traceback" not in proc.stderr and ".tmp" not in proc.stderr.replace(
        str(fallback_dir), "")
    [saved] = list(fallback_dir.iterdir())
    assert saved.name.startswith("pytrace_cffi-") and saved.name.endswith(os.path.basename(out))
    said = [line for line in proc.stderr.splitlines() if "cannot write" in line]
    assert said == [f"pytrace_cffi: cannot write trace to {str(prog / out)!r}: Not a directory; "
                    f"saved it to {str(saved)!r} instead"]
    assert f"-> {saved}" in proc.stderr
    if out.endswith(".json"):
        names = [e["name"] for e in json.loads(saved.read_text())["traceEvents"]]
    elif out.endswith(".html"):
        names = [saved.read_text()]
    else:
        names = [call.name for call in pytrace_cffi.load(saved)]
    assert any("prog.py(4): work" in name for name in names)


def small_trace():
    with pytrace_cffi.trace() as t:
        sorted(str(i) for i in range(10))
    return t.trace


@pytest.mark.parametrize("write", [
    lambda trace, path: trace.export_chrome_trace(path),
    lambda trace, path: trace.export_chrome_trace(str(path) + ".gz"),
    lambda trace, path: __import__("pytrace_cffi.render.html").render.html.write_html(trace, path),
], ids=["json", "json.gz", "html"])
def test_api_errors_name_the_path_given_not_the_temporary_file(tmp_path, write):
    trace = small_trace()
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "afile" / "out.json"
    with pytest.raises(NotADirectoryError) as info:
        write(trace, target)
    assert str(target) in str(info.value) and ".tmp" not in str(info.value)
    assert info.value.filename.startswith(str(target))
    assert info.value.__cause__ is None and info.value.__suppress_context__
    # the rename onto an existing directory fails about that directory too
    (tmp_path / "adir.json").mkdir()
    with pytest.raises(IsADirectoryError) as info:
        trace.export_chrome_trace(tmp_path / "adir.json")
    assert info.value.filename == str(tmp_path / "adir.json")
    assert ".tmp" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir.json", "afile"]
    # the trace is untouched: a retry elsewhere works
    trace.export_chrome_trace(tmp_path / "ok.json")
    assert json.loads((tmp_path / "ok.json").read_text())["traceEvents"]


def test_save_errors_name_the_path_given(tmp_path):
    trace = small_trace()
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "meta.json").mkdir()        # the last file save() writes
    with pytest.raises(IsADirectoryError) as info:
        trace.save(tmp_path / "saved")
    assert info.value.filename == str(tmp_path / "saved" / "meta.json")
    assert ".tmp" not in str(info.value)


def test_export_to_an_unwritable_output_fails_in_one_line(prog):
    proc = run_cli(prog, "run", "-o", "saved", "prog.py")
    assert proc.returncode == 0, proc.stderr
    for out in ("afile/x.json", "afile"):
        proc = run_cli(prog, "export", "saved", "-o", out)
        assert proc.returncode == 2
        assert proc.stderr.startswith(f"pytrace_cffi: cannot write trace to {out!r}: ")
        assert len(proc.stderr.splitlines()) == 1 and ".tmp" not in proc.stderr


# --- which format a name picks (pytrace_cffi/formats.py, the one place) ----------

@pytest.mark.parametrize("name, expected", [
    ("out.json", "json"), ("out.JSON", "json"), ("a/b.c/out.Json", "json"),
    ("out.json.gz", "json.gz"), ("out.JSON.GZ", "json.gz"), ("x.Json.Gz", "json.gz"),
    ("out.pftrace", "pftrace"), ("OUT.PFTRACE", "pftrace"), ("t.perfetto-trace", "pftrace"),
    ("t.Perfetto-Trace", "pftrace"), ("page.html", "html"), ("PAGE.HTML", "html"),
    ("saved", "directory"), ("saved/", "directory"), ("v1.2/", "directory"),
    ("some.dir/saved", "directory"), (".hidden", "directory"),
])
def test_a_name_picks_its_format_by_the_longest_suffix_in_any_case(name, expected):
    from pytrace_cffi import formats
    assert formats.format_of(name).name == expected


@pytest.mark.parametrize("name", ["out.txt", "out.pb", "out.tar.gz", "out.gz", "v1.2",
                                  "out.json.bak", "out.htm"])
def test_a_name_of_no_format_is_refused_with_the_formats(name):
    from pytrace_cffi import formats
    with pytest.raises(ValueError) as info:
        formats.format_of(name)
    for listed in (".json", ".json.gz", ".pftrace", ".perfetto-trace", ".html", "directory"):
        assert listed in str(info.value)


@pytest.mark.parametrize("name, number, expected", [
    ("out.json", 1, "out.1.json"), ("out.JSON.GZ", 2, "out.2.JSON.GZ"),
    ("t.perfetto-trace", 3, "t.3.perfetto-trace"), ("t.Html", 1, "t.1.Html"),
    ("saved", 2, "saved.2" + os.sep), ("v1.2" + os.sep, 1, "v1.2.1" + os.sep),
])
def test_numbered_windows_keep_the_format(name, number, expected):
    from pytrace_cffi import formats
    assert formats.numbered(name, number) == expected


def read_json_file(path):
    import gzip
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


@pytest.mark.parametrize("out, compressed", [("out.JSON", False), ("out.Json.GZ", True)])
def test_json_names_in_any_case_are_json_files(prog, out, compressed):
    proc = run_cli(prog, "run", "-o", out, "prog.py")
    assert proc.returncode == 0, proc.stderr
    with open(prog / out, "rb") as f:
        assert (f.read(2) == b"\x1f\x8b") == compressed
    names = [e["name"] for e in read_json_file(prog / out)["traceEvents"]]
    assert any(name.endswith("prog.py(4): work") for name in names)
    # read back by name too, as summary and export read it
    proc = run_cli(prog, "summary", out, "--limit", "0")    # (its imports may cost more)
    assert proc.returncode == 0 and "prog.py(4): work" in proc.stdout, proc.stderr


@pytest.mark.parametrize("out", ["out.perfetto-trace", "OUT.PFTRACE"])
def test_perfetto_trace_is_pftrace(prog, out):
    proc = run_cli(prog, "run", "-o", out, "prog.py")
    assert proc.returncode == 0, proc.stderr
    assert (prog / out).is_file()
    with open(prog / out, "rb") as f:
        head = f.read(1)
    assert head == b"\x0a"          # field 1 (Trace.packet), length-delimited


@pytest.mark.parametrize("out", ["out.txt", "out.pb", "out.tar.gz", "results.v2"])
@pytest.mark.parametrize("command", ["run", "export", "merge"])
def test_an_unknown_suffix_is_refused_before_anything_runs(prog, out, command):
    saved = prog / "saved"
    if command != "run":
        assert run_cli(prog, "run", "-o", saved, "prog.py").returncode == 0
        (prog / "ran").unlink()
    args = {"run": ["run", "-o", out, "prog.py"], "export": ["export", saved, "-o", out],
            "merge": ["merge", saved, "-o", out]}[command]
    proc = run_cli(prog, *args)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"pytrace_cffi: cannot write trace to {out!r}: ")
    for listed in (".json", ".json.gz", ".pftrace", ".perfetto-trace", ".html",
                   "a name without a suffix"):
        assert listed in line
    assert not (prog / out).exists() and not (prog / "ran").exists()


@pytest.mark.parametrize("command", ["run", "export", "merge"])
def test_a_directory_of_other_files_is_refused(prog, command):
    saved = prog / "saved"
    if command != "run":
        assert run_cli(prog, "run", "-o", saved, "prog.py").returncode == 0
        (prog / "ran").unlink()
    mine = prog / "mydata"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    args = {"run": ["run", "-o", "mydata", "prog.py"], "export": ["export", saved, "-o", "mydata"],
            "merge": ["merge", saved, "-o", "mydata"]}[command]
    proc = run_cli(prog, *args)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("pytrace_cffi: cannot write trace to 'mydata': ")
    assert "not a saved trace" in line
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert not (prog / "ran").exists()


def test_an_empty_directory_or_an_earlier_saved_trace_takes_a_saved_trace(prog):
    (prog / "empty").mkdir()
    for out in ("empty", "empty", "fresh" + os.sep):      # the second run: over a trace
        proc = run_cli(prog, "run", "-o", out, "prog.py")
        assert proc.returncode == 0, proc.stderr
        names = [call.name for call in pytrace_cffi.load(prog / out)]
        assert any(name.endswith("prog.py(4): work") for name in names)


def test_a_directory_of_other_files_found_at_the_end_is_not_written_into(prog):
    """A directory that fills with the user's files while the program runs (here
    the program makes it) is no place for the trace either: it goes elsewhere,
    and the line says so."""
    fallback_dir = prog / "tmp"
    fallback_dir.mkdir()
    (prog / "make_mine.py").write_text("import os\nos.mkdir('mine')\n"
                                       "open('mine/notes.txt', 'w').close()\n")
    proc = run_cli(prog, "run", "-o", "mine", "make_mine.py", env={"TMPDIR": str(fallback_dir)})
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (prog / "mine").iterdir()) == ["notes.txt"]
    [saved] = list(fallback_dir.iterdir())
    assert saved.name.endswith("-mine") and (saved / "meta.json").is_file()
    assert f"saved it to {str(saved)!r} instead" in proc.stderr
