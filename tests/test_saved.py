"""The saved-trace directory: round trip, stable hash ids, clear errors."""
import json
import os
import threading

import pytest

import pytrace_cffi
from pytrace_cffi import TraceFormatError
from pytrace_cffi.saved import hash_id


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


@pytest.fixture(scope="module")
def trace():
    with pytrace_cffi.trace() as t:
        worker = threading.Thread(target=fib, args=(7,), name="saved-worker")
        worker.start()
        fib(9)
        sorted([3, 1, 2])
        worker.join()
    return t.trace


def test_round_trip_keeps_everything(trace, tmp_path):
    trace.save(tmp_path / "saved")
    loaded = pytrace_cffi.load(tmp_path / "saved")
    assert list(loaded) == list(trace)
    assert loaded.threads == trace.threads
    for attr in ("start_ns", "stop_ns", "pid", "python_version", "backend", "clock",
                 "dropped_events", "params", "key_args"):
        assert getattr(loaded, attr) == getattr(trace, attr), attr
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    trace.export_chrome_trace(str(a))
    loaded.export_chrome_trace(str(b))
    assert a.read_text() == b.read_text()


def test_directory_contents(trace, tmp_path):
    trace.save(tmp_path / "d")
    assert sorted(os.listdir(tmp_path / "d")) == ["hashes.json", "meta.json", "params.json",
                                                 "slices.bin"]
    hashes = json.loads((tmp_path / "d" / "hashes.json").read_text())
    names = {c.name for c in trace}
    assert names <= set(hashes.values())
    assert hashes[str(hash_id("__torch_npu_profiler_python_tracer_exit"))] == \
        "__torch_npu_profiler_python_tracer_exit"
    for hid, name in hashes.items():
        assert int(hid) == hash_id(name) < 2 ** 64
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["format"] == "pytrace_cffi-trace" and meta["version"] == 1
    assert {t["name"] for t in meta["threads"]} >= {"MainThread", "saved-worker"}


def test_hash_ids_are_identical_across_processes(run_python):
    code = ("from pytrace_cffi.saved import hash_id\n"
            "print(hash_id('builtins.len'), hash_id('nn.Module: Linear_0'))")
    first = run_python(code).stdout
    second = run_python(code, check=True).stdout
    assert first == second
    assert first.split() == [str(hash_id("builtins.len")), str(hash_id("nn.Module: Linear_0"))]


@pytest.mark.parametrize("damage", ["no meta", "bad json", "wrong version", "truncated bin",
                                    "garbage bin", "bad key", "bad parent", "empty dir"])
def test_damaged_directories_raise_one_clear_error(trace, tmp_path, damage):
    d = tmp_path / "d"
    trace.save(d)
    meta = json.loads((d / "meta.json").read_text())
    if damage == "no meta":
        os.unlink(d / "meta.json")
    elif damage == "bad json":
        (d / "meta.json").write_text("{not json")
    elif damage == "wrong version":
        meta["version"] = 99
        (d / "meta.json").write_text(json.dumps(meta))
    elif damage == "truncated bin":
        data = (d / "slices.bin").read_bytes()
        (d / "slices.bin").write_bytes(data[:-7])
    elif damage == "garbage bin":
        (d / "slices.bin").write_bytes(os.urandom(64))
    elif damage == "bad key":
        data = bytearray((d / "slices.bin").read_bytes())
        data[24 + 16:24 + 20] = (10 ** 6).to_bytes(4, "little")     # first slice's key
        (d / "slices.bin").write_bytes(bytes(data))
    elif damage == "bad parent":
        data = bytearray((d / "slices.bin").read_bytes())
        data[24 + 24:24 + 32] = (5).to_bytes(8, "little")           # first slice's parent
        (d / "slices.bin").write_bytes(bytes(data))
    elif damage == "empty dir":
        for name in os.listdir(d):
            os.unlink(d / name)
    with pytest.raises(TraceFormatError):
        pytrace_cffi.load(d)


def test_load_of_a_missing_directory(tmp_path):
    with pytest.raises(TraceFormatError, match="not a directory"):
        pytrace_cffi.load(tmp_path / "nope")
