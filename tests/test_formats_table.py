"""docs/INTERNALS.md's recipe for a new output format, followed once: one row in
formats.FORMATS and one renderer, nothing registered anywhere. The row is added to
formats.py's own text (as a developer would add it) and that text is loaded as a
module; the renderer is a module of render/ made here. The row alone makes the
suffix choose the format, the help and the refusals name it, the flight recorder's
dump_format take its name, Trace.export write it, and read() say it is not read
back."""
import importlib.util
import os
import sys
import types

import pytest

import pytrace_cffi
from pytrace_cffi import formats
from pytrace_cffi.errors import TraceFormatError
from pytrace_cffi.reading import read_trace

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "data", "golden", "threads")
ROW = ('    Format("upper", (".upper",), "the number of calls, for a test",\n'
       '           "render.upper_for_test:write_upper", {"shout": True}, False, False,\n'
       '           None, {}),\n')


def _formats_with_a_row():
    """formats.py's text with ROW added at the end of FORMATS, loaded as a module."""
    with open(formats.__file__, encoding="utf-8") as f:
        text = f.read()
    end = text.index("\n)\n", text.index("FORMATS = ("))
    text = text[:end + 1] + ROW + text[end + 1:]
    spec = importlib.util.spec_from_loader("pytrace_cffi.formats", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "pytrace_cffi"
    module.__file__ = formats.__file__
    exec(compile(text, formats.__file__, "exec"), module.__dict__)
    return module


@pytest.fixture
def new_format(monkeypatch):
    """The package as it would be with ROW and its renderer."""
    renderer = types.ModuleType("pytrace_cffi.render.upper_for_test")

    def write_upper(trace, path, shout):
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"{len(trace)} CALLS\n" if shout else f"{len(trace)} calls\n")
    renderer.write_upper = write_upper
    monkeypatch.setitem(sys.modules, renderer.__name__, renderer)
    module = _formats_with_a_row()
    monkeypatch.setitem(sys.modules, "pytrace_cffi.formats", module)
    monkeypatch.setattr(pytrace_cffi, "formats", module)
    return module


def test_a_new_format_is_one_row_and_one_renderer(new_format, tmp_path):
    fmt = new_format.format_of(str(tmp_path / "out.UPPER"))
    assert fmt.name == "upper" and fmt is new_format.FORMATS[-1]
    assert "the number of calls, for a test" in new_format.choices()
    assert new_format.suffixes_text().endswith(".pprof, .upper or a directory")
    assert "upper" in new_format.DUMP_FORMATS
    # capabilities it did not name are off
    assert (fmt.live, fmt.joinable, fmt.torch_merge, fmt.chrome_json, fmt.gzip) == (
        False, False, None, False, False)
    assert new_format.numbered("a/out.upper", 2) == "a/out.2.upper"

    trace = read_trace(GOLDEN)
    out = str(tmp_path / "t.upper")
    assert trace.export(out) == out         # Trace finds the writer through the row
    with open(out, encoding="utf-8") as f:
        assert f.read() == f"{len(trace)} CALLS\n"
    with pytest.raises(TraceFormatError, match="made for its viewer"):
        new_format.read(out)


def test_without_the_row_the_suffix_is_refused(tmp_path):
    """The check above is not vacuous: the package as it is knows no .upper."""
    with pytest.raises(formats.UnknownFormat, match="'.upper' is not a trace format"):
        formats.format_of(str(tmp_path / "out.upper"))
    assert "upper" not in formats.DUMP_FORMATS


def test_merge_torch_refuses_a_format_it_does_not_merge_into(tmp_path):
    """torch_merge is None for .html: merge_torch says so (the command line did
    already), before it reads torch's trace, and writes nothing."""
    trace = read_trace(GOLDEN)
    out = tmp_path / "m.html"
    with pytest.raises(ValueError, match=r"name it \.json, \.json\.gz or \.pftrace, not"):
        pytrace_cffi.merge_torch(trace, tmp_path / "no-such-torch.json", out)
    assert not out.exists()
