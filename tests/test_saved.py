"""The saved-trace directory: round trip, stable hash ids, clear errors."""
import json
import os
import subprocess
import sys
import threading

import pytest

import pytrace_cffi
from pytrace_cffi import TraceFormatError
from pytrace_cffi.model.saved_format import hash_id


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


@pytest.fixture(scope="module")
def trace():
    with pytrace_cffi.trace() as t:
        worker = threading.Thread(target=fib, args=(7,), name="saved-worker")
        worker.start()
        fib(9)
        sorted([3, 1, 2])
        len([1, 2])
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
    assert hashes["15716172955972191332"] == "__torch_npu_profiler_python_tracer_exit"
    assert hashes["8720174357929616320"] == "builtins.len"
    for hid, name in hashes.items():
        assert int(hid) == hash_id(name) < 2 ** 64
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["format"] == "pytrace_cffi-trace" and meta["version"] == 1
    assert {t["name"] for t in meta["threads"]} >= {"MainThread", "saved-worker"}


# BLAKE2b with an 8-byte digest, read little-endian: computed once with coreutils'
# `printf %s NAME | b2sum -l 64` (the hex digest, byte order as stored), and
# checked against hashlib. The ids are pinned so that any change of the hash
# (digest size, byte order, encoding, a per-process seed) fails here.
KNOWN_IDS = {
    "builtins.len": ("c063dd8760480479", 8720174357929616320),
    "nn.Module: Linear_0": ("cdbcd5eadde8db3f", 4601527484114386125),
    "__torch_npu_profiler_python_tracer_exit": ("64c4521d09101bda", 15716172955972191332),
    "": ("e4a6a0577479b2b4", 13020603013274838756),
    "épreuve": ("671ab43190b0331b", 1960104396191963751),
}


def test_hash_ids_are_pinned_values():
    for name, (digest, value) in KNOWN_IDS.items():
        assert int.from_bytes(bytes.fromhex(digest), "little") == value
        assert hash_id(name) == value, name


def test_hash_ids_are_identical_across_processes(run_python):
    code = ("from pytrace_cffi.model.saved_format import hash_id\n"
            f"for name in {list(KNOWN_IDS)!r}: print(hash_id(name))")
    first = run_python(code).stdout
    second = run_python(code, check=True).stdout
    assert first.split() == second.split() == [str(v) for _, v in KNOWN_IDS.values()]


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
    # (load reads files too: a missing path is said to be missing)
    with pytest.raises(TraceFormatError, match="does not exist"):
        pytrace_cffi.load(tmp_path / "nope")


# ---------------------------------------------------------------------------
# Marks: every shape the annotation API can make survives save and load
# ---------------------------------------------------------------------------

class Shaped:
    """Stands in for a tensor or array: only its .shape is recorded."""

    def __init__(self, shape):
        self.shape = shape


class Size:
    """A size that is an integer only through __index__ (numpy ints, SymInts)."""

    def __index__(self):
        return 5


UNICODE = "épreuve ✓ 🚀 \"q\" \\ \n"


def make_marks():
    """Every kind of mark and argument, on the calling thread."""
    pytrace_cffi.instant("bare")
    pytrace_cffi.instant("empty", {})
    pytrace_cffi.instant("typed", {"s": UNICODE, "i": -3, "big": 2 ** 62, "f": 1.25,
                                   "t": True, "n": False, "shape": Shaped((2, 3)),
                                   "scalar": Shaped(()), "index": Shaped([Size(), 7])})
    pytrace_cffi.instant(UNICODE, {UNICODE: UNICODE})
    pytrace_cffi.counter("count", 3)
    pytrace_cffi.counter("ratio", 0.5)
    pytrace_cffi.counter("memory", {"used": 10, "free": 2.5})
    pytrace_cffi.counter(UNICODE, {UNICODE: -1})


def expected_marks(thread):
    """What make_marks records, written out literally: kind, thread, name, args."""
    return [
        ("i", thread, "bare", {}),
        ("i", thread, "empty", {}),
        ("i", thread, "typed", {"s": UNICODE, "i": -3, "big": 2 ** 62, "f": 1.25, "t": True,
                                "n": False, "shape": [2, 3], "scalar": [], "index": [5, 7]}),
        ("i", thread, UNICODE, {UNICODE: UNICODE}),
        ("C", thread, "count", {"count": 3}),
        ("C", thread, "ratio", {"ratio": 0.5}),
        ("C", thread, "memory", {"used": 10, "free": 2.5}),
        ("C", thread, UNICODE, {UNICODE: -1}),
    ]


def marks_workload():
    """Marks on the main thread and a worker, with calls around them. Returns the
    marks expected, main thread's first."""
    worker = threading.Thread(target=lambda: (fib(6), make_marks()), name="marks-worker")
    worker.start()
    worker.join()
    fib(12)                          # under max_events=600, this spills several blocks
    make_marks()
    return expected_marks(worker.native_id) + expected_marks(threading.get_native_id())


def assert_same_marks(trace, expected):
    assert [(m.kind, m.thread, m.name, m.args) for m in trace.marks] == expected
    for m in trace.marks:
        assert trace.start_ns <= m.ns <= trace.stop_ns
        assert type(m.ns) is int
    for left, right in zip(expected, trace.marks):
        # bools stay bools and ints stay ints (1 == True would hide a change)
        assert [type(v) for v in left[3].values()] == [type(v) for v in right.args.values()]


def chrome_text(trace, path):
    trace.export_chrome_trace(str(path))
    return path.read_text(encoding="utf-8")


def assert_round_trip(trace, directory, tmp_path):
    """save -> load gives the same marks and calls, and the same Chrome JSON."""
    trace.save(directory)
    loaded = pytrace_cffi.load(directory)
    assert loaded.marks == trace.marks
    assert list(loaded) == list(trace)
    assert loaded.threads == trace.threads
    text = chrome_text(loaded, tmp_path / "loaded.json")
    assert text == chrome_text(trace, tmp_path / "original.json")
    return loaded, text


def check_chrome_marks(text, expected):
    events = json.loads(text)["traceEvents"]
    marks = [(e["ph"], e["tid"], e["name"], e["args"]) for e in events if e["ph"] in "iC"]
    assert marks == expected
    assert all(e["s"] == "t" for e in events if e["ph"] == "i")


def test_marks_of_every_shape_survive_save_and_load(tmp_path):
    with pytrace_cffi.trace() as t:
        expected = marks_workload()
    trace = t.trace
    assert_same_marks(trace, expected)
    loaded, text = assert_round_trip(trace, tmp_path / "saved", tmp_path)
    assert_same_marks(loaded, expected)
    check_chrome_marks(text, expected)
    # the Chrome JSON reads back with the same marks
    from pytrace_cffi.reading import read_trace
    again = read_trace(str(tmp_path / "loaded.json"))
    assert [(m.kind, m.thread, m.name, m.args) for m in again.marks] == expected


def test_marks_of_every_shape_survive_a_spilled_trace(tmp_path):
    out = tmp_path / "spill"
    pytrace_cffi.start(max_events=600, output=str(out))
    try:
        expected = marks_workload()
    finally:
        spilled = pytrace_cffi.stop()
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    assert "events" in meta and not (out / "slices.bin").exists()
    assert spilled.spilled_events == sum(t["n_events"] for t in meta["threads"]) > 600
    loaded = pytrace_cffi.load(out)
    assert_same_marks(loaded, expected)
    # no call lost: fib(12) makes 465 calls, fib(6) 25
    fibs = [c for c in loaded if c.name.endswith(": fib")]
    main_id = threading.get_native_id()
    assert sum(c.thread == main_id for c in fibs) == 465
    assert sum(c.thread != main_id for c in fibs) == 25
    again, text = assert_round_trip(loaded, tmp_path / "saved", tmp_path)
    check_chrome_marks(text, expected)
    assert text == chrome_text(spilled, tmp_path / "spilled.json")


def test_shape_sizes_must_be_integers():
    for bad in (Shaped(("a", 2)), Shaped([None]), Shaped([1.5])):
        with pytest.raises(TypeError, match="integer sizes"):
            pytrace_cffi.instant("x", {"a": bad})
        with pytest.raises(TypeError, match="integer sizes"):
            pytrace_cffi.record_function("x", {"a": bad})


def test_null_instant_args_from_older_files_load_as_empty(trace, tmp_path):
    """pytrace_cffi wrote an instant without args as null before they were
    always objects: such files still load, with args {}."""
    d = tmp_path / "d"
    trace.save(d)
    meta = json.loads((d / "meta.json").read_text())
    thread = meta["threads"][0]["native_id"]
    meta["marks"] = [["i", trace.start_ns, thread, "old", None]]
    (d / "meta.json").write_text(json.dumps(meta))
    assert pytrace_cffi.load(d).marks == [("i", trace.start_ns, thread, "old", {})]


def test_cli_run_to_a_directory_then_export(tmp_path):
    script = tmp_path / "marks.py"
    script.write_text("import pytrace_cffi\n"
                      "pytrace_cffi.instant('bare')\n"
                      "pytrace_cffi.instant('with args', {'epoch': 2})\n"
                      "pytrace_cffi.counter('queue', 7)\n", encoding="utf-8")

    def cli(*args):
        proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc

    cli("run", "-o", str(tmp_path / "dir"), str(script))
    cli("export", str(tmp_path / "dir"), "-o", str(tmp_path / "x.json"))
    events = json.loads((tmp_path / "x.json").read_text(encoding="utf-8"))["traceEvents"]
    assert [(e["ph"], e["name"], e["args"]) for e in events if e["ph"] in "iC"] == [
        ("i", "bare", {}), ("i", "with args", {"epoch": 2}), ("C", "queue", {"queue": 7})]


# ---------------------------------------------------------------------------
# Every count the format records is checked
# ---------------------------------------------------------------------------

EVENTS_HEADER, BLOCK_HEADER = 16, 24


def blocks(data):
    """(offset, thread index, count) of each block in events.bin's bytes."""
    found, offset = [], EVENTS_HEADER
    while offset < len(data):
        index = int.from_bytes(data[offset:offset + 4], "little")
        count = int.from_bytes(data[offset + 8:offset + 16], "little")
        found.append((offset, index, count))
        offset += BLOCK_HEADER + count * 8
    assert offset == len(data)
    return found


@pytest.fixture(scope="module")
def spilled_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("spilled") / "spill"
    pytrace_cffi.start(max_events=600, output=str(out))
    try:
        marks_workload()
    finally:
        pytrace_cffi.stop()
    return out


def damaged_copy(source, tmp_path):
    import shutil
    target = tmp_path / "damaged"
    shutil.copytree(source, target)
    return target, json.loads((target / "meta.json").read_text())


def write_meta(directory, meta):
    (directory / "meta.json").write_text(json.dumps(meta))


def test_spilled_directory_is_consistent(spilled_dir):
    data = (spilled_dir / "events.bin").read_bytes()
    meta = json.loads((spilled_dir / "meta.json").read_text())
    per_thread = [0] * len(meta["threads"])
    for _, index, count in blocks(data):
        per_thread[index] += count
    assert per_thread == [t["n_events"] for t in meta["threads"]]
    assert len(blocks(data)) > 2
    assert meta["dropped_events"] == 0 == sum(t["dropped"] for t in meta["threads"])
    loaded = pytrace_cffi.load(spilled_dir)
    assert [t.n_events for t in loaded.threads] == per_thread


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_a_missing_block_is_found(spilled_dir, tmp_path, which):
    """A block cut out of events.bin (the file stays well formed): the thread's
    n_events disagrees, and a block in the middle leaves the next one not
    continuing the one before it, even with n_events made to agree."""
    target, meta = damaged_copy(spilled_dir, tmp_path)
    data = (target / "events.bin").read_bytes()
    found = blocks(data)
    main = max(range(len(meta["threads"])), key=lambda i: meta["threads"][i]["n_events"])
    mine = [b for b in found if b[1] == main]
    assert len(mine) >= 3
    offset, index, count = {"first": mine[0], "middle": mine[1], "last": mine[-1]}[which]
    (target / "events.bin").write_bytes(data[:offset] + data[offset + BLOCK_HEADER + count * 8:])
    name = meta["threads"][main]["name"]
    recorded = meta["threads"][main]["n_events"]
    gap = rf"thread {main} \('{name}'\): the block at byte \d+ does not continue"
    with pytest.raises(TraceFormatError, match=gap if which == "middle" else
                       rf"events.bin: thread {main} \('{name}'\) has {recorded - count} "
                       rf"events, meta.json says {recorded}"):
        pytrace_cffi.load(target)
    meta["threads"][main]["n_events"] -= count
    write_meta(target, meta)
    if which == "middle":
        with pytest.raises(TraceFormatError, match=gap):
            pytrace_cffi.load(target)
    else:
        # the first or last block is not missed by any count: the trace loads
        # with fewer calls, as if recording had started later or ended sooner
        assert len(pytrace_cffi.load(target)) < len(pytrace_cffi.load(spilled_dir))


def set_event(directory, thread, position, key_kind):
    """Rewrites the key_kind of one event of a thread's first block in place."""
    data = bytearray((directory / "events.bin").read_bytes())
    offset, _, count = next(b for b in blocks(data) if b[1] == thread)
    assert position < count
    at = offset + BLOCK_HEADER + position * 8 + 4
    data[at:at + 4] = key_kind.to_bytes(4, "little")
    (directory / "events.bin").write_bytes(bytes(data))


@pytest.mark.parametrize("damage, message", [
    ("n_events up", r"thread 0 \('MainThread'\) has \d+ events, meta.json says"),
    ("n_events down", r"thread 0 \('MainThread'\) has \d+ events, meta.json says"),
    ("dropped", r"dropped_events is 0, its threads' dropped add up to 3"),
    ("dropped_events", r"dropped_events is 5, its threads' dropped add up to 0"),
    ("negative", r"thread 0 \('MainThread'\) has a negative dropped"),
    ("thread index", r"thread 1 has index 0"),
    ("mark thread", r"names thread 12345, which meta.json's threads lack"),
    ("n_slices", r"has n_slices, but the trace is spilled"),
    ("three-value key", r"key 1 must be a list of 4 values"),
    ("tag index", r"event 0 names an unknown key, tag or annotation args"),
    ("args index", r"event 0 names an unknown key, tag or annotation args"),
    ("kind 5", r"thread 0 \('MainThread'\), event 0 has kind 5, which is reserved"),
    ("kind 6", r"thread 0 \('MainThread'\), event 0 has kind 6, which is reserved"),
    ("version 3", r"events.bin: events of version 3 \(this pytrace_cffi reads versions 1, 2\)"),
    ("reserved", r"reserved field set"),
    ("empty blocks", r"block at byte 16 is damaged \(it holds no events\)"),
    ("hash", r"hashes.json: id \d+ is not the hash of its name"),
    ("module tag", r"bad tags"),
    ("delta past stop", r"thread 0 \('MainThread'\): call \d+ ends before it starts or "
                        r"outside its parent"),
])
def test_spilled_counts_are_checked(spilled_dir, tmp_path, damage, message):
    target, meta = damaged_copy(spilled_dir, tmp_path)
    threads = meta["threads"]
    assert threads[0]["name"] == "MainThread"
    if damage == "n_events up":
        threads[0]["n_events"] += 1
    elif damage == "n_events down":
        threads[0]["n_events"] -= 1
    elif damage == "dropped":
        threads[1]["dropped"] = 3
    elif damage == "dropped_events":
        meta["dropped_events"] = 5
    elif damage == "negative":
        threads[0]["dropped"] = -1
        threads[1]["dropped"] = 1
    elif damage == "thread index":
        threads[1]["index"] = 0
    elif damage == "mark thread":
        meta["marks"][0][2] = 12345
    elif damage == "n_slices":
        threads[0]["n_slices"] = 3
    elif damage == "three-value key":
        meta["keys"][1] = meta["keys"][1][:3]
    elif damage == "tag index":
        set_event(target, 0, 0, (1 << 3 | 1) << 3 | 7)     # a TAG aux event: tag 1 of [None]
    elif damage == "args index":
        set_event(target, 0, 0, (0 << 3 | 2) << 3 | 7)     # an ARGS aux event: args 0 of []
    elif damage in ("kind 5", "kind 6"):
        set_event(target, 0, 0, 1 << 3 | int(damage[-1]))     # reserved kinds
    elif damage == "version 3":
        data = bytearray((target / "events.bin").read_bytes())
        data[8:12] = (3).to_bytes(4, "little")
        (target / "events.bin").write_bytes(bytes(data))
    elif damage == "reserved":
        data = bytearray((target / "events.bin").read_bytes())
        data[EVENTS_HEADER + 4] = 1
        (target / "events.bin").write_bytes(bytes(data))
    elif damage == "empty blocks":
        # a hostile file: 100,000 blocks of no events before the first, each
        # continuing it (its thread and base)
        data = (target / "events.bin").read_bytes()
        first = data[EVENTS_HEADER:EVENTS_HEADER + BLOCK_HEADER]
        empty = first[:8] + bytes(8) + first[16:]
        (target / "events.bin").write_bytes(data[:EVENTS_HEADER] + empty * 100_000
                                            + data[EVENTS_HEADER:])
    elif damage == "hash":
        hashes = json.loads((target / "hashes.json").read_text())
        ids = [entry[0] for entry in meta["keys"][1:3]]
        hashes[ids[0]], hashes[ids[1]] = hashes[ids[1]], hashes[ids[0]]
        (target / "hashes.json").write_text(json.dumps(hashes))
    elif damage == "module tag":
        meta["tags"] = [None, {"kind": "module", "name": "nn.Module: Linear_0"}]
    elif damage == "delta past stop":
        # the last block has no successor to disagree with: a delta of seconds in
        # it puts the calls after it past the stop that closes their callers
        data = bytearray((target / "events.bin").read_bytes())
        offset, _, count = [b for b in blocks(data) if b[1] == 0][-1]
        assert count > 3
        at = offset + BLOCK_HEADER + 2 * 8
        data[at:at + 4] = (0xFFFFFFF0).to_bytes(4, "little")
        (target / "events.bin").write_bytes(bytes(data))
    write_meta(target, meta)
    with pytest.raises(TraceFormatError, match=message):
        pytrace_cffi.load(target)


@pytest.mark.parametrize("damage, message", [
    ("dropped", r"dropped_events is 0, its threads' dropped add up to 2"),
    ("n_slices", r"slices.bin: \d+ slices, meta.json says \d+"),
    ("four-value key", r"key 1 must be a list of 3 values"),
    ("mark thread", r"names thread 12345, which meta.json's threads lack"),
    ("counter", r"a counter's values must be numbers"),
    ("instant", r"args values must be str, int, float, bool or a list of integer sizes"),
    ("negative", r"negative n_events"),
])
def test_saved_counts_are_checked(tmp_path, damage, message):
    with pytrace_cffi.trace() as t:
        marks_workload()
    d = tmp_path / "d"
    t.trace.save(d)
    meta = json.loads((d / "meta.json").read_text())
    if damage == "dropped":
        meta["threads"][0]["dropped"] = 2
    elif damage == "n_slices":
        meta["threads"][0]["n_slices"] += 1
    elif damage == "four-value key":
        meta["keys"][1].append(0)
    elif damage == "mark thread":
        meta["marks"][-1][2] = 12345
    elif damage == "counter":
        meta["marks"][-1][4] = {"a": True}
    elif damage == "instant":
        meta["marks"][0][4] = {"a": {"nested": 1}}
    elif damage == "negative":
        meta["threads"][1]["n_events"] = -4
    write_meta(d, meta)
    with pytest.raises(TraceFormatError, match=message):
        pytrace_cffi.load(d)


def test_null_instant_args_in_older_chrome_json_read_as_empty(trace, tmp_path):
    """Earlier exports wrote an instant without args as "args": null; the Chrome
    reader (summary, export from .json) takes it as {}."""
    path = tmp_path / "old.json"
    trace.export_chrome_trace(str(path))
    data = json.loads(path.read_text())
    tid = trace.threads[0].native_id
    data["traceEvents"].append({"ph": "i", "name": "old", "pid": trace.pid, "tid": tid,
                                "ts": 1.5, "args": None, "s": "t"})
    path.write_text(json.dumps(data))
    from pytrace_cffi.reading import read_trace
    assert read_trace(str(path)).marks == [("i", trace.start_ns + 1500, tid, "old", {})]


def test_region_with_empty_args_exports_valid_json_and_round_trips(tmp_path):
    with pytrace_cffi.trace() as t:
        with pytrace_cffi.record_function("empty region", {}):
            pass
        with pytrace_cffi.record_function("region", {"k": 1}):
            pass
    loaded, text = assert_round_trip(t.trace, tmp_path / "d", tmp_path)
    assert loaded.key_args == t.trace.key_args
    regions = {e["name"]: e["args"] for e in json.loads(text)["traceEvents"]
               if e.get("cat") == "user_annotation"}
    assert regions["region"]["k"] == 1
    assert "k" not in regions["empty region"] and "Python id" in regions["empty region"]
