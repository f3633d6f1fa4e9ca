"""The Python API: lifecycle errors, options, the context manager, iteration."""
import os

import pytest

import pytrace_cffi
from pytrace_cffi import TracerStateError

from helpers import trimmed


def work():
    return sorted(str(i) for i in range(5))


def test_stop_without_start_raises_clearly():
    with pytest.raises(TracerStateError, match="not tracing"):
        pytrace_cffi.stop()


def test_second_start_raises_and_leaves_the_running_trace_unharmed():
    pytrace_cffi.start()
    work()
    with pytest.raises(TracerStateError, match="already tracing"):
        pytrace_cffi.start()
    work()
    trace = pytrace_cffi.stop()
    assert len([c for c in trace if c.name.endswith(": work")]) == 2
    assert not pytrace_cffi.is_tracing()


@pytest.mark.parametrize("options, error", [
    ({"c_calls": "yes"}, TypeError),
    ({"noop": 1}, TypeError),
    ({"colour": True}, TypeError),
])
def test_bad_options_raise_before_anything_starts(options, error):
    with pytest.raises(error):
        pytrace_cffi.start(**options)
    assert not pytrace_cffi.is_tracing()
    with pytest.raises(error):
        pytrace_cffi.trace(**options)


@pytest.mark.parametrize("function", [pytrace_cffi.start, pytrace_cffi.trace])
def test_unknown_option_names_the_public_function_and_the_closest_option(function):
    name = function.__name__
    with pytest.raises(TypeError) as raised:
        function(c_call=False)
    assert str(raised.value) == (f"{name}() got an unexpected keyword argument 'c_call'; "
                                 "did you mean 'c_calls'?")
    with pytest.raises(TypeError) as raised:
        function(maxdepth=3)
    assert str(raised.value).endswith("did you mean 'max_depth'?")
    with pytest.raises(TypeError) as raised:
        function(colour=True)
    assert str(raised.value) == f"{name}() got an unexpected keyword argument 'colour'"
    assert not pytrace_cffi.is_tracing()


def test_trace_suggests_its_own_arguments_too():
    with pytest.raises(TypeError, match=r"^trace\(\) .* 'schedul'; did you mean 'schedule'\?$"):
        pytrace_cffi.trace(schedul=None)


def test_dir_shows_the_public_api():
    import types
    public = [name for name in dir(pytrace_cffi) if not name.startswith("_")]
    stray = [name for name in public if name not in pytrace_cffi.__all__ and not (
        isinstance(getattr(pytrace_cffi, name), types.ModuleType)
        and getattr(pytrace_cffi, name).__name__ == f"pytrace_cffi.{name}")]
    assert stray == []
    assert set(pytrace_cffi.__all__) <= set(public)


def test_a_trace_warning_names_options_as_start_takes_them_and_the_cli_as_its_flags():
    from pytrace_cffi.cli.trace_warnings import cli_line
    warning = pytrace_cffi.TraceWarning(
        "pytrace_cffi kept {max_depth} levels; {max_events} dropped some, give {output}",
        options={"max_depth": 512, "max_events": None, "output": ""})
    assert str(warning) == ("pytrace_cffi kept max_depth=512 levels; max_events dropped some, "
                            "give output=")
    assert warning.args == (str(warning),)
    assert cli_line(warning) == ("pytrace_cffi: kept --max-depth 512 levels; --max-events "
                                 "dropped some, give --spill")
    plain = pytrace_cffi.TraceWarning("something {odd}")     # no options: as given
    assert str(plain) == "something {odd}" and cli_line(plain) == "pytrace_cffi: something {odd}"


def test_reading_the_trace_inside_the_block_raises_clearly():
    with pytrace_cffi.trace() as t:
        work()
        for read in (len, list, lambda t: t.threads):
            with pytest.raises(TracerStateError, match="once the with block ends"):
                read(t)
        # still an AttributeError for attribute reads, so defaults keep working
        with pytest.raises(AttributeError):
            t.threads
        assert getattr(t, "threads", None) is None
    assert len(t) == len(list(t)) > 0


def test_context_manager_leaves_the_trace_after_the_block():
    with pytrace_cffi.trace() as t:
        assert pytrace_cffi.is_tracing()
        work()
    assert not pytrace_cffi.is_tracing()
    assert isinstance(t.trace, pytrace_cffi.Trace)
    assert len(t) == len(t.trace) > 0
    assert t.threads == t.trace.threads


def test_context_manager_stops_on_exception():
    with pytest.raises(ZeroDivisionError):
        with pytrace_cffi.trace() as t:
            1 / 0
    assert not pytrace_cffi.is_tracing()
    assert t.trace is not None


def test_calls_carry_name_times_thread_parent_and_kind():
    import threading
    with pytrace_cffi.trace() as t:
        work()
    calls = list(t.trace)
    assert [c.id for c in calls] == list(range(len(calls)))
    (top,) = [c for c in calls if c.name.endswith(": work")]
    assert top.kind == "python"
    assert top.name == f"{trimmed(__file__)}({work.__code__.co_firstlineno}): work"
    assert top.thread == threading.get_native_id()
    children = [c for c in calls if c.parent == top.id]
    assert [c.name for c in children if c.kind == "c"] == ["builtins.sorted"]
    assert t.trace.start_ns <= top.start_ns <= top.end_ns <= t.trace.stop_ns
    assert t.trace.dropped_events == 0


def test_noop_mode_records_nothing():
    with pytrace_cffi.trace(noop=True) as t:
        work()
    assert len(t.trace) == 0


def test_many_start_stop_cycles():
    for _ in range(30):
        with pytrace_cffi.trace() as t:
            work()
        assert len([c for c in t.trace if c.name.endswith(": work")]) == 1


def test_names_are_stable_and_carry_no_addresses():
    import re
    import time

    class Box(list):
        pass

    with pytrace_cffi.trace() as t:
        b = Box()
        b.append(1)
        time.monotonic()
        "-".join(["a"])
    names = {c.name for c in t.trace if c.kind == "c"}
    assert {"time.monotonic", "str.join"} <= names
    assert "list.append" in names      # the class defining it: Box's, a local class's
    assert not [n for n in names if re.search(r"0x[0-9a-f]+", n)]


def test_the_modules_the_readme_api_names_import_as_written(tmp_path):
    """The API tables (the README's "From Python" and docs/API.md) name
    summary.summarize, html.write_html, processes.join...: each is
    `from pytrace_cffi import <module>` then <module>.<name>, as written there."""
    import os
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme, api_page = os.path.join(root, "README.md"), os.path.join(root, "docs", "API.md")
    if not (os.path.exists(readme) and os.path.exists(api_page)):
        pytest.skip("README.md and docs/API.md not beside the tests")
    with open(readme, encoding="utf-8") as f:
        api = f.read().split("\n## From Python", 1)[1].split("\n## ", 1)[0]
    with open(api_page, encoding="utf-8") as f:
        api += f.read()
    import pkgutil
    modules = {m.name for m in pkgutil.iter_modules(pytrace_cffi.__path__)} | {"render"}
    named = {(module, name) for module, name in re.findall(r"`([a-z]\w*)\.([a-z_]\w*)\(", api)
             if module in modules}
    assert {("summary", "summarize"), ("html", "write_html"), ("processes", "join")} <= named
    for module, name in sorted(named):
        scope = {}
        exec(f"from pytrace_cffi import {module}", scope)
        assert callable(getattr(scope[module], name)), f"{module}.{name}"
    from pytrace_cffi import html, summary
    with pytrace_cffi.trace() as t:
        work()
    rows = summary.summarize(t.trace, limit=None)
    assert any(row.name.endswith(": work") and row.calls == 1 for row in rows)
    html.write_html(t.trace, tmp_path / "page.html")
    assert (tmp_path / "page.html").read_text().startswith("<!DOCTYPE html>")


def test_export_writes_the_format_the_name_picks(tmp_path):
    """Trace.export(path) is `export -o PATH`: the format by the name, a saved
    directory for a name without a suffix, an unknown suffix refused; and a
    SpilledTrace exports the same way."""
    from pytrace_cffi.formats import UnknownFormat
    from pytrace_cffi.summary import read_trace
    with pytrace_cffi.trace() as t:
        work()
    trace = t.trace
    assert trace.export(str(tmp_path / "t.JSON")) == str(tmp_path / "t.JSON")
    with open(tmp_path / "t.JSON", encoding="utf-8") as f:
        assert '"generator": "pytrace_cffi"' in f.read(4096)
    trace.export(str(tmp_path / "t.json.gz"))
    with open(tmp_path / "t.json.gz", "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    trace.export(str(tmp_path / "saved"))
    assert len(pytrace_cffi.load(str(tmp_path / "saved"))) == len(trace)
    with pytest.raises(UnknownFormat, match="'.txt' is not a trace format"):
        trace.export(str(tmp_path / "t.txt"))
    assert not (tmp_path / "t.txt").exists()
    pytrace_cffi.start(max_events=1000, output=str(tmp_path / "spilled"))
    work()
    spilled = pytrace_cffi.stop()
    assert isinstance(spilled, pytrace_cffi.SpilledTrace)
    spilled.export(str(tmp_path / "spilled.pftrace"))
    assert len(pytrace_cffi.load(str(tmp_path / "spilled"))) \
        == len(read_trace(str(tmp_path / "spilled.pftrace")))
    # and so does start(output=FILE)'s WrittenTrace (read back from its file)
    pytrace_cffi.start(output=str(tmp_path / "written.json"))
    work()
    written = pytrace_cffi.stop()
    assert isinstance(written, pytrace_cffi.WrittenTrace) and written.written
    assert sum(call.name.endswith(": work") for call in written) == 1
    written.export(str(tmp_path / "written.pftrace"))
    assert sum(call.name.endswith(": work")
               for call in read_trace(str(tmp_path / "written.pftrace"))) == 1


@pytest.mark.parametrize("name", ["rel.json", "rel_saved" + "/"])
def test_a_relative_output_is_where_it_named_at_start(tmp_path, monkeypatch, name):
    """The program changes its working directory between start() and stop(): the
    trace still goes where output named when tracing started."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    pytrace_cffi.start(output=name, **({} if name.endswith(".json") else {"max_events": 4096}))
    os.chdir("elsewhere")
    pytrace_cffi.stop()
    assert os.listdir(tmp_path / "elsewhere") == []
    assert (tmp_path / name.rstrip("/")).exists()
