"""Fuzzing pytrace_cffi.load: whatever the bytes, one clear error or a trace —
never a crash, SystemError, MemoryError or anything else."""
import json
import os
import shutil

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


@pytest.fixture(scope="module")
def saved_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    with pytrace_cffi.trace() as t:
        fib(8)
        pytrace_cffi.instant("i", {"a": 1})
    t.trace.save(root / "slices")
    pytrace_cffi.start(max_events=600, output=str(root / "spill"))
    fib(10)
    pytrace_cffi.stop()
    return {"slices": (root / "slices", FILES), "spill": (root / "spill", SPILL_FILES)}


def load_or_format_error(directory):
    try:
        pytrace_cffi.load(directory)
    except TraceFormatError:
        pass


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


def test_unmodified_directories_load(saved_dirs):
    for source, _ in saved_dirs.values():
        assert len(pytrace_cffi.load(source)) > 0
        assert os.path.exists(source / "meta.json")
