"""The realtime anchor every trace keeps, and merge_torch / `merge` putting a
trace on torch.profiler's timeline: on every interpreter with synthetic torch
traces; on the real torch (3.11) with a small CNN."""
import collections
import json
import os
import subprocess
import sys
import threading
import time

import pytest

import pytrace_cffi
from helpers import PROC_STATUS, chrome_crossings, pftrace_thread_events
from pytrace_cffi.__main__ import main
from pytrace_cffi.model.realtime import monotonic_to_realtime


def work():
    total = 0
    for i in range(200):
        total += len(str(i))
    return total


@pytest.fixture
def traced():
    with pytrace_cffi.trace() as t:
        work()
        time.sleep(0.002)
        work()
    return t.trace


# -- the anchor ---------------------------------------------------------------

def test_every_trace_pairs_monotonic_and_realtime_clocks_at_start_and_stop(traced):
    anchor = traced.realtime_anchor
    assert set(anchor) == {"start", "stop"}
    start, stop = anchor["start"], anchor["stop"]
    # read around the trace's own start and stop
    assert start["monotonic_ns"] <= traced.start_ns
    assert traced.stop_ns <= stop["monotonic_ns"] < traced.stop_ns + 10_000_000
    assert stop["monotonic_ns"] - start["monotonic_ns"] >= 2_000_000
    # the same pairing time.time_ns()/time.monotonic_ns() give (loosely: those two
    # reads are not one moment), and a tight spread
    offset = time.time_ns() - time.monotonic_ns()
    for moment in (start, stop):
        assert abs(moment["realtime_ns"] - moment["monotonic_ns"] - offset) < 5_000_000
        assert 0 <= moment["spread_ns"] < 5_000_000


def test_the_anchor_is_kept_by_json_saved_and_spilled_traces(traced, tmp_path):
    from pytrace_cffi.reading import read_trace
    anchor = traced.realtime_anchor
    traced.export_chrome_trace(str(tmp_path / "t.json"))
    other = json.loads((tmp_path / "t.json").read_text())["otherData"]
    assert other["realtime_anchor"] == anchor
    assert read_trace(str(tmp_path / "t.json")).realtime_anchor == anchor
    traced.save(str(tmp_path / "saved"))
    meta = json.loads((tmp_path / "saved" / "meta.json").read_text())
    assert meta["realtime_anchor"] == anchor
    assert pytrace_cffi.load(str(tmp_path / "saved")).realtime_anchor == anchor
    spilled = pytrace_cffi.trace(max_events=16, output=str(tmp_path / "spill"))
    with spilled:
        work()
    loaded = spilled.trace.load()
    assert loaded.realtime_anchor["start"]["monotonic_ns"] <= loaded.start_ns
    assert loaded.realtime_anchor["stop"]["monotonic_ns"] >= loaded.stop_ns


def test_files_without_an_anchor_still_load_and_bad_ones_are_refused(traced, tmp_path):
    from pytrace_cffi.reading import read_trace
    traced.save(str(tmp_path / "saved"))
    meta_path = tmp_path / "saved" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["realtime_anchor"]                         # written before anchors existed
    meta_path.write_text(json.dumps(meta))
    assert pytrace_cffi.load(str(tmp_path / "saved")).realtime_anchor is None
    for bad in ({"start": {}}, {"start": None, "stop": None}, [1, 2],
                {"start": {"monotonic_ns": 1, "realtime_ns": 2, "spread_ns": -1},
                 "stop": {"monotonic_ns": 1, "realtime_ns": 2, "spread_ns": 0}},
                {"start": {"monotonic_ns": 1.5, "realtime_ns": 2, "spread_ns": 0},
                 "stop": {"monotonic_ns": 1, "realtime_ns": 2, "spread_ns": 0}}):
        meta["realtime_anchor"] = bad
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(pytrace_cffi.TraceFormatError, match="realtime_anchor"):
            pytrace_cffi.load(str(tmp_path / "saved"))
    traced.export_chrome_trace(str(tmp_path / "t.json"))
    data = json.loads((tmp_path / "t.json").read_text())
    data["otherData"]["realtime_anchor"] = {"start": 1}
    (tmp_path / "t.json").write_text(json.dumps(data))
    with pytest.raises(pytrace_cffi.TraceFormatError, match="realtime_anchor"):
        read_trace(str(tmp_path / "t.json"))


def test_monotonic_to_realtime_interpolates_the_offset_between_start_and_stop():
    anchor = {"start": {"monotonic_ns": 1000, "realtime_ns": 5000, "spread_ns": 0},
              "stop": {"monotonic_ns": 3000, "realtime_ns": 7400, "spread_ns": 0}}
    assert monotonic_to_realtime(anchor, 1000) == 5000
    assert monotonic_to_realtime(anchor, 3000) == 7400
    assert monotonic_to_realtime(anchor, 2000) == 6200      # offset 4000 -> 4400
    assert monotonic_to_realtime(anchor, 0) == 4000          # held outside
    assert monotonic_to_realtime(anchor, 4000) == 8400


# -- merging with synthetic torch traces -----------------------------------------

# torch.profiler's baseTimeNanoseconds: whole seconds some weeks back, so that ts
# (µs) keeps nanosecond precision in a double, as in torch's own files
BASE_NS = (time.time_ns() // 10 ** 9 - 50 * 86400) * 10 ** 9


def torch_us(trace, monotonic_ns):
    """Where torch.profiler would stamp a moment of our monotonic clock."""
    return (monotonic_to_realtime(trace.realtime_anchor, monotonic_ns) - BASE_NS) / 1000


def synthetic_torch_trace(trace, path, tid):
    """A torch.profiler-shaped trace: a cpu_op inside our first `len` call, a
    with_stack python_function event on our thread within our time and one after,
    a python_function on another thread, a GPU kernel, torch's thread_name."""
    call = next(c for c in trace if c.kind == "c" and c.name.endswith("len"))
    pid = trace.pid
    events = [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
         "args": {"name": f"thread {tid} (python)"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::fake", "pid": pid, "tid": tid,
         "ts": torch_us(trace, call.start_ns + 1), "dur": (call.end_ns - call.start_ns - 2)
         / 1000, "args": {"External id": 1}},
        {"ph": "X", "cat": "python_function", "name": "work", "pid": pid, "tid": tid,
         "ts": torch_us(trace, trace.start_ns + 10), "dur": 5.0, "args": {}},
        {"ph": "X", "cat": "python_function", "name": "later", "pid": pid, "tid": tid,
         "ts": torch_us(trace, trace.stop_ns + 1_000_000), "dur": 5.0, "args": {}},
        {"ph": "X", "cat": "python_function", "name": "elsewhere", "pid": pid, "tid": tid + 1,
         "ts": torch_us(trace, trace.start_ns + 10), "dur": 5.0, "args": {}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 1, "tid": 7,
         "ts": torch_us(trace, call.start_ns), "dur": 1.0, "args": {}},
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS,
                                "displayTimeUnit": "ms", "traceEvents": events}))
    return call


def test_a_call_of_ours_crossing_one_of_torchs_ops_is_left_out_and_counted(traced, tmp_path):
    """Our clock and torch's reach CLOCK_REALTIME apart; a call of ours holds the
    aten op it runs by a few hundred ns only, so a clock reading off by that much
    makes them cross (#34 item 8). Here torch's op begins between the calls before
    our 100th len call and its start, and ends inside it: that call is left out,
    counted, and every track nests, in .json and .pftrace."""
    tid = threading.get_native_id()
    lens = [c for c in traced if c.kind == "c" and c.name.endswith("len")]
    call = lens[100]
    before = max(max(c.end_ns for c in traced if c.end_ns <= call.start_ns),
                 max(c.start_ns for c in traced if c.start_ns < call.start_ns <= c.end_ns
                     and c is not call))
    start, end = (before + call.start_ns) // 2, (call.start_ns + call.end_ns) // 2
    assert before < start < call.start_ns < end < call.end_ns
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::shifted", "pid": traced.pid,
               "tid": tid, "ts": torch_us(traced, start), "dur": (end - start) / 1000,
               "args": {}}]
    (tmp_path / "torch.json").write_text(json.dumps(
        {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": events}))
    pytrace_cffi.merge_torch(traced, tmp_path / "torch.json", tmp_path / "merged.json")
    data, merged = merged_events(tmp_path / "merged.json")
    assert chrome_crossings(merged) == []
    assert data["pytrace_cffi"]["our_calls_crossing_torchs_ops_left_out"] == 1
    assert data["pytrace_cffi"]["our_calls_crossing_torchs_regions_left_out"] == 0
    kept = [e for e in merged if e.get("ph") == "X" and e["name"].endswith("len")]
    assert len(kept) == len(lens) - 1
    traced.export_perfetto(str(tmp_path / "ours.pftrace"))
    our_tracks = set(_decode(tmp_path / "ours.pftrace")["threads"])
    pytrace_cffi.merge_torch(traced, tmp_path / "torch.json", tmp_path / "merged.pftrace")
    decoded = _decode(tmp_path / "merged.pftrace")
    slices = pftrace_thread_events(decoded, our_tracks)
    assert chrome_crossings(slices) == []
    assert sum(1 for e in slices if e["ours"] and e["name"].endswith("len")) == len(lens) - 1
    info = next(i for i in decoded["instants"] if i["name"] == "torch.profiler")
    assert info["args"]["our_calls_crossing_torchs_ops_left_out"] == 1


def merged_events(path):
    data = json.loads(path.read_text())
    return data, data["traceEvents"]


def test_merge_puts_our_calls_on_torchs_timeline(traced, tmp_path):
    tid = threading.get_native_id()
    call = synthetic_torch_trace(traced, tmp_path / "torch.json", tid)
    out = pytrace_cffi.merge_torch(traced, str(tmp_path / "torch.json"),
                                   str(tmp_path / "merged.json"))
    assert out == str(tmp_path / "merged.json")
    data, events = merged_events(tmp_path / "merged.json")
    assert data["baseTimeNanoseconds"] == BASE_NS and data["schemaVersion"] == 1
    assert data["pytrace_cffi"]["trace"]["realtime_anchor"] == traced.realtime_anchor
    ours = [e for e in events if e.get("ph") == "X" and "Python id" in e.get("args", {})]
    assert len(ours) == len(traced)
    first = min(ours, key=lambda e: e["ts"])
    first_call = min(traced, key=lambda c: c.start_ns)
    assert first["ts"] == pytest.approx(torch_us(traced, first_call.start_ns), abs=0.0011)
    strs = [e for e in ours if e["name"] == call.name and e["tid"] == tid]
    op = next(e for e in events if e.get("name") == "aten::fake")
    # the op torch stamped inside our call lies inside it after merging, same track
    inside = [e for e in strs if e["ts"] <= op["ts"] and op["ts"] + op["dur"] <= e["ts"] + e["dur"]]
    assert len(inside) == 1 and inside[0]["pid"] == op["pid"]
    assert inside[0]["ts"] == pytest.approx(torch_us(traced, call.start_ns), abs=0.0011)
    names = [e["name"] for e in events]
    # torch's Python events that ours duplicate are gone; the others stay
    assert "work" not in names and "later" in names and "elsewhere" in names
    assert "gemm" in names
    assert data["pytrace_cffi"]["torch_python_function_events_replaced"] == 1
    thread_names = [e for e in events if e.get("name") == "thread_name" and e["tid"] == tid]
    assert [e["args"]["name"] for e in thread_names] == [threading.current_thread().name]


def test_merge_follows_the_anchor_when_the_clocks_drift(traced, tmp_path):
    # CLOCK_REALTIME slewed 40 µs between start and stop: the end of the trace moves
    # by that much, its start not at all
    anchor = traced.realtime_anchor
    anchor["stop"]["realtime_ns"] += 40_000
    tid = threading.get_native_id()
    synthetic_torch_trace(traced, tmp_path / "torch.json", tid)
    pytrace_cffi.merge_torch(traced, tmp_path / "torch.json", tmp_path / "merged.json.gz")
    import gzip
    data = json.loads(gzip.open(tmp_path / "merged.json.gz").read())
    ours = [e for e in data["traceEvents"] if e.get("ph") == "X" and "Python id" in e["args"]]
    last_call = max(traced, key=lambda c: c.end_ns)
    last = max(ours, key=lambda e: e["ts"] + e["dur"])
    expected_end = torch_us(traced, last_call.end_ns)
    assert last["ts"] + last["dur"] == pytest.approx(expected_end, abs=0.002)
    anchor["stop"]["realtime_ns"] -= 40_000
    assert torch_us(traced, last_call.end_ns) == pytest.approx(expected_end - 40 * (
        (last_call.end_ns - anchor["start"]["monotonic_ns"])
        / (anchor["stop"]["monotonic_ns"] - anchor["start"]["monotonic_ns"])), abs=0.002)


def test_merge_reads_our_json_and_saved_traces_and_the_cli_does_the_same(traced, tmp_path):
    tid = threading.get_native_id()
    synthetic_torch_trace(traced, tmp_path / "torch.json", tid)
    pytrace_cffi.merge_torch(traced, tmp_path / "torch.json", tmp_path / "a.json")
    traced.export_chrome_trace(str(tmp_path / "ours.json"))
    traced.save(str(tmp_path / "saved"))
    assert main(["merge", str(tmp_path / "ours.json"), str(tmp_path / "torch.json"),
                 "-o", str(tmp_path / "b.json")]) == 0
    assert main(["merge", str(tmp_path / "saved"), str(tmp_path / "torch.json"),
                 "-o", str(tmp_path / "c.json")]) == 0
    # The torch trace is told apart by its content, not by its place.
    assert main(["merge", str(tmp_path / "torch.json"), str(tmp_path / "saved"),
                 "-o", str(tmp_path / "d.json")]) == 0
    a, b, c, d = (merged_events(tmp_path / name)[1]
                  for name in ("a.json", "b.json", "c.json", "d.json"))
    key = lambda e: (e.get("ph"), e.get("name"), e.get("tid"), e.get("ts"))  # noqa: E731
    assert sorted(map(key, a)) == sorted(map(key, b)) == sorted(map(key, c)) \
        == sorted(map(key, d))
    with pytest.raises(SystemExit, match="one of our traces and one torch trace"):
        main(["merge", str(tmp_path / "torch.json"), str(tmp_path / "torch.json"),
              "-o", str(tmp_path / "e.json")])
    with pytest.raises(SystemExit, match="name it .json"):
        main(["merge", str(tmp_path / "ours.json"), str(tmp_path / "torch.json"),
              "-o", str(tmp_path / "out.html")])


def test_merge_refuses_what_it_cannot_place(traced, tmp_path):
    tid = threading.get_native_id()
    synthetic_torch_trace(traced, tmp_path / "torch.json", tid)
    traced.export_chrome_trace(str(tmp_path / "ours.json"))
    error = pytrace_cffi.TraceFormatError
    with pytest.raises(error, match="does not exist"):
        pytrace_cffi.merge_torch(traced, tmp_path / "missing.json", tmp_path / "m.json")
    with pytest.raises(error, match="pytrace_cffi trace, not torch"):
        pytrace_cffi.merge_torch(traced, tmp_path / "ours.json", tmp_path / "m.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(error, match="not valid JSON"):
        pytrace_cffi.merge_torch(traced, tmp_path / "junk.json", tmp_path / "m.json")
    with pytest.raises(error, match="not written by pytrace_cffi"):
        pytrace_cffi.merge_torch(tmp_path / "torch.json", tmp_path / "torch.json",
                                 tmp_path / "m.json")
    data = json.loads((tmp_path / "ours.json").read_text())
    data["otherData"]["realtime_anchor"] = None          # an older pytrace_cffi's file
    (tmp_path / "old.json").write_text(json.dumps(data))
    with pytest.raises(error, match="no realtime anchor"):
        pytrace_cffi.merge_torch(tmp_path / "old.json", tmp_path / "torch.json",
                                 tmp_path / "m.json")
    with pytest.raises(TypeError):
        pytrace_cffi.merge_torch(42, tmp_path / "torch.json", tmp_path / "m.json")
    assert not os.path.exists(tmp_path / "m.json")


# -- merging with the real torch.profiler (3.11 here) ---------------------------

def test_every_conv2d_op_lies_inside_its_python_call_after_merging(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 8, 3), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 2 * 2, 2))
    optimizer = torch.optim.AdamW(net.parameters())
    x, y = torch.randn(4, 1, 8, 8), torch.randint(0, 2, (4,))

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()

    step()                                                   # warm-up
    steps = 4
    with pytrace_cffi.trace() as t:
        with profile(activities=[ProfilerActivity.CPU]) as prof:      # no with_stack
            for _ in range(steps):
                step()
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    pytrace_cffi.merge_torch(t.trace, tmp_path / "torch.json", tmp_path / "merged.json")
    events = [e for e in merged_events(tmp_path / "merged.json")[1] if e.get("ph") == "X"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::conv2d"]
    # torch.conv2d, the built-in Conv2d._conv_forward calls
    calls = [e for e in events if e.get("cat") == "python_function" and e["name"] == "conv2d"
             and "Python id" in e["args"]]
    assert len(ops) == len(calls) == 3 * steps
    # within the anchors' own uncertainty
    slack = max(m["spread_ns"] for m in t.trace.realtime_anchor.values()) / 1000
    holders = []
    for op in ops:
        around = [c for c in calls if (c["pid"], c["tid"]) == (op["pid"], op["tid"])
                  and c["ts"] - slack <= op["ts"]
                  and op["ts"] + op["dur"] <= c["ts"] + c["dur"] + slack]
        assert len(around) == 1, op
        holders.append(around[0]["args"]["Python id"])
    assert len(set(holders)) == len(ops)             # each op in a call of its own
    # torch's regions keep their own events beside ours
    annotations = {e["name"] for e in events if e.get("cat") == "user_annotation"
                   and "Python id" not in e["args"]}
    assert "Optimizer.step#AdamW.step" in annotations


def _is_ours(event):
    return "Python id" in event.get("args", {})


def _region_holders(events, region, is_ours=_is_ours):
    """Our calls (events with a "Python id") on region's track that hold it, and
    those within it."""
    start, end = region["ts"], region["ts"] + region["dur"]
    ours = [e for e in events if e.get("ph") == "X" and is_ours(e)
            and (e["pid"], e["tid"]) == (region["pid"], region["tid"])]
    around = [e for e in ours if e["ts"] <= start and end <= e["ts"] + e["dur"]]
    inside = [e for e in ours if start <= e["ts"] and e["ts"] + e["dur"] <= end]
    return around, inside


def _merged_by_api_and_cli(trace, tmp_path, suffix):
    """The names of trace merged with tmp_path/torch.json by merge_torch and by
    `merge ours.json torch.json -o OUT` (OUT ending in suffix)."""
    pytrace_cffi.merge_torch(trace, tmp_path / "torch.json", tmp_path / f"api{suffix}")
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "merge", "ours.json",
                           "torch.json", "-o", f"cli{suffix}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return f"api{suffix}", f"cli{suffix}"


def test_torchs_regions_are_kept_once_and_every_track_nests(tmp_path):
    """Ours and torch.profiler's both hold each record_function region; torch's
    begins inside the op that opens it and ends inside the one that closes it.
    Merged: torch's region alone, once per region, and our calls strictly nested
    around and inside it, by merge_torch and by `merge OURS TORCH -o OUT`, in .json
    and .pftrace."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 8), torch.randn(32, 1)

    def step():
        with record_function("train_step"):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()

    step()                                                   # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with pytrace_cffi.trace() as t:
            for _ in range(5):
                step()
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    t.trace.export_chrome_trace(str(tmp_path / "ours.json"))
    for name in _merged_by_api_and_cli(t.trace, tmp_path, ".json"):
        data, events = merged_events(tmp_path / name)
        assert chrome_crossings(events) == []
        for region_name in ("Optimizer.step#SGD.step", "train_step",
                            "Optimizer.zero_grad#SGD.zero_grad"):
            regions = [e for e in events if e.get("name") == region_name]
            assert len(regions) == 5, (name, region_name)
            assert all(e["cat"] == "user_annotation" and "Python id" not in e.get("args", {})
                       for e in regions)                 # torch's own
        for region in (e for e in events if e.get("name") == "Optimizer.step#SGD.step"):
            around, inside = _region_holders(events, region)
            assert any(e["name"].endswith(": step") for e in around), region
            assert any(e["name"].endswith(": _single_tensor_sgd") for e in inside), region
        # our ids still chain: every parent is a call of ours on the same track
        ours = {e["args"]["Python id"]: e for e in events
                if e.get("ph") == "X" and "Python id" in e.get("args", {})}
        for e in ours.values():
            parent = e["args"]["Python parent id"]
            assert parent is None or (ours[parent]["pid"], ours[parent]["tid"]) == \
                (e["pid"], e["tid"])
        assert sorted(ours) == list(range(len(ours)))
        facts = data["pytrace_cffi"]
        assert facts["our_regions_replaced_by_torchs"] == 15
        assert facts["our_calls_crossing_torchs_regions_left_out"] > 0
    # The same rule in a .pftrace (torch's events on tracks of their own beside
    # ours): the same calls of ours are kept as in the JSON.
    t.trace.export_perfetto(str(tmp_path / "ours.pftrace"))
    our_tracks = set(_decode(tmp_path / "ours.pftrace")["threads"])
    kept = collections.Counter(e["name"] for e in merged_events(tmp_path / "api.json")[1]
                               if e.get("ph") == "X" and _is_ours(e))
    for name in _merged_by_api_and_cli(t.trace, tmp_path, ".pftrace"):
        decoded = _decode(tmp_path / name)
        events = pftrace_thread_events(decoded, our_tracks)
        assert chrome_crossings(events) == [], name      # each thread's tracks as one
        mine = [e for e in events if e["ours"]]
        assert collections.Counter(e["name"] for e in mine) == kept, name
        for region_name in ("Optimizer.step#SGD.step", "train_step",
                            "Optimizer.zero_grad#SGD.zero_grad"):
            regions = [e for e in events if e["name"] == region_name]
            assert len(regions) == 5 and not any(e["ours"] for e in regions), \
                (name, region_name)
        for region in (e for e in events if e["name"] == "Optimizer.step#SGD.step"):
            around, inside = _region_holders(events, region, lambda e: e["ours"])
            assert any(e["name"].endswith(": step") for e in around), region
            assert any(e["name"].endswith(": _single_tensor_sgd") for e in inside), region
        info = next(i for i in decoded["instants"] if i["name"] == "torch.profiler")
        assert info["args"]["our_regions_replaced_by_torchs"] == 15
        assert info["args"]["our_calls_crossing_torchs_regions_left_out"] == \
            facts["our_calls_crossing_torchs_regions_left_out"]


# -- streaming ----------------------------------------------------------------

def _torch_layouts(trace, tmp_path, tid):
    """The synthetic torch trace in torch's own layout (each event pretty-printed
    over many lines, the head before traceEvents) and in others: compact on one
    line with the base after the events, and gzip."""
    synthetic_torch_trace(trace, tmp_path / "compact.json", tid)
    data = json.loads((tmp_path / "compact.json").read_text())
    events = data.pop("traceEvents")
    pretty = json.dumps(data, indent=4)[:-1].rstrip() + ',\n    "traceEvents": [\n' + \
        ",\n".join("  " + json.dumps(e, indent=4).replace("\n", "\n  ") for e in events) + \
        '\n  ],"traceName": "x.json" }'
    (tmp_path / "pretty.json").write_text(pretty)
    base = data.pop("baseTimeNanoseconds")
    (tmp_path / "base_last.json").write_text(json.dumps(
        dict(data, traceEvents=events, baseTimeNanoseconds=base), separators=(",", ":")))
    import gzip
    with gzip.open(tmp_path / "pretty.json.gz", "wt") as f:
        f.write(pretty)
    return ("compact.json", "pretty.json", "base_last.json", "pretty.json.gz")


def test_merge_reads_any_layout_of_torchs_trace_in_pieces(traced, tmp_path, monkeypatch):
    from pytrace_cffi.readers import torch_chrome as merge
    tid = threading.get_native_id()
    layouts = _torch_layouts(traced, tmp_path, tid)
    pytrace_cffi.merge_torch(traced, tmp_path / "compact.json", tmp_path / "expected.json")
    expected = json.loads((tmp_path / "expected.json").read_text())
    assert expected["baseTimeNanoseconds"] == BASE_NS
    for read_chars in (merge.READ_CHARS, 7, 1):      # events and numbers cut by the reads
        monkeypatch.setattr(merge, "READ_CHARS", read_chars)
        for name in layouts:
            out = tmp_path / f"{name}.{read_chars}.merged.json"
            pytrace_cffi.merge_torch(traced, tmp_path / name, out)
            data = json.loads(out.read_text())
            assert data["traceEvents"] == expected["traceEvents"], (name, read_chars)
            assert data["baseTimeNanoseconds"] == BASE_NS
            assert data["pytrace_cffi"] == expected["pytrace_cffi"]
            if name.startswith("pretty"):
                assert data["traceName"] == "x.json"
            # one event per line, as our own exports
            lines = out.read_text().splitlines()
            assert len([ln for ln in lines if '"ph"' in ln]) == len(data["traceEvents"])


def test_merge_of_a_broken_torch_trace_fails_cleanly(traced, tmp_path):
    tid = threading.get_native_id()
    synthetic_torch_trace(traced, tmp_path / "torch.json", tid)
    text = (tmp_path / "torch.json").read_text()
    cut = text.index('"python_function"') + 5
    for name, broken in (("cut.json", text[:cut]),                    # ends mid-event
                         ("stray.json", text[:cut] + "}}, ]}"),
                         ("no_events.json", '{"schemaVersion": 1}'),
                         ("events_not_list.json", '{"traceEvents": 3}'),
                         ("trailing.json", text + " [1]"),
                         ("empty.json", "")):
        (tmp_path / name).write_text(broken)
        with pytest.raises(pytrace_cffi.TraceFormatError):
            pytrace_cffi.merge_torch(traced, tmp_path / name, tmp_path / "m.json")
        assert not os.path.exists(tmp_path / "m.json")
        assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


@pytest.mark.big
def test_merge_holds_neither_trace_whole(tmp_path):
    # A 60k-call trace and a ~10 MB torch trace: merging keeps a buffer of torch's
    # text and a bounded copy of a batch of our slices whose times it moves in C,
    # so the peak stays below either file's size (reading both whole, as before,
    # took ~100 MB here). It holds torch's ops on our threads, 20 bytes each (their
    # edges our calls must not cross): 60k of them here, 1.2 MB.
    import tracemalloc

    def calls(n):
        for _ in range(n):
            len("x")

    with pytrace_cffi.trace() as t:
        calls(60_000)
    trace = t.trace
    assert len(trace) > 60_000
    tid = threading.get_native_id()
    synthetic_torch_trace(trace, tmp_path / "small.json", tid)
    data = json.loads((tmp_path / "small.json").read_text())
    op = next(e for e in data["traceEvents"] if e["name"] == "aten::fake")
    data["traceEvents"] += [dict(op, name=f"aten::op{i}", args={"External id": i})
                            for i in range(60_000)]
    with open(tmp_path / "torch.json", "w") as f:
        json.dump(data, f, indent=2)
    torch_bytes = os.path.getsize(tmp_path / "torch.json")
    assert torch_bytes > 10_000_000
    tracemalloc.start()
    try:
        pytrace_cffi.merge_torch(trace, tmp_path / "torch.json", tmp_path / "m.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000 + 20 * 60_000, peak
    merged = json.loads((tmp_path / "m.json").read_text())["traceEvents"]
    assert sum(1 for e in merged if e["name"].startswith("aten::op")) == 60_000
    assert sum(1 for e in merged if "Python id" in e.get("args", {})) == len(trace)


def test_calls_before_torchs_base_keep_their_negative_times(traced, tmp_path):
    # torch's base after our start (not what torch writes, but a valid file): the
    # calls before it get negative ts, as mapped, not clamped to 0
    anchor = traced.realtime_anchor
    base = monotonic_to_realtime(anchor, traced.start_ns) + 1_000_000
    first_call = min(traced, key=lambda c: c.start_ns)
    (tmp_path / "torch.json").write_text(json.dumps(
        {"baseTimeNanoseconds": base, "traceEvents": []}))
    pytrace_cffi.merge_torch(traced, tmp_path / "torch.json", tmp_path / "m.json")
    events = json.loads((tmp_path / "m.json").read_text())["traceEvents"]
    ours = [e for e in events if e.get("ph") == "X"]
    assert len(ours) == len(traced)
    first = min(ours, key=lambda e: e["ts"])
    expected = (monotonic_to_realtime(anchor, first_call.start_ns) - base) / 1000
    assert expected < 0 and first["ts"] == pytest.approx(expected, abs=0.0011)
    assert not traced.slices_built()        # found as the calls stream by
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".json") and p.startswith("tmp")]


def test_merge_warns_of_calls_nested_deeper_than_perfetto_draws(tmp_path):
    def deep(n):
        return deep(n - 1) if n else 0

    with pytrace_cffi.trace() as t:
        deep(600)
    (tmp_path / "torch.json").write_text(json.dumps({"baseTimeNanoseconds": BASE_NS,
                                                     "traceEvents": []}))
    with pytest.warns(pytrace_cffi.TraceWarning, match="nest .* deep"):
        pytrace_cffi.merge_torch(t.trace, tmp_path / "torch.json", tmp_path / "m.json")
    events = json.loads((tmp_path / "m.json").read_text())["traceEvents"]
    assert len([e for e in events if e.get("ph") == "X"]) == len(t.trace)


# -- our calls streamed: no slice table --------------------------------------------

CATEGORY = {"python": "python_function", "c": "python_function",
            "annotation": "user_annotation"}


def us(ns):
    """ns as the µs number the C formatter writes (three decimals), parsed."""
    return float(f"{ns // 1000}.{ns % 1000:03d}")


def expected_ours(trace, base):
    """Our events as merge_torch writes them, from the trace's Call iteration and
    the Python clock map: per thread its thread_name, then its calls in start
    order, their times mapped to torch's."""
    assert not trace.key_args                   # (Call does not carry a key's args)
    anchor, pid = trace.realtime_anchor, trace.pid
    calls = iter(trace)
    events = []
    for thread, n, _, _ in list(trace.thread_counts()):
        tid = thread.native_id or thread.ident
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": thread.name}})
        for _ in range(n):
            call = next(calls)
            start = monotonic_to_realtime(anchor, call.start_ns)
            end = monotonic_to_realtime(anchor, call.end_ns)
            args = {"Python id": call.id, "Python parent id": call.parent,
                    "Python thread": thread.index}
            if call.start_ns == trace.start_ns and call.kind == "python":
                args["open at start"] = True        # running when tracing began
            events.append({"ph": "X", "pid": pid, "tid": tid, "cat": CATEGORY[call.kind],
                           "name": call.name, "ts": us(start - base), "dur": us(end - start),
                           "args": args})
    assert next(calls, None) is None
    return events


def _threads_trace():
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    def worker():
        for _ in range(3):
            fib(11)
            time.sleep(0.001)

    with pytrace_cffi.trace() as t:
        threads = [threading.Thread(target=worker, name=f"w{i}") for i in range(3)]
        for thread in threads:
            thread.start()
        worker()
        for thread in threads:
            thread.join()
    return t.trace


def _merge_and_check(trace, tmp_path, name):
    from pytrace_cffi.model.walk import thread_batches as _thread_batches
    threads = [thread for thread, n, _, _ in trace.thread_counts() if n]
    assert len(threads) >= 4
    # the batches are smaller than the threads: several per thread
    assert sum(1 for _, batches in _thread_batches(trace) for _ in batches) > len(threads)
    (tmp_path / "torch.json").write_text(json.dumps({"baseTimeNanoseconds": BASE_NS,
                                                     "traceEvents": []}))
    out = tmp_path / f"{name}.json"
    pytrace_cffi.merge_torch(trace, tmp_path / "torch.json", out)
    events = json.loads(out.read_text())["traceEvents"]
    assert not trace.slices_built()
    assert events == expected_ours(trace, BASE_NS)


def test_merge_streams_a_stopped_traces_calls_in_small_batches(tmp_path, monkeypatch):
    from pytrace_cffi.model import walk
    monkeypatch.setattr(walk, "RUN_EVENTS", 64)        # a batch: what 64 events finish
    trace = _threads_trace()
    _merge_and_check(trace, tmp_path, "stopped")


def test_merge_streams_loaded_spilled_and_saved_traces_and_cuts_a_tables_batches(tmp_path,
                                                                        monkeypatch):
    from pytrace_cffi import merge
    from pytrace_cffi.model import walk
    monkeypatch.setattr(walk, "RUN_EVENTS", 64)
    trace = _threads_trace()
    trace.save(str(tmp_path / "saved"))
    with pytrace_cffi.trace(max_events=500, output=str(tmp_path / "spill")) as t:
        inner = threading.Thread(target=lambda: [len(str(i)) for i in range(300)])
        inner.start()
        for i in range(300):
            len(str(i))
        inner.join()
    assert isinstance(t.trace, pytrace_cffi.SpilledTrace)
    spilled = pytrace_cffi.load(str(tmp_path / "spill"))
    assert not spilled.slices_built()
    (tmp_path / "torch.json").write_text(json.dumps({"baseTimeNanoseconds": BASE_NS,
                                                     "traceEvents": []}))
    pytrace_cffi.merge_torch(spilled, tmp_path / "torch.json", tmp_path / "spilled.json")
    assert not spilled.slices_built()
    events = json.loads((tmp_path / "spilled.json").read_text())["traceEvents"]
    assert events == expected_ours(spilled, BASE_NS)
    assert len([e for e in events if e["ph"] == "X"]) == len(spilled) > 600
    # a saved trace streams from its slices.bin; with its slice table built, a
    # thread is one batch, moved and formatted in pieces of at most SCRATCH_SLICES
    loaded = pytrace_cffi.load(str(tmp_path / "saved"))
    expected = expected_ours(trace, BASE_NS)
    pytrace_cffi.merge_torch(loaded, tmp_path / "torch.json", tmp_path / "loaded.json")
    assert not loaded.slices_built()
    assert json.loads((tmp_path / "loaded.json").read_text())["traceEvents"] == expected
    monkeypatch.setattr(merge, "SCRATCH_SLICES", 50)
    list(loaded.thread_slices())
    assert loaded.slices_built() and len(loaded) > 4 * 50
    pytrace_cffi.merge_torch(loaded, tmp_path / "torch.json", tmp_path / "table.json")
    assert json.loads((tmp_path / "table.json").read_text())["traceEvents"] == expected


def test_a_later_threads_call_before_torchs_base_restarts_the_file(tmp_path):
    # The first thread written starts after torch's base, the second before it
    # (only found once the first is written): that file goes, and the merged one
    # has every call once, the early ones at negative times, as from our JSON.
    from pytrace_cffi.model.trace import Trace
    trace = _threads_trace()
    trace.save(str(tmp_path / "saved"))
    loaded = pytrace_cffi.load(str(tmp_path / "saved"))
    table = list(loaded.thread_slices())
    firsts = [slices[0].start for _, slices, n in table]
    assert firsts[0] < firsts[1]                   # the main thread began first
    swapped = Trace(names=loaded.names, key_kinds=loaded.key_kinds, key_args=loaded.key_args,
                    threads=[table[1][0], table[0][0]] + [t for t, _, _ in table[2:]],
                    slices=[(table[1][1], table[1][2]), (table[0][1], table[0][2])]
                    + [(s, n) for _, s, n in table[2:]],
                    start_ns=loaded.start_ns, stop_ns=loaded.stop_ns, pid=loaded.pid,
                    python_version=loaded.python_version, backend=loaded.backend,
                    clock=loaded.clock, params=loaded.params, marks=loaded.marks,
                    realtime_anchor=loaded.realtime_anchor)
    anchor = loaded.realtime_anchor
    base = (monotonic_to_realtime(anchor, firsts[0])
            + monotonic_to_realtime(anchor, firsts[1])) // 2
    (tmp_path / "torch.json").write_text(json.dumps({"baseTimeNanoseconds": base,
                                                     "traceEvents": []}))
    pytrace_cffi.merge_torch(swapped, tmp_path / "torch.json", tmp_path / "m.json")
    events = json.loads((tmp_path / "m.json").read_text())["traceEvents"]
    ours = [e for e in events if e["ph"] == "X"]
    assert sorted(e["args"]["Python id"] for e in ours) == list(range(len(swapped)))
    assert [e for e in events if e["ph"] == "M"] == \
        [e for e in expected_ours(swapped, base) if e["ph"] == "M"]
    assert min(e["ts"] for e in ours) < 0
    # written from our JSON, event by event: the first calls checked
    for event, call in zip(ours[:4], swapped):
        assert event["name"] == call.name and event["args"]["Python id"] == call.id
        ts = (monotonic_to_realtime(anchor, call.start_ns) - base) / 1000
        assert event["ts"] == pytest.approx(ts, abs=0.0011)
    assert sorted(os.listdir(tmp_path)) == ["m.json", "saved", "torch.json"]


MERGE_BIG_SCRIPT = PROC_STATUS + r"""
import json, sys, time
import pytrace_cffi
from pytrace_cffi import merge
import pytrace_cffi.render.chrome, pytrace_cffi.model.walk  # noqa


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)




fib(15)
pytrace_cffi.start()
fib(int(sys.argv[2]))
trace = pytrace_cffi.stop()
base = (time.time_ns() // 10 ** 9 - 50 * 86400) * 10 ** 9
tid = trace.threads[0].native_id
with open(sys.argv[1] + ".torch.json", "w") as f:
    json.dump({"schemaVersion": 1, "baseTimeNanoseconds": base, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::op%d" % i, "pid": trace.pid, "tid": tid,
         "ts": 1.0 + i, "dur": 0.5, "args": {"External id": i}} for i in range(20)]}, f)
after_stop = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")                # VmHWM from here: the peak of the merge
merge.merge_torch(trace, sys.argv[1] + ".torch.json", sys.argv[1] + ".json.gz")
print(len(trace), status("VmHWM") - after_stop, int(trace.slices_built()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
@pytest.mark.big
def test_merging_three_million_calls_adds_little_to_the_stopped_traces_memory(tmp_path):
    """fib(30), 2.7M calls, merged with a small torch-shaped trace in a subprocess:
    the peak RSS of the merge stays under 16 bytes a call above the stopped trace's
    (the slice table it used to build took 40 a call, and a copy of the thread's
    slices 40 more); the file holds every call and torch's events."""
    import gzip
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))
    base = tmp_path / "big"
    result = subprocess.run([sys.executable, "-c", MERGE_BIG_SCRIPT, str(base), "30"],
                            env=dict(os.environ, PYTHONPATH=root), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    calls, peak, built = map(int, result.stdout.split())
    assert calls >= 2_692_537                   # fib(30) makes 2 * fib(31) - 1 calls
    assert peak < 16 * calls, f"{peak / calls:.1f} bytes per call"
    assert not built
    ours = ops = 0
    with gzip.open(f"{base}.json.gz", "rb") as f:
        for line in f:
            ours += b'"Python id":' in line
            ops += b'"aten::op' in line
    assert ours == calls and ops == 20


def _fib(n):
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def test_a_job_traces_threads_keep_their_own_pids_when_merged(tmp_path):
    """A trace of several processes (a job's) merged with torch's: each thread's
    calls, name and marks go under the process it ran in, as in our own export."""
    with pytrace_cffi.trace() as t:
        worker = threading.Thread(target=_fib, args=(8,))
        worker.start()
        worker.join()
        _fib(9)
        len([1])                # the call synthetic_torch_trace puts an op in
    original = t.trace
    pid = original.pid
    original.processes = {pid: {"label": "first"}, pid + 1: {"label": "second"}}
    original.threads = [th._replace(pid=pid + (i % 2)) for i, th in enumerate(original.threads)]
    original.save(str(tmp_path / "two"))
    trace = pytrace_cffi.load(str(tmp_path / "two"))
    assert len({trace.thread_pid(t) for t in trace.threads}) == 2
    synthetic_torch_trace(trace, tmp_path / "torch.json", trace.threads[0].native_id)
    pytrace_cffi.merge_torch(trace, str(tmp_path / "torch.json"), str(tmp_path / "m.json"))
    _, events = merged_events(tmp_path / "m.json")
    pid_of = {t.native_id: trace.thread_pid(t) for t in trace.threads}
    names = [e for e in events if e.get("name") == "thread_name" and e["tid"] in pid_of
             and "(python)" not in e["args"]["name"]]
    assert sorted((e["tid"], e["pid"]) for e in names) == sorted(pid_of.items())
    ours = [e for e in events if e.get("ph") == "X" and "Python id" in e.get("args", {})]
    assert len(ours) == len(original)
    assert all(e["pid"] == pid_of[e["tid"]] for e in ours)
    assert {e["pid"] for e in ours} == set(pid_of.values())


# -- merging into a .pftrace ----------------------------------------------------

def _decode(path):
    """test_perfetto.decode (the perfetto package's protos): skipped without them,
    except in CI."""
    try:
        from test_perfetto import decode
    except pytest.skip.Exception:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("the perfetto and protobuf packages are not installed")
    return decode(path, named_tracks=True)


def test_realtime_to_monotonic_inverts_the_anchor_map():
    from pytrace_cffi.merge_perfetto import realtime_to_monotonic
    anchor = {"start": {"monotonic_ns": 1_000_000, "realtime_ns": 5_000_000_000_000,
                        "spread_ns": 10},
              "stop": {"monotonic_ns": 9_000_000_000, "realtime_ns": 5_009_000_040_000,
                       "spread_ns": 10}}            # 40 µs of slew between them
    for monotonic in (0, 1_000_000, 7_654_321, 4_500_000_001, 9_000_000_000, 10 ** 10):
        realtime = monotonic_to_realtime(anchor, monotonic)
        assert realtime_to_monotonic(anchor, realtime) == monotonic


def test_merge_into_a_pftrace_puts_torchs_events_on_our_clock(traced, tmp_path):
    tid = threading.get_native_id()
    call = synthetic_torch_trace(traced, tmp_path / "torch.json", tid)
    out = pytrace_cffi.merge_torch(traced, tmp_path / "torch.json", tmp_path / "merged.pftrace")
    assert out == str(tmp_path / "merged.pftrace")
    decoded = _decode(tmp_path / "merged.pftrace")
    threads = decoded["threads"]
    ours = [s for s in decoded["slices"] if s["categories"] == ["python_function"]
            and s["name"] != "later" and s["name"] != "elsewhere"]
    assert len(ours) == len(traced)
    torch = {s["name"]: s for s in decoded["slices"]
             if s["name"] in ("aten::fake", "later", "elsewhere", "gemm", "work")}
    # torch's Python events that ours duplicate are gone; the others stay
    assert set(torch) == {"aten::fake", "later", "elsewhere", "gemm"}
    op = torch["aten::fake"]
    assert op["categories"] == ["cpu_op"] and op["args"] == {"External id": 1}
    # inside our call, on our clock, to the ns (ts goes through a double of µs)
    assert abs(op["start"] - (call.start_ns + 1)) <= 2
    assert abs(op["end"] - (call.end_ns - 1)) <= 2
    # on a track of its own for our thread: same pid, tid and name as ours
    ours_track = next(s["track"] for s in ours if s["name"] == call.name)
    assert op["track"] != ours_track
    assert threads[op["track"]] == threads[ours_track] == (
        traced.pid, tid, threading.current_thread().name)
    assert threads[torch["gemm"]["track"]][:2] == (1, 7)
    assert (1, "torch pid 1") in decoded["processes"].values()
    info = next(i for i in decoded["instants"] if i["name"] == "torch.profiler")
    assert info["args"]["baseTimeNanoseconds"] == BASE_NS
    assert info["args"]["torch_python_function_events_replaced"] == 1
    assert info["args"]["schemaVersion"] == 1
    # not read back as ours
    from pytrace_cffi.reading import read_trace
    with pytest.raises(pytrace_cffi.TraceFormatError, match="merged with torch.profiler"):
        read_trace(tmp_path / "merged.pftrace")


def test_merge_cli_reads_and_writes_pftrace(traced, tmp_path):
    tid = threading.get_native_id()
    synthetic_torch_trace(traced, tmp_path / "torch.json", tid)
    traced.export_chrome_trace(str(tmp_path / "ours.json"))
    traced.export_perfetto(str(tmp_path / "ours.pftrace"))
    pytrace_cffi.merge_torch(traced, tmp_path / "torch.json", tmp_path / "a.json")
    assert main(["merge", str(tmp_path / "ours.pftrace"), str(tmp_path / "torch.json"),
                 "-o", str(tmp_path / "b.json")]) == 0
    a, b = (merged_events(tmp_path / name)[1] for name in ("a.json", "b.json"))
    assert a == b
    assert main(["merge", str(tmp_path / "ours.json"), str(tmp_path / "torch.json"),
                 "-o", str(tmp_path / "c.pftrace")]) == 0
    assert main(["merge", str(tmp_path / "torch.json"), str(tmp_path / "ours.pftrace"),
                 "-o", str(tmp_path / "d.pftrace")]) == 0
    c, d = _decode(tmp_path / "c.pftrace"), _decode(tmp_path / "d.pftrace")
    key = lambda s: (s["name"], s["start"], s["end"], s["depth"])  # noqa: E731
    assert sorted(map(key, c["slices"])) == sorted(map(key, d["slices"]))
    assert len(c["slices"]) == len(traced) + 4      # aten::fake, later, elsewhere, gemm


def test_torchs_slices_nest_and_carry_their_flows_in_a_pftrace(traced, tmp_path):
    """Complete events in any order, children before parents, equal starts, a
    zero-length one, one crossing its parent's end, and CPU -> GPU flows."""
    us = lambda ns: torch_us(traced, traced.start_ns + ns)  # noqa: E731
    pid, tid = 4242, 17
    x = [("parent", 0, 100_000), ("first child", 0, 40_000), ("zero", 40_000, 40_000),
         ("second child", 40_000, 100_000), ("grandchild", 50_000, 60_000),
         ("crossing", 90_000, 120_000), ("after", 100_000, 110_000)]
    events = [{"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid,
               "ts": us(start), "dur": (end - start) / 1000, "args": {}}
              for name, start, end in reversed(x)]
    events += [
        {"ph": "X", "cat": "kernel", "name": "kernel", "pid": 0, "tid": "stream 7",
         "ts": us(200_000), "dur": 5.0, "args": {"stream": 7}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": pid, "tid": tid,
         "ts": us(55_000)},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0, "tid": "stream 7",
         "ts": us(200_000), "bp": "e"},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "loop"}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": pid, "tid": tid, "ts": us(70_000),
         "args": {"Bytes": 512}},
        {"ph": "C", "name": "queue", "pid": pid, "ts": us(80_000), "args": {"depth": 3}},
    ]
    (tmp_path / "torch.json").write_text(json.dumps({"baseTimeNanoseconds": BASE_NS,
                                                     "traceEvents": events}))
    pytrace_cffi.merge_torch(traced, tmp_path / "torch.json", tmp_path / "m.pftrace")
    decoded = _decode(tmp_path / "m.pftrace")
    got = {s["name"]: (s["start"] - traced.start_ns, s["end"] - traced.start_ns, s["depth"])
           for s in decoded["slices"] if s["categories"] in (["cpu_op"], ["kernel"])}
    assert {name: (round(a, -1), round(b, -1), depth) for name, (a, b, depth) in got.items()} \
        == {"parent": (0, 100_000, 0), "first child": (0, 40_000, 1),
            "zero": (40_000, 40_000, 2), "second child": (40_000, 100_000, 1),
            "grandchild": (50_000, 60_000, 2), "crossing": (90_000, 100_000, 2),
            "after": (100_000, 110_000, 0), "kernel": (200_000, 205_000, 0)}
    tracks = {s["name"]: s["track"] for s in decoded["slices"]}
    assert decoded["threads"][tracks["parent"]] == (pid, tid, "loop")
    # the flow: on the grandchild (innermost at 55 µs) and on the kernel
    from test_perfetto import _packets
    flows = {}
    for _, packet in _packets((tmp_path / "m.pftrace").read_bytes()):
        if packet is not None and packet.HasField("track_event") and \
                packet.track_event.flow_ids:
            flows[packet.track_event.name] = list(packet.track_event.flow_ids)
    assert set(flows) == {"grandchild", "kernel"}
    assert flows["grandchild"] == flows["kernel"]
    instant = next(i for i in decoded["instants"] if i["name"] == "[memory]")
    assert instant["args"] == {"Bytes": 512} and instant["track"] == tracks["parent"]
    assert [(decoded["counters"][track][0], value) for track, _, value
            in decoded["counter_values"] if decoded["counters"][track][0] == "queue depth"] \
        == [("queue depth", 3)]


def test_every_conv2d_op_lies_inside_its_python_call_in_a_merged_pftrace(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(),
                              torch.nn.Conv2d(4, 2, 3), torch.nn.Flatten())
    x = torch.randn(2, 1, 8, 8)
    net(x)
    with pytrace_cffi.trace() as t:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                net(x).sum().backward()
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    pytrace_cffi.merge_torch(t.trace, tmp_path / "torch.json", tmp_path / "merged.pftrace")
    decoded = _decode(tmp_path / "merged.pftrace")
    threads = decoded["threads"]
    ops = [s for s in decoded["slices"] if s["name"] == "aten::conv2d"]
    calls = [s for s in decoded["slices"] if s["name"] == "conv2d"
             and s["categories"] == ["python_function"]]
    assert len(ops) == len(calls) == 2 * 3
    slack = max(m["spread_ns"] for m in t.trace.realtime_anchor.values())
    for op in ops:
        around = [c for c in calls if threads[c["track"]][:2] == threads[op["track"]][:2]
                  and c["start"] - slack <= op["start"] and op["end"] <= c["end"] + slack]
        assert len(around) == 1, op


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_torchs_python_calls_after_our_last_on_a_thread_stay(tmp_path, suffix):
    """Where our recording of a thread ends before stop (on 3.9-3.11 torch.profiler
    with with_stack takes our hook), torch's own python_function events are what
    remain: one that starts after our last call on its thread (here, during a
    sleep: no Python call of ours runs there) stays, one that ours duplicate goes.
    All of torch's within our trace's time went, so the profiled window of such a
    merge held no Python call at all."""
    tid = threading.get_native_id()
    with pytrace_cffi.trace() as t:
        len("x")
        time.sleep(0.05)
    trace = t.trace
    sleep = max((c for c in trace if c.thread == tid), key=lambda c: c.start_ns)
    assert sleep.name.endswith("sleep")
    events = [
        {"ph": "X", "cat": "python_function", "name": "duplicate", "pid": trace.pid,
         "tid": tid, "ts": torch_us(trace, trace.start_ns + 10), "dur": 5.0, "args": {}},
        {"ph": "X", "cat": "python_function", "name": "after_ours", "pid": trace.pid,
         "tid": tid, "ts": torch_us(trace, sleep.start_ns + 20_000_000), "dur": 5.0,
         "args": {}},
    ]
    (tmp_path / "torch.json").write_text(json.dumps(
        {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": events}))
    out = tmp_path / f"merged{suffix}"
    pytrace_cffi.merge_torch(trace, tmp_path / "torch.json", out)
    if suffix == ".json":
        names = {e["name"] for e in merged_events(out)[1]}
    else:
        names = {s["name"] for s in _decode(out)["slices"]}
    assert "after_ours" in names and "duplicate" not in names


def test_a_jobs_processes_keep_our_names_in_a_json_merge(tmp_path):
    """A job's trace (each process a lane, named by its label) merged with one
    rank's torch trace, which names that rank's process "python": the merged
    JSON names every process of ours as our own JSON does (it named none of
    them, and the rank after torch's "python")."""
    job = tmp_path / "job"
    pytrace_cffi.start(follow_children=True, output=str(job))
    subprocess.run([sys.executable, "-c", "len('x')"], check=True, timeout=60)
    pytrace_cffi.stop()
    trace = pytrace_cffi.load(str(job))
    labels = {pid: facts["label"] for pid, facts in trace.processes.items()}
    assert len(labels) == 2
    child = next(pid for pid in labels if pid != os.getpid())
    events = [{"ph": "M", "name": "process_name", "pid": child, "tid": 0,
               "args": {"name": "python"}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::fake", "pid": child, "tid": 1,
               "ts": torch_us(trace, trace.start_ns + 10), "dur": 1.0, "args": {}}]
    (tmp_path / "torch.json").write_text(json.dumps(
        {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": events}))
    pytrace_cffi.merge_torch(trace, tmp_path / "torch.json", tmp_path / "merged.json")
    names = {e["pid"]: e["args"]["name"] for e in merged_events(tmp_path / "merged.json")[1]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert names == labels
