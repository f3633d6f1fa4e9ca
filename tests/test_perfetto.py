"""Perfetto .pftrace export: decoded with the perfetto package's generated protos
and replayed as the trace processor would (sequences, incremental state,
interning, incremental clocks mapped by clock snapshots), it must say exactly
what the Chrome JSON of the same trace says."""
import gzip
import json
import os
import subprocess
import sys
import threading
import zlib

import pytest

import pytrace_cffi
from pytrace_cffi._core import ffi, lib
from pytrace_cffi.errors import TraceFormatError
from pytrace_cffi.model.trace import ThreadInfo, Trace

from helpers import perfetto_protos

pb = perfetto_protos()        # skips where not installed; fails in CI

SEQ_INCREMENTAL_STATE_CLEARED = 1
CLOCK_MONOTONIC = 3
CLOCK_REALTIME = 1
STANDARD_ARGS = ("Python id", "Python parent id", "Python thread")


# --- a replaying decoder -----------------------------------------------------

def _annotation_value(a):
    kind = a.WhichOneof("value")
    if kind is None:
        if a.dict_entries:
            return {e.name: _annotation_value(e) for e in a.dict_entries}
        if a.array_values:
            return [_annotation_value(e) for e in a.array_values]
        return None
    value = getattr(a, kind)
    return json.loads(value) if kind == "legacy_json_value" else value


class _Sequence:
    def __init__(self):
        self.valid = False

    def clear(self):
        self.valid = True
        self.names, self.categories, self.annotation_names = {}, {}, {}
        self.clock_id, self.track_uuid = None, None
        self.clocks = {}        # sequence clock id -> [last value, unit, incremental, offset]


def _packets(trace_bytes):
    """Every TracePacket, compressed_packets inflated in place."""
    outer = pb.Trace()
    outer.ParseFromString(trace_bytes)
    for packet in outer.packet:
        if packet.HasField("compressed_packets"):
            data = zlib.decompress(packet.compressed_packets)
            assert len(data) < 512 * 1024, "a compressed packet's input is 512 KiB or more"
            yield ("compressed", None)
            for inner in _packets(data):
                yield inner
        else:
            yield ("packet", packet)


def decode(path, named_tracks=False):
    """What a .pftrace holds: tracks, slices (rebuilt from begin/end per track,
    with depth), instants, counter values; times as CLOCK_MONOTONIC ns.
    named_tracks: tracks with a name only are allowed (a merge with torch writes
    them for torch's pids and tids that are not numbers); ours never are."""
    with open(path, "rb") as f:
        data = f.read()
    sequences = {}
    out = {"processes": {}, "threads": {}, "counters": {}, "named": {}, "slices": [],
           "instants": [],
           "counter_values": [], "compressed": 0, "primary_clock": None, "packets": 0}
    open_slices = {}            # track uuid -> stack of open slices
    tracks = {}                 # uuid -> (kind, parent uuid or None)
    for what, packet in _packets(data):
        if what == "compressed":
            out["compressed"] += 1
            continue
        out["packets"] += 1
        seq_id = packet.trusted_packet_sequence_id
        assert seq_id, "every packet names its sequence"
        seq = sequences.setdefault(seq_id, _Sequence())
        if packet.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
            seq.clear()
        if packet.HasField("trace_packet_defaults"):
            assert seq.valid
            defaults = packet.trace_packet_defaults
            if defaults.HasField("timestamp_clock_id"):
                seq.clock_id = defaults.timestamp_clock_id
            if defaults.track_event_defaults.HasField("track_uuid"):
                seq.track_uuid = defaults.track_event_defaults.track_uuid
        if packet.HasField("interned_data"):
            assert seq.valid, "interned data before the sequence's state was cleared"
            interned = packet.interned_data
            for entry in interned.event_names:
                seq.names[entry.iid] = entry.name
            for entry in interned.event_categories:
                seq.categories[entry.iid] = entry.name
            for entry in interned.debug_annotation_names:
                seq.annotation_names[entry.iid] = entry.name
        if packet.HasField("clock_snapshot"):
            snapshot = packet.clock_snapshot
            if snapshot.HasField("primary_trace_clock"):
                out["primary_clock"] = snapshot.primary_trace_clock
            clocks = {c.clock_id: c for c in snapshot.clocks}
            if CLOCK_REALTIME in clocks:
                out["realtime_at"] = (clocks[CLOCK_MONOTONIC].timestamp,
                                      clocks[CLOCK_REALTIME].timestamp)
            monotonic = clocks[CLOCK_MONOTONIC].timestamp
            for clock_id, c in clocks.items():
                if 64 <= clock_id < 128:
                    assert seq.valid
                    unit = c.unit_multiplier_ns or 1
                    seq.clocks[clock_id] = [c.timestamp * unit, unit, c.is_incremental,
                                            monotonic - c.timestamp * unit]
            continue
        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            # "named": a track with a name only (a merge's torch pid or tid that is
            # not a number); "root": the descriptor of uuid 0 (see track_descriptors)
            kind = ("process" if d.HasField("process") else "thread" if d.HasField("thread")
                    else "counter" if d.HasField("counter") else "root" if d.uuid == 0
                    else "named")
            place = (kind, d.parent_uuid if d.HasField("parent_uuid") else None)
            assert tracks.setdefault(d.uuid, place) == place, f"track {d.uuid} described twice"
            if d.HasField("process"):
                out["processes"][d.uuid] = (d.process.pid, d.process.process_name)
            elif d.HasField("thread"):
                out["threads"][d.uuid] = (d.thread.pid, d.thread.tid, d.thread.thread_name)
            elif d.HasField("counter"):
                out["counters"][d.uuid] = (d.name, d.parent_uuid)
            elif kind == "named":
                out["named"][d.uuid] = (d.name, place[1])
        if not packet.HasField("track_event"):
            continue
        assert seq.valid, "a track event before the sequence's state was cleared"
        clock_id = (packet.timestamp_clock_id if packet.HasField("timestamp_clock_id")
                    else seq.clock_id)
        assert packet.HasField("timestamp")
        if clock_id == CLOCK_MONOTONIC:
            ts = packet.timestamp
        else:
            clock = seq.clocks[clock_id]
            value = packet.timestamp * clock[1]
            if clock[2]:
                value = clock[0] = clock[0] + value
            ts = value + clock[3]
        event = packet.track_event
        track = event.track_uuid if event.HasField("track_uuid") else seq.track_uuid
        name = (seq.names[event.name_iid] if event.HasField("name_iid")
                else event.name if event.HasField("name") else None)
        categories = ([seq.categories[i] for i in event.category_iids]
                      + list(event.categories))
        args = {}
        for a in event.debug_annotations:
            key = seq.annotation_names[a.name_iid] if a.HasField("name_iid") else a.name
            args[key] = _annotation_value(a)
        stack = open_slices.setdefault(track, [])
        if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stack.append({"track": track, "name": name, "categories": categories,
                          "start": ts, "depth": len(stack), "args": args})
        elif event.type == pb.TrackEvent.TYPE_SLICE_END:
            s = stack.pop()
            s["end"] = ts
            s["args"].update(args)      # Perfetto adds an end's args to its slice's
            assert s["end"] >= s["start"]
            out["slices"].append(s)
        elif event.type == pb.TrackEvent.TYPE_INSTANT:
            out["instants"].append({"track": track, "name": name, "ts": ts, "args": args})
        elif event.type == pb.TrackEvent.TYPE_COUNTER:
            value = event.WhichOneof("counter_value_field")
            out["counter_values"].append((track, ts, getattr(event, value)))
    assert not any(open_slices.values()), "slices begun and never ended"
    assert named_tracks or not out["named"], f"tracks with a name only: {out['named']}"
    _check_track_tree(out, tracks)
    return out


def _check_track_tree(out, tracks):
    """Where every track hangs: a process track at the top, each thread track
    under the process track of its pid, each counter track under a process
    track, the root descriptor (uuid 0) alone, a named track (torch's events of
    a pid or tid that is no number, merged) at the top or under a process track
    or a named one (a pid that is no number);
    slices on thread or named tracks, instants on thread, process or named tracks,
    counter values on counter tracks."""
    for uuid, (kind, parent) in tracks.items():
        if kind == "root":
            assert parent is None, (uuid, parent)
        elif kind == "named":
            assert parent is None or tracks.get(parent, (None,))[0] in ("process", "named"), \
                f"named track {uuid} is under a track that is not a process's ({parent})"
        elif kind == "process":
            assert parent is None, f"process track {uuid} has a parent ({parent})"
        else:
            assert parent is not None and tracks.get(parent, (None,))[0] == "process", \
                f"{kind} track {uuid} is not under a process track (parent {parent})"
            if kind == "thread":
                assert out["threads"][uuid][0] == out["processes"][parent][0], \
                    f"thread track {uuid} (pid {out['threads'][uuid][0]}) is under the " \
                    f"track of pid {out['processes'][parent][0]}"
    assert {s["track"] for s in out["slices"]} <= set(out["threads"]) | set(out["named"])
    assert {i["track"] for i in out["instants"]} <= \
        set(out["threads"]) | set(out["processes"]) | set(out["named"])
    assert {track for track, _, _ in out["counter_values"]} <= set(out["counters"])


def load_json(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _ns(us):
    return round(us * 1000)


def json_view(trace, tmp_path):
    """The same facts from the Chrome JSON export, in decode()'s terms."""
    path = tmp_path / "same.json"
    trace.export_chrome_trace(str(path))
    data = load_json(path)
    base = data["otherData"]["start_monotonic_ns"]
    events = data["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    xs = [e for e in events if e["ph"] == "X"]
    by_id = {e["args"]["Python id"]: e for e in xs}
    depth = {}
    for e in xs:                    # parents come first
        parent = e["args"]["Python parent id"]
        depth[e["args"]["Python id"]] = 0 if parent is None else depth[parent] + 1
        assert parent is None or by_id[parent]["tid"] == e["tid"]
    slices = sorted(
        (e["tid"], names[e["tid"]], e["name"], e["cat"], base + _ns(e["ts"]),
         base + _ns(e["ts"]) + _ns(e["dur"]), depth[e["args"]["Python id"]],
         json.dumps({k: v for k, v in e["args"].items() if k not in STANDARD_ARGS},
                    sort_keys=True))
        for e in xs)
    instants = sorted((e["tid"], e["name"], base + _ns(e["ts"]), json.dumps(e["args"]))
                      for e in events if e["ph"] == "i")
    counters = sorted((e["name"], series, base + _ns(e["ts"]), value)
                      for e in events if e["ph"] == "C" for series, value in e["args"].items())
    return {"slices": slices, "instants": instants, "counters": counters,
            "other": data["otherData"], "names": names}


def pftrace_view(decoded):
    threads = decoded["threads"]
    slices = sorted(
        (threads[s["track"]][1], threads[s["track"]][2], s["name"], s["categories"][0],
         s["start"], s["end"], s["depth"],
         json.dumps({k: v for k, v in s["args"].items() if k != "open at stop"},
                    sort_keys=True))
        for s in decoded["slices"])
    instants = sorted((threads[i["track"]][1], i["name"], i["ts"],
                       json.dumps(i["args"]))
                      for i in decoded["instants"] if i["track"] in threads)
    counters = []
    for track, ts, value in decoded["counter_values"]:
        title = decoded["counters"][track][0]
        counters.append((title, ts, value))
    facts = [i for i in decoded["instants"] if i["name"] == "pytrace_cffi"]
    return {"slices": slices, "instants": instants, "counters": sorted(counters),
            "facts": facts}


def assert_same_as_json(trace, tmp_path, compress):
    path = tmp_path / "out.pftrace"
    assert trace.export_perfetto(str(path), compress=compress) == str(path)
    decoded = decode(path)
    assert (decoded["compressed"] > 0) == compress
    assert decoded["primary_clock"] == CLOCK_MONOTONIC
    if trace.realtime_anchor is None:                 # e.g. read from an old file
        assert "realtime_at" not in decoded
    else:                                             # CLOCK_REALTIME mapped as the JSON's
        anchor = trace.realtime_anchor["start"]
        assert decoded["realtime_at"] == (trace.start_ns, anchor["realtime_ns"]
                                          + trace.start_ns - anchor["monotonic_ns"])
    ours, theirs = pftrace_view(decoded), json_view(trace, tmp_path)
    assert len(ours["slices"]) == len(trace)
    assert ours["slices"] == theirs["slices"]
    assert ours["instants"] == theirs["instants"]
    # counter tracks are named "<name> <series>", or "<name>" for a plain number
    expected = sorted((name if series == name else f"{name} {series}", ts, value)
                      for name, series, ts, value in theirs["counters"])
    assert ours["counters"] == expected
    assert len(ours["facts"]) == 1
    assert ours["facts"][0]["args"] == theirs["other"]
    # one process: its track is named after the program (test_cli_output checks
    # that name by hand), "python" for a trace that does not know it
    assert list(decoded["processes"].values()) == [(trace.pid, trace.label or "python")]
    assert sorted((tid, name) for _, tid, name in decoded["threads"].values()) == \
        sorted(theirs["names"].items())
    return decoded


# --- traces ------------------------------------------------------------------

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


@pytest.fixture(scope="module")
def rich_trace():
    """Two threads, instants, counters (int, float, dict), a region with args."""
    def worker():
        pytrace_cffi.instant("worker says", {"step": 3, "ok": True, "what": "x"})
        fib(7)

    with pytrace_cffi.trace() as t:
        thread = threading.Thread(target=worker, name="pftrace-worker")
        thread.start()
        pytrace_cffi.counter("loss", 0.25)
        with pytrace_cffi.record_function("a region", {"batch": 7, "lr": 0.5}):
            fib(9)
        pytrace_cffi.instant("plain")
        pytrace_cffi.counter("memory", {"rss": 1 << 40, "heap": 1.5})
        pytrace_cffi.counter("memory", {"rss": 3, "heap": 2})
        thread.join()
    return t.trace


@pytest.mark.parametrize("compress", [True, False])
def test_pftrace_says_what_the_json_says(rich_trace, tmp_path, compress):
    decoded = assert_same_as_json(rich_trace, tmp_path, compress)
    names = {s["name"] for s in decoded["slices"]}
    assert any(n.endswith(": fib") for n in names)
    assert {"pftrace-worker", "MainThread"} <= {t[2] for t in decoded["threads"].values()}
    regions = [s for s in decoded["slices"] if s["name"] == "a region"]
    assert len(regions) == 1
    assert regions[0]["categories"] == ["user_annotation"]
    assert regions[0]["args"] == {"batch": 7, "lr": 0.5}
    assert {s["categories"][0] for s in decoded["slices"]} == {"python_function",
                                                               "user_annotation"}
    assert len([i for i in decoded["instants"] if i["name"] == "worker says"]) == 1
    assert len(decoded["counters"]) == 3      # loss, memory rss, memory heap
    assert len({track for track, _, _ in decoded["counter_values"]}) == 3


def test_slices_open_at_stop_are_flagged(rich_trace, tmp_path):
    path = tmp_path / "open.pftrace"
    rich_trace.export_perfetto(str(path))
    flagged = sorted((s["start"], s["name"]) for s in decode(path)["slices"]
                     if s["args"].get("open at stop") is True)
    expected = sorted((slices[i].start, rich_trace.names[slices[i].key])
                      for _, slices, n in rich_trace.thread_slices() for i in range(n)
                      if slices[i].flags & lib.PT_SLICE_OPEN_AT_STOP)
    assert expected, "the test's own frame is open at stop"
    assert flagged == expected


def test_an_export_while_tracing_records_nothing_of_ours(rich_trace, tmp_path):
    """A program that exports a trace while another records: neither our export's
    calls nor its encoder threads are in the recording."""
    with pytrace_cffi.trace() as t:
        fib(4)
        rich_trace.export_perfetto(str(tmp_path / "during.pftrace"))
        fib(3)
    assert [thread.name for thread in t.trace.threads] == ["MainThread"]
    assert not [c.name for c in t.trace if "pytrace_cffi" in c.name]
    assert sum(c.name.endswith(": fib") for c in t.trace) == 9 + 5
    decoded = decode(tmp_path / "during.pftrace")                # and it was written whole
    assert decoded["compressed"] > 0 and len(decoded["slices"]) == len(rich_trace)


def _started_inside(depth):
    if depth:
        return _started_inside(depth - 1)
    pytrace_cffi.start()
    fib(5)
    return pytrace_cffi.stop()


def test_slices_open_at_start_are_flagged(tmp_path):
    """Frames running when the trace began carry "open at start": true, from the
    walk's records and from the slice table alike."""
    trace = _started_inside(3)
    found = []
    for form in ("records", "slices"):
        path = tmp_path / f"{form}.pftrace"
        trace.export_perfetto(str(path))
        found.append(sorted((s["start"], s["name"].rsplit(": ", 1)[1])
                            for s in decode(path)["slices"]
                            if s["args"].get("open at start") is True))
        assert trace.slices_built() == (form == "slices")
        list(trace.thread_slices())               # the next export reads the table
    expected = sorted((slices[i].start, trace.names[slices[i].key].rsplit(": ", 1)[1])
                      for _, slices, n in trace.thread_slices() for i in range(n)
                      if slices[i].flags & lib.PT_SLICE_SEEDED)
    assert [name for _, name in expected].count("_started_inside") == 4
    assert found == [expected, expected]


def test_module_args_dropped_events_and_a_thread_without_calls(rich_trace, tmp_path):
    """Per-key args (as torch modules get "Python module id") become debug
    annotations; dropped events are in the facts; a thread with no calls still
    gets its track."""
    names = list(rich_trace.names) + ["nn.Module: Linear_0"]
    kinds = list(rich_trace.key_kinds) + ["python"]
    module_key = len(names) - 1
    threads, slices = [], []
    for thread, array, n in rich_trace.thread_slices():
        copy = ffi.new("pt_slice[]", max(1, n))
        ffi.memmove(copy, array, n * ffi.sizeof("pt_slice"))
        for i in range(n):
            parent = copy[i].parent
            if names[copy[i].key].endswith(": fib") and (
                    parent < 0 or not names[array[parent].key].endswith(": fib")):
                copy[i].key = module_key            # the outermost fib calls
        threads.append(thread)
        slices.append((copy, n))
    threads.append(ThreadInfo(len(threads), 4242, 4242, "idle thread", 0, 5))
    slices.append((ffi.new("pt_slice[]", 1), 0))
    trace = Trace(names=names, key_kinds=kinds,
                  key_args={**rich_trace.key_args, module_key: {"Python module id": 140000}},
                  threads=threads, slices=slices, start_ns=rich_trace.start_ns,
                  stop_ns=rich_trace.stop_ns, pid=rich_trace.pid,
                  python_version=rich_trace.python_version, backend=rich_trace.backend,
                  clock=rich_trace.clock, params=rich_trace.params, marks=rich_trace.marks,
                  dropped_events=7)
    for compress in (True, False):
        decoded = assert_same_as_json(trace, tmp_path, compress)
        modules = [s for s in decoded["slices"] if s["name"] == "nn.Module: Linear_0"]
        assert len(modules) == 2        # the outermost fib of each thread
        assert all(s["args"] == {"Python module id": 140000} for s in modules)
        facts = [i for i in decoded["instants"] if i["name"] == "pytrace_cffi"][0]
        assert facts["args"]["dropped_events"] == 7
        idle = [uuid for uuid, t in decoded["threads"].items() if t[2] == "idle thread"]
        assert len(idle) == 1 and (trace.pid, 4242, "idle thread") == decoded["threads"][idle[0]]
        assert not [s for s in decoded["slices"] if s["track"] == idle[0]]


def test_big_trace_spans_several_compressed_packets(tmp_path):
    with pytrace_cffi.trace() as t:
        fib(21)                     # ~29k calls: well over one 256 KiB packet of input
    decoded = assert_same_as_json(t.trace, tmp_path, compress=True)
    assert decoded["compressed"] >= 2
    uncompressed = tmp_path / "plain.pftrace"
    t.trace.export_perfetto(str(uncompressed), compress=False)
    assert os.path.getsize(tmp_path / "out.pftrace") * 4 < os.path.getsize(uncompressed)
    # names are interned once per sequence, not per call
    assert os.path.getsize(uncompressed) < 40 * len(t.trace)


def test_out_of_order_slices_raise_and_leave_no_file(rich_trace, tmp_path):
    thread, array, n = next(iter(rich_trace.thread_slices()))
    copy = ffi.new("pt_slice[]", n)
    ffi.memmove(copy, array, n * ffi.sizeof("pt_slice"))
    copy[n - 1].start, copy[n - 1].end = rich_trace.start_ns - 10, rich_trace.start_ns - 5
    copy[n - 1].parent, copy[n - 1].depth = -1, 0
    trace = Trace(names=rich_trace.names, key_kinds=rich_trace.key_kinds, key_args={},
                  threads=[thread], slices=[(copy, n)], start_ns=rich_trace.start_ns,
                  stop_ns=rich_trace.stop_ns, pid=rich_trace.pid, python_version="x",
                  backend="x", clock="x", params={})
    path = tmp_path / "bad.pftrace"
    with pytest.raises(TraceFormatError, match="out of time order"):
        trace.export_perfetto(str(path))
    assert os.listdir(tmp_path) == []


def test_a_call_before_the_trace_start_keeps_its_time(rich_trace, tmp_path):
    """A loaded trace may hold a call that began before its start_ns (the JSON
    writes such a ts as 0): the sequence's clock starts early enough for it."""
    thread, array, n = next(iter(rich_trace.thread_slices()))
    copy = ffi.new("pt_slice[]", n)
    ffi.memmove(copy, array, n * ffi.sizeof("pt_slice"))
    copy[0].start = rich_trace.start_ns - 1000
    trace = Trace(names=rich_trace.names, key_kinds=rich_trace.key_kinds, key_args={},
                  threads=[thread], slices=[(copy, n)], start_ns=rich_trace.start_ns,
                  stop_ns=rich_trace.stop_ns, pid=rich_trace.pid, python_version="x",
                  backend="x", clock="x", params={})
    path = tmp_path / "early.pftrace"
    trace.export_perfetto(str(path))
    starts = sorted(s["start"] for s in decode(path)["slices"])
    assert starts == sorted(copy[i].start for i in range(n))
    assert starts[0] == rich_trace.start_ns - 1000


def test_names_that_utf8_cannot_hold_become_replacement_characters(rich_trace, tmp_path):
    thread, array, n = next(iter(rich_trace.thread_slices()))
    names = list(rich_trace.names)
    names[array[0].key] = "/tmp/caf\udce9.py(1): f"    # surrogateescape of a latin-1 path
    trace = Trace(names=names, key_kinds=rich_trace.key_kinds, key_args={},
                  threads=[thread], slices=[(array, n)], start_ns=rich_trace.start_ns,
                  stop_ns=rich_trace.stop_ns, pid=rich_trace.pid, python_version="x",
                  backend="x", clock="x", params={})
    path = tmp_path / "odd.pftrace"
    trace.export_perfetto(str(path))
    # the undecodable byte is U+FFFD: the strings of a .pftrace are UTF-8
    assert "/tmp/caf\ufffd.py(1): f" in {s["name"] for s in decode(path)["slices"]}


def test_cli_run_and_export_write_pftrace(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("def f(n):\n    return n if n < 2 else f(n - 1) + f(n - 2)\nf(12)\n")
    out = tmp_path / "run.pftrace"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "-o", str(out), str(script)],
                   check=True, env=env, cwd=tmp_path)
    calls = [s for s in decode(out)["slices"] if s["name"].endswith("prog.py(1): f")]
    assert len(calls) == 465
    saved = tmp_path / "saved"
    subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "-o", str(saved), str(script)],
                   check=True, env=env, cwd=tmp_path)
    again = tmp_path / "again.pftrace"
    subprocess.run([sys.executable, "-m", "pytrace_cffi", "export", str(saved), "-o",
                    str(again)], check=True, env=env, cwd=tmp_path, capture_output=True)
    (tmp_path / "compare").mkdir()
    assert_same_as_json(pytrace_cffi.load(str(saved)), tmp_path / "compare", True)
    assert len([s for s in decode(again)["slices"]
                if s["name"].endswith("prog.py(1): f")]) == 465


def test_a_single_process_track_is_named_after_the_program(tmp_path):
    """run -o x.pftrace prog.py: the one process's track reads "prog.py", not
    "python"; kept through a .json and a saved directory exported again, and
    for `-m module` and the API too."""
    (tmp_path / "prog.py").write_text("def f():\n    return 1\nf()\n")
    (tmp_path / "api.py").write_text(
        "import pytrace_cffi\nwith pytrace_cffi.trace() as t:\n    sum([1])\n"
        "t.export_perfetto('api.pftrace')\n")
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "__init__.py").write_text("")
    (tmp_path / "tool" / "__main__.py").write_text("def g():\n    return 2\ng()\n")

    def cli(*args):
        proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr

    def process_names(name):
        return [label for _, label in decode(tmp_path / name)["processes"].values()]
    cli("run", "-o", "direct.pftrace", "prog.py")
    cli("run", "--no-follow", "-o", "alone.pftrace", "prog.py")
    cli("run", "--no-follow", "-o", "t.json", "prog.py")
    cli("export", "t.json", "-o", "from_json.pftrace")
    cli("export", "t.json", "-o", "saved")
    cli("export", "saved", "-o", "from_saved.pftrace")
    cli("run", "-o", "module.pftrace", "-m", "tool")
    subprocess.run([sys.executable, "api.py"], cwd=tmp_path, check=True, timeout=120)
    for name in ("direct", "alone", "from_json", "from_saved"):
        assert process_names(f"{name}.pftrace") == ["prog.py"], name
    assert process_names("module.pftrace") == ["tool"]
    assert process_names("api.pftrace") == ["api.py"]


def test_signal_windows_number_pftrace_files_before_the_suffix():
    from pytrace_cffi.formats import numbered
    assert numbered("out.pftrace", 2) == "out.2.pftrace"      # was out.pftrace.2: a directory


def test_torch_modules_and_optimizer_steps(tmp_path):
    """A real torch run: module calls and optimizer steps keep their names and
    their "Python module id" annotations, exactly as in the JSON."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 4)

    def step():
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

    step()
    with pytrace_cffi.trace() as t:
        step()
    decoded = assert_same_as_json(t.trace, tmp_path, compress=True)
    modules = [s for s in decoded["slices"] if s["name"].startswith("nn.Module: ")]
    assert len(modules) == 4            # Sequential, Linear, ReLU, Linear
    assert all(isinstance(s["args"]["Python module id"], int) for s in modules)
    assert any(s["name"].startswith("Optimizer.step#") for s in decoded["slices"])
