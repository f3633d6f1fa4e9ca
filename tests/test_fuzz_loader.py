"""Fuzzing pytrace_cffi.load: whatever the bytes, one clear error or a trace —
never a crash, SystemError, MemoryError or anything else."""
import json
import shutil
import threading

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pytrace_cffi  # noqa: E402
from pytrace_cffi import TraceFormatError  # noqa: E402

FILES = ["meta.json", "hashes.json", "params.json", "slices.bin"]
SPILL_FILES = ["meta.json", "hashes.json", "params.json", "events.bin"]
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Shaped:
    def __init__(self, shape):
        self.shape = shape


def marks():
    """A mark of every shape: instants without args, with empty args and with
    every kind of value; counters with a number and with a dict of numbers."""
    pytrace_cffi.instant("bare")
    pytrace_cffi.instant("empty", {})
    pytrace_cffi.instant("i", {"a": 1, "f": 0.5, "s": "é✓", "b": True, "shape": Shaped((2, 3))})
    pytrace_cffi.counter("n", 3)
    pytrace_cffi.counter("d", {"x": 1, "y": 2.5})


def workload(n):
    worker = threading.Thread(target=lambda: (fib(5), marks()), name="fuzz-worker")
    worker.start()
    worker.join()
    fib(n)
    with pytrace_cffi.record_function("region", {"k": 1}):
        marks()


@pytest.fixture(scope="module")
def saved_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    with pytrace_cffi.trace() as t:
        workload(8)
    t.trace.save(root / "slices")
    pytrace_cffi.start(max_events=600, output=str(root / "spill"))
    workload(10)
    pytrace_cffi.stop()
    return {"slices": (root / "slices", FILES), "spill": (root / "spill", SPILL_FILES)}


def use(trace, tmp_path):
    """What a user does with a loaded trace: every call, every mark, the export."""
    calls = list(trace)
    assert len(calls) == len(trace)
    for call in calls:
        assert isinstance(call.name, str) and call.start_ns <= call.end_ns
    assert all(isinstance(mark.args, dict) for mark in trace.marks)
    out = tmp_path / "export.json"
    trace.export_chrome_trace(str(out))
    events = json.loads(out.read_text(encoding="utf-8"))["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == len(calls)
    assert sum(e["ph"] in ("i", "C") for e in events) == len(trace.marks)
    return calls


def load_or_format_error(directory):
    """A load either raises TraceFormatError or gives a trace that iterates and
    exports without any other exception."""
    try:
        trace = pytrace_cffi.load(directory)
    except TraceFormatError:
        return
    use(trace, directory)


def copy(source, tmp_path, name):
    target = tmp_path / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    return target


@FUZZ
@given(kind=st.sampled_from(["slices", "spill"]), index=st.integers(0, 3),
       position=st.floats(0, 1), data=st.binary(max_size=64), truncate=st.booleans())
def test_mutated_files(saved_dirs, tmp_path, kind, index, position, data, truncate):
    source, files = saved_dirs[kind]
    target = copy(source, tmp_path, "mutated")
    path = target / files[index]
    original = path.read_bytes()
    cut = int(position * len(original))
    path.write_bytes(original[:cut] + data + (b"" if truncate else original[cut + len(data):]))
    load_or_format_error(target)


@FUZZ
@given(kind=st.sampled_from(["slices", "spill"]), index=st.integers(0, 3),
       data=st.binary(max_size=512))
def test_replaced_files(saved_dirs, tmp_path, kind, index, data):
    source, files = saved_dirs[kind]
    target = copy(source, tmp_path, "replaced")
    (target / files[index]).write_bytes(data)
    load_or_format_error(target)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@FUZZ
@given(kind=st.sampled_from(["slices", "spill"]), field=st.sampled_from(
    ["version", "keys", "threads", "start_ns", "marks", "events", "tags", "annotation_args",
     "dropped_events", "format"]), value=json_values)
def test_wrong_json_shapes(saved_dirs, tmp_path, kind, field, value):
    source, _ = saved_dirs[kind]
    target = copy(source, tmp_path, "shapes")
    meta = json.loads((target / "meta.json").read_text())
    meta[field] = value
    (target / "meta.json").write_text(json.dumps(meta))
    load_or_format_error(target)


@FUZZ
@given(kind=st.sampled_from(["slices", "spill"]), mark=st.integers(0, 9),
       position=st.integers(0, 4), value=json_values)
def test_wrong_mark_shapes(saved_dirs, tmp_path, kind, mark, position, value):
    source, _ = saved_dirs[kind]
    target = copy(source, tmp_path, "marks")
    meta = json.loads((target / "meta.json").read_text())
    meta["marks"][mark][position] = value
    (target / "meta.json").write_text(json.dumps(meta))
    load_or_format_error(target)


@FUZZ
@given(kind=st.sampled_from(["slices", "spill"]), thread=st.integers(0, 1),
       field=st.sampled_from(["index", "native_id", "ident", "name", "n_events", "dropped",
                              "n_slices"]), value=json_values)
def test_wrong_thread_fields(saved_dirs, tmp_path, kind, thread, field, value):
    source, _ = saved_dirs[kind]
    target = copy(source, tmp_path, "threads")
    meta = json.loads((target / "meta.json").read_text())
    meta["threads"][thread][field] = value
    (target / "meta.json").write_text(json.dumps(meta))
    load_or_format_error(target)


INT_FIELDS = {
    "slices": ["start_ns", "stop_ns", "pid", "dropped_events", "threads.0.native_id",
               "threads.1.ident", "threads.0.n_events", "threads.1.n_slices", "marks.0.1",
               "marks.3.2"],
    "spill": ["start_ns", "events.tick0", "events.ns0", "events.stop_ticks",
              "events.min_duration_ns", "threads.0.n_events", "keys.1.3", "marks.9.1"],
}


@pytest.mark.parametrize("kind, field", [(kind, field) for kind, fields in INT_FIELDS.items()
                                         for field in fields])
@pytest.mark.parametrize("value", [2 ** 64, -2 ** 63 - 1, 2 ** 70])
def test_integers_out_of_range(saved_dirs, tmp_path, kind, field, value):
    """Every integer meta.json gives the C core must fit it: one past its range
    raises TraceFormatError (it was an OverflowError, at export)."""
    source, _ = saved_dirs[kind]
    target = copy(source, tmp_path, "ints")
    meta = json.loads((target / "meta.json").read_text())
    *path, last = field.split(".")
    entry = meta
    for part in path:
        entry = entry[int(part)] if isinstance(entry, list) else entry[part]
    last = int(last) if isinstance(entry, list) else last
    assert isinstance(entry[last], int)
    entry[last] = value
    (target / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(TraceFormatError, match="meta.json: .*(out of range|bad hide)"):
        pytrace_cffi.load(target)


def test_unmodified_directories_load(saved_dirs, tmp_path):
    for kind, (source, _) in saved_dirs.items():
        trace = pytrace_cffi.load(source)
        calls = use(trace, tmp_path)
        assert sum(c.name.endswith(": fib") for c in calls) == \
            {"slices": 67 + 15, "spill": 177 + 15}[kind]
        # ten marks: five on the worker, then five on the main thread
        assert [m.name for m in trace.marks] == ["bare", "empty", "i", "n", "d"] * 2
        assert [m.args for m in trace.marks[:2]] == [{}, {}]
        assert trace.marks[2].args["shape"] == [2, 3]
        assert len({m.thread for m in trace.marks}) == 2
        assert {c.name for c in calls if c.kind == "annotation"} == {"region"}
