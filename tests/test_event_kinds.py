"""The event kinds (c_src/pt_record.h): kind 7 is every "no call" event, an aux
event whose key is a sub-kind (TIME 0, TAG 1, ARGS 2) under a 26-bit payload; kinds 5
and 6 are reserved. events.bin is version 2; version 1 (TAG, ARGS and TIME as
kinds 5, 6 and 7, the whole key their index or high bits) is still read. The
files here are written by hand, byte by byte, from docs/FORMAT.md."""
import hashlib
import json
import os
import struct
import subprocess
import sys

import pytest

import pytrace_cffi
from pytrace_cffi import TraceFormatError

HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "torch_stand_in")

NAMES = ["<unknown>", "f.py(1): outer", "f.py(2): inner", "a region"]
KINDS = ["python", "python", "python", "annotation"]
TAGS = [None, {"kind": "module", "name": "nn.Module: Lin_0", "module_id": 0, "class": "Lin"}]
ANNOTATION_ARGS = [{"unused": 0}, {"batch": 32}]
TICK0, NS0 = 1000, 5000
PAUSE = 1 << 32         # carried by a TIME event: its key (v1) or payload (v2) is 1


def hash_id(name):
    return str(int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(),
                              "little"))


def call(kind, key):
    return key << 3 | kind


def aux(sub_kind, payload):
    return (payload << 3 | sub_kind) << 3 | 7


PY_CALL, PY_RETURN = 0, 1
V2_TIME, V2_TAG, V2_ARGS = 0, 1, 2


def program(version, extra=()):
    """(delta, key_kind) of one thread: outer calls a region (args 1) that calls
    inner (tag 1: "nn.Module: Lin_0"); a pause of 2^32 + 3 ticks closes the region.
    extra: (position, delta, key_kind) events put in."""
    if version == 1:
        args, tag, time = 1 << 3 | 6, 1 << 3 | 5, 1 << 3 | 7
    else:
        args, tag, time = aux(V2_ARGS, 1), aux(V2_TAG, 1), aux(V2_TIME, 1)
    events = [(0, call(PY_CALL, 1)), (10, call(PY_CALL, 3)), (0, args), (5, call(PY_CALL, 2)),
              (0, tag), (7, call(PY_RETURN, 2)), (3, time), (0, call(PY_RETURN, 3)),
              (5, call(PY_RETURN, 1))]
    for position, delta, word in sorted(extra, reverse=True):
        events.insert(position, (delta, word))
    return events


def write_spilled(directory, version, events):
    """A spilled trace directory of one thread holding events, in one block."""
    os.makedirs(directory)
    end = TICK0 + sum(delta for delta, _ in events) + PAUSE + 10
    meta = {
        "format": "pytrace_cffi-trace", "version": 1, "pid": 7, "python": "3.12.1",
        "backend": "sys.monitoring", "clock": "monotonic", "start_ns": NS0,
        "stop_ns": NS0 + end - TICK0, "dropped_events": 0, "hash": "blake2b-64-le",
        "keys": [[hash_id(name), kind, {}, 0] for name, kind in zip(NAMES, KINDS)],
        "marks": [],
        "threads": [{"index": 0, "native_id": 11, "ident": 12, "name": "MainThread",
                     "n_events": len(events), "dropped": 0}],
        "events": {"file": "events.bin", "tick0": TICK0, "ns0": NS0, "ns_per_tick": 1.0,
                   "stop_ticks": end, "min_duration_ns": 0},
        "tags": TAGS, "annotation_args": ANNOTATION_ARGS,
    }
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(directory, "hashes.json"), "w") as f:
        json.dump({hash_id(name): name for name in NAMES}, f)
    with open(os.path.join(directory, "params.json"), "w") as f:
        json.dump({"modules": [], "optimizer_steps": []}, f)
    data = b"PTEVENTS" + struct.pack("<II", version, 8)
    data += struct.pack("<IIQq", 0, 0, len(events), TICK0)
    data += b"".join(struct.pack("<II", delta, word) for delta, word in events)
    with open(os.path.join(directory, "events.bin"), "wb") as f:
        f.write(data)
    return directory


def calls_of(trace, where):
    """(name, start ns, end ns, parent's name, args in the Chrome JSON) of each call."""
    by_id = {c.id: c for c in trace}
    path = os.path.join(where, "t.json")
    trace.export_chrome_trace(path)
    with open(path) as f:
        args = {e["name"]: {k: v for k, v in e.get("args", {}).items()
                            if not k.startswith("Python ")}     # (the export's own)
                for e in json.load(f)["traceEvents"] if e.get("ph") == "X"}
    return sorted((c.name, c.start_ns, c.end_ns,
                   by_id[c.parent].name if c.parent is not None else None,
                   json.dumps(args[c.name], sort_keys=True)) for c in trace)


# what program() holds, written out: ns = NS0 + (ticks - TICK0) at 1 ns a tick
EXPECTED = sorted([
    ("f.py(1): outer", 5000, 5000 + 30 + PAUSE, None, "{}"),
    ("a region", 5010, 5025 + PAUSE, "f.py(1): outer", '{"batch": 32}'),
    ("nn.Module: Lin_0", 5015, 5022, "a region", "{}"),     # named by its tag
])


def test_a_version_1_events_file_loads_as_before(tmp_path):
    """Tags, annotation args and a pause past 2^32 ticks, as version 1 wrote them
    (kinds 5, 6 and 7), load to the calls they always meant, and to the calls of
    the same events written as version 2's aux events."""
    old = pytrace_cffi.load(write_spilled(str(tmp_path / "v1"), 1, program(1)))
    new = pytrace_cffi.load(write_spilled(str(tmp_path / "v2"), 2, program(2)))
    assert calls_of(old, str(tmp_path / "v1")) == EXPECTED
    assert calls_of(new, str(tmp_path / "v2")) == EXPECTED


def test_a_version_1_index_past_an_aux_payload_is_refused(tmp_path):
    """Version 1 keys had 29 bits; an aux event's payload has 26."""
    events = program(1)
    events[2] = (0, (1 << 26) << 3 | 6)          # args index 2^26
    directory = write_spilled(str(tmp_path / "v1"), 1, events)
    with pytest.raises(TraceFormatError, match=r"event 2 \(version 1\) names a tag or "
                                               r"annotation args past 2\^26"):
        pytrace_cffi.load(directory)


@pytest.mark.parametrize("sub_kind", [3, 4, 5, 6, 7])
def test_an_aux_event_of_an_unknown_sub_kind_is_skipped(tmp_path, sub_kind):
    """An aux event no reader knows yet (the room for new kinds) is passed over, payload
    and all; its delta still moves the clock."""
    extra = [(3, 4, aux(sub_kind, (1 << 26) - 1)), (0, 0, aux(sub_kind, 0))]
    trace = pytrace_cffi.load(write_spilled(str(tmp_path / "v2"), 2, program(2, extra)))
    later = [(name, start + (4 if start > 5010 else 0), end + 4, parent, args)
             for name, start, end, parent, args in EXPECTED]
    assert calls_of(trace, str(tmp_path / "v2")) == sorted(later)


@pytest.mark.parametrize("kind", [5, 6])
def test_a_reserved_kind_in_a_file_is_refused(tmp_path, kind):
    directory = write_spilled(str(tmp_path / "v2"), 2, program(2, [(4, 0, 1 << 3 | kind)]))
    with pytest.raises(TraceFormatError, match=rf"thread 0 \('MainThread'\), event 4 has "
                                               rf"kind {kind}, which is reserved"):
        pytrace_cffi.load(directory)


@pytest.mark.parametrize("version", [1, 2])
def test_a_killed_process_of_either_version_is_recovered(tmp_path, version):
    """A process directory without meta.json (its process was killed) is read from
    process.json, keys.jsonl and events.bin: version 1's events as version 2's. A
    recovered region keeps its name, not its args (known only at stop)."""
    directory = tmp_path / "proc-7"
    directory.mkdir()
    (directory / "process.json").write_text(json.dumps(
        {"pid": 7, "ppid": 1, "argv": [], "host": "h", "label": "x", "root": True,
         "clock_name": "monotonic", "python": "3.12.1", "backend": "sys.monitoring"}))
    (directory / "keys.jsonl").write_text(json.dumps(
        {"first": 0, "keys": [[hash_id(name), kind, 0] for name, kind in zip(NAMES, KINDS)],
         "names": {hash_id(name): name for name in NAMES}, "tags_first": 0, "tags": TAGS,
         "start_ns": NS0, "tick0": TICK0}) + "\n")
    events = program(version)
    data = b"PTEVENTS" + struct.pack("<II", version, 8)
    data += struct.pack("<IIQq", 0, 0, len(events), TICK0)
    data += b"".join(struct.pack("<II", delta, word) for delta, word in events)
    (directory / "events.bin").write_bytes(data)
    from pytrace_cffi import processes
    trace = processes.recover(str(directory))
    assert calls_of(trace, str(tmp_path)) == sorted(
        (name, start, end, parent, "{}") for name, start, end, parent, _ in EXPECTED)


def test_spilled_events_are_version_2(tmp_path):
    out = tmp_path / "spill"
    pytrace_cffi.start(max_events=600, output=str(out))
    sorted(range(3))
    pytrace_cffi.stop()
    assert (out / "events.bin").read_bytes()[:16] == b"PTEVENTS\2\0\0\0\x08\0\0\0"


TAG_PAST_PAYLOAD = """
import sys
import pytrace_cffi
from pytrace_cffi import _torch
import workload

watched = _torch.TorchWatcher.tag
def tag(self, frame):
    return 1 << 26 if watched(self, frame) else 0      # past a TAG aux event's payload
_torch.TorchWatcher.tag = tag

model, optimizers, x = workload.make()
pytrace_cffi.start()
workload.train(model, optimizers, x)
try:
    pytrace_cffi.stop()
except pytrace_cffi.TraceError as exc:
    names = {c.name for c in exc.trace}
    print(exc)
    print(any(n.startswith("nn.Module") for n in names), "_wrapped_call_impl" in str(names))
"""


def test_a_tag_past_an_aux_payload_is_a_sticky_error():
    """A tag that an aux event cannot hold leaves its call untagged and stop() says so;
    it is never recorded as another tag."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [STAND_IN] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-c", TAG_PAST_PAYLOAD], env=env, cwd=STAND_IN,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    error, names = proc.stdout.splitlines()
    assert "a tag index past 2^26" in error
    assert names == "False True"
