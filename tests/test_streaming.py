"""Streaming exports (c_src/pt_walk.c, pytrace_cffi/model/walk.py): a trace keeps its
events after stop() and .pftrace streams from them, without a slice table; the
table, when something asks for it, is walked too (table mode). The oracle is the
slice pipeline the package used before (replay_reference.py: replay, torch
regions, min_duration, tagged names, carriers): the walk's records, slices and
table must be its calls, on hand-built event streams of every shape (hypothesis)
and on traced programs, whose exports must give the same bytes streamed and from
the table. Memory from stop() through the exports is measured on ten million
calls in test_html_stream.py."""
import os
import subprocess
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytrace_cffi
from pytrace_cffi._core import ffi, lib

from oracle_build import oracle_lib
from replay_reference import (drop_carriers, drop_short, insert_regions, name_tagged_calls,
                              table_checked_against_replay)
from test_html_stream import check_against_table, streamed_html_and_summary

HERE = os.path.dirname(os.path.abspath(__file__))
# Where the pytrace_cffi under test is importable from, for subprocesses: the
# installed wheel in CI, the source tree with an in-place build otherwise.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))
STAND_IN = os.path.join(HERE, "torch_stand_in")


def both_ways(trace, tmp_path, name="t"):
    """Exports trace as .pftrace and .json and saves it, streamed, then from its
    slice table (the walk's, checked against the reference's); checks the bytes
    are equal (and the counts the scan gave), returns the .pftrace's."""
    counts = list(trace.thread_counts())
    calls = len(trace)
    streamed_calls = list(trace)            # iterating streams too
    assert not trace.slices_built()
    # the HTML page and the summary stream too (test_html_stream checks them)
    pages_and_summaries = streamed_html_and_summary(trace, tmp_path, name)
    out = {}
    for how in ("streamed", "sliced"):
        if how == "sliced":
            assert not trace.slices_built(), "a streamed export built the slice table"
            table_checked_against_replay(trace)
        pftrace, chrome = tmp_path / f"{name}-{how}.pftrace", tmp_path / f"{name}-{how}.json"
        saved = tmp_path / f"{name}-{how}-saved"
        trace.export_perfetto(str(pftrace), compress=False)
        trace.export_chrome_trace(str(chrome))
        trace.save(str(saved))
        out[how] = (pftrace.read_bytes(), chrome.read_bytes(),
                    (saved / "slices.bin").read_bytes(), (saved / "meta.json").read_bytes())
    assert out["streamed"][0] == out["sliced"][0]
    assert out["streamed"][1] == out["sliced"][1]
    assert out["streamed"][2] == out["sliced"][2]       # save() streams too
    assert out["streamed"][3] == out["sliced"][3]
    assert list(trace.thread_counts()) == counts       # scan's counts = the table's
    assert len(trace) == calls == len(streamed_calls)
    assert list(trace) == streamed_calls
    check_against_table(trace, pages_and_summaries)
    return out["streamed"][0]


def _json_from_slices(streams, index, names):
    """(name, start, end, depth, parent index, flags, tag) of Streams.slices."""
    rows = []
    for slices, n, first in streams.slices(index):
        assert first == len(rows)
        for i in range(n):
            s = slices[i]
            assert s.parent < len(rows)
            rows.append((names[s.key], s.start, s.end, s.depth, s.parent, s.flags, s.tag))
    return rows


# --- hand-built event streams against the slice pipeline ------------------------

NAMES = ["?", "f", "g", "h", "enter", "exit", "step_code", "wrapper",
         "Optimizer.step#SGD.step"]
KINDS = ["python"] * 8 + ["annotation"]
TAGS = [None, {"kind": "region", "name": "a"}, {"kind": "region", "name": "b"},
        {"kind": "region_end", "name": ""},
        {"kind": "module", "name": "nn.Module: X_0", "module_id": 0, "class": "X"},
        {"kind": "optimizer", "name": "Optimizer.step#SGD.step", "optimizer_id": 0,
         "class": "SGD", "step": 0},
        {"kind": "region", "name": "Optimizer.step#SGD.step"}]
# as recorded, each args index is used once (events take them in turn)
ARGS = [{"x": i} if i % 3 == 0 else {} if i % 3 == 1 else {"y": [i, 3]} for i in range(60)]


def aux_kind(sub_kind):
    """An aux event's kind in the (delta, key, kind) triples below: key is its payload."""
    return ("aux", sub_kind)


TAG, ARGS_AUX, TIME = aux_kind(0b001), aux_kind(0b010), aux_kind(0b000)
assert (TAG[1], ARGS_AUX[1], TIME[1]) == (lib.PT_AUX_TAG, lib.PT_AUX_ARGS, lib.PT_AUX_TIME)
UNKNOWN_AUX = range(3, 8)         # sub-kinds no reader knows yet: skipped


def event_word(key, kind):
    """An event's key_kind, by pt_record.h's layout written out: an aux event's key is
    its payload over 3 bits of sub-kind, under kind 7."""
    if isinstance(kind, tuple):
        return (key << 3 | kind[1]) << 3 | 7
    return key << 3 | kind


class _ListEvents:
    """A thread's events from a list, fed in the given run lengths."""

    def __init__(self, events, splits):
        self.index = 0
        self.base_ticks = 1000
        self.data = ffi.new("pt_event[]", max(1, len(events)))
        for i, (delta, key, kind) in enumerate(events):
            self.data[i].delta = delta
            self.data[i].key_kind = event_word(key, kind)
        self.n = len(events)
        self.splits = splits

    def runs(self):
        at = 0
        for size in self.splits:
            if at >= self.n:
                break
            size = min(size, self.n - at)
            yield self.data + at, size
            at += size
        if at < self.n:
            yield self.data + at, self.n - at


CLOCK = {"tick0": 1000, "ns0": 5000, "ns_per_tick": 1.0}


def _sliced(events, hidden, min_ns, stop_ticks, tags=TAGS, args=ARGS):
    """(name, args, start, end, depth, open at stop) by the slice pipeline."""
    from pytrace_cffi.model.walk import KeyPlan
    names, kinds, key_args = list(NAMES), list(KINDS), {}
    plan = KeyPlan(names, kinds, key_args, hidden, tags, args)
    source = _ListEvents(events, [])
    out = ffi.new("pt_slice[]", max(1, len(events)))
    n_out = ffi.new("uint64_t *")
    h = bytes(hidden)
    assert oracle_lib().pt_replay_buffer(source.data, source.n, source.base_ticks, stop_ticks,
                                         h, len(h), CLOCK["tick0"], CLOCK["ns0"],
                                         CLOCK["ns_per_tick"], out, len(events),
                                         n_out) == lib.PT_OK
    out, n = insert_regions(plan.regions, out, n_out[0])
    # named first: a step's parent keeps its name when the step is too short to keep
    name_tagged_calls(tags, args, [(out, n)], names, kinds, key_args, None)
    slices = [(out, drop_short(out, n, min_ns))]
    (out, n), = drop_carriers(slices, list(hidden))
    table = [(names[out[i].key], out[i].start, out[i].end, out[i].depth, out[i].parent,
              out[i].flags, out[i].tag) for i in range(n)]
    return sorted((names[out[i].key], str(key_args.get(out[i].key)), out[i].start, out[i].end,
                   out[i].depth, bool(out[i].flags & lib.PT_SLICE_OPEN_AT_STOP))
                  for i in range(n)), table, table


def _streamed(events, hidden, min_ns, stop_ticks, splits, tags=TAGS, args=ARGS):
    from pytrace_cffi.model.walk import KeyPlan, Streams
    names, kinds, key_args = list(NAMES), list(KINDS), {}
    plan = KeyPlan(names, kinds, key_args, hidden, tags, args)
    streams = Streams(plan, [_ListEvents(events, splits)], CLOCK, stop_ticks, min_ns)
    done, stack, last = [], [], None
    for records, n in streams.records(0):
        for i in range(n):
            r = records[i]
            assert last is None or r.ts >= last, "records out of time order"
            last = r.ts
            if r.flags & lib.PT_RECORD_END:
                name, args, start, depth = stack.pop()
                assert names[r.key] == name
                done.append((name, args, start, r.ts, depth,
                             bool(r.flags & lib.PT_RECORD_OPEN_AT_STOP)))
            else:
                assert not r.flags & lib.PT_RECORD_OPEN_AT_STOP, "said at the end"
                stack.append((names[r.key], str(key_args.get(r.key)), r.ts, len(stack)))
    assert not stack
    slices, open_at_stop, depth = streams.stats[0]
    assert slices == len(done)
    assert open_at_stop == sum(1 for d in done if d[5])
    assert depth == max((d[4] for d in done), default=0)
    table = _table_rows(streams, names)
    # the frames running when the trace began (seeded at tick0), as the table marks them
    assert streams.open_at_start[0] == sum(1 for row in table if row[5] & lib.PT_SLICE_SEEDED)
    return sorted(done), _json_from_slices(streams, 0, names), table


def _table_rows(streams, names):
    """The rows of _json_from_slices from Streams.table (table mode)."""
    [(table, n)] = streams.table()
    return [(names[table[i].key], table[i].start, table[i].end, table[i].depth,
             table[i].parent, table[i].flags, table[i].tag) for i in range(n)]


def _events(draw_ops):
    """Events from ops. As recorded, a tag or args follow their call at once."""
    events = []
    args_used = 0
    for op, value, delta, marks in draw_ops:
        if op == "call":
            key, kind = value
            events.append((delta, key, kind))
            for mark, index in marks:
                if mark == "tag":
                    events.append((0, index, TAG))
                elif args_used < len(ARGS):
                    events.append((0, args_used, ARGS_AUX))
                    args_used += 1
        elif op == "return":
            key, kind = value
            events.append((delta, key, lib.PT_EV_C_RETURN if kind == lib.PT_EV_C_CALL
                           else lib.PT_EV_PY_RETURN))
        elif op == "aux":
            sub_kind, payload = value
            events.append((delta, payload, aux_kind(sub_kind)))
        else:
            events.append((delta, 0, TIME))
    return events


call_kinds = st.sampled_from([lib.PT_EV_PY_CALL, lib.PT_EV_PY_CALL, lib.PT_EV_C_CALL,
                              lib.PT_EV_PY_SEED])
keys = st.integers(1, len(NAMES) - 1)
marks = st.lists(st.one_of(st.tuples(st.just("tag"), st.integers(1, len(TAGS) - 1)),
                           st.tuples(st.just("args"), st.integers(0, len(ARGS) - 1))),
                 max_size=2)
no_marks = st.just(())
ops = st.one_of(
    st.tuples(st.just("call"), st.tuples(keys, call_kinds), st.integers(0, 40), marks),
    st.tuples(st.just("call"), st.tuples(keys, call_kinds), st.integers(0, 40), marks),
    st.tuples(st.just("return"), st.tuples(keys, call_kinds), st.integers(0, 40), no_marks),
    st.tuples(st.just("return"), st.tuples(keys, call_kinds), st.integers(0, 40), no_marks),
    st.tuples(st.just("time"), st.just(0), st.integers(0, 100), no_marks),
    st.tuples(st.just("aux"), st.tuples(st.sampled_from(UNKNOWN_AUX),
                                         st.integers(0, (1 << 26) - 1)),
              st.integers(0, 100), no_marks))


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(program=st.lists(ops, max_size=80),
       hidden=st.lists(st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5]), min_size=len(NAMES),
                       max_size=len(NAMES)),
       min_ns=st.sampled_from([0, 0, 15, 60]),
       splits=st.lists(st.integers(1, 7), max_size=20))
def test_walk_gives_the_slice_pipelines_calls(program, hidden, min_ns, splits):
    events = _events(program)
    stop_ticks = 1000 + sum(d for d, _, kind in events if kind != TIME) \
        + sum(d for d, _, kind in events if kind == TIME) + 7
    hidden[0] = 0
    assert _streamed(events, hidden, min_ns, stop_ticks, splits) == \
        _sliced(events, hidden, min_ns, stop_ticks)


def _records(generator):
    return [(r.ts, r.key, r.flags) for records, n in generator
            for r in (records[i] for i in range(n))]


@settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck))
@given(program=st.lists(ops, max_size=80),
       hidden=st.lists(st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5]), min_size=len(NAMES),
                       max_size=len(NAMES)),
       min_ns=st.sampled_from([0, 0, 15, 60]),
       splits=st.lists(st.integers(1, 7), max_size=20),
       stream_splits=st.lists(st.integers(1, 7), max_size=20))
def test_a_stream_gives_the_emitting_walks_records(program, hidden, min_ns, splits,
                                                   stream_splits):
    """A walk without a scan (what an encoder running during the trace has) gives
    the records of the scan-led walk, open at stop said at the end, unless the
    thread has a tag or args: then it says it is stale."""
    from pytrace_cffi.model.walk import KeyPlan, Streams
    events = _events(program)
    hidden[0] = 0
    stop_ticks = _stop_ticks(events)
    plan = KeyPlan(list(NAMES), list(KINDS), {}, hidden, TAGS, ARGS)
    led = Streams(plan, [_ListEvents(events, splits)], CLOCK, stop_ticks, min_ns)
    alone = Streams(plan, [_ListEvents(events, stream_splits)], CLOCK, stop_ticks, min_ns,
                    lazy=True)
    stale = [None]
    streamed = _records(alone.stream_records(0, stale))
    marked = any(kind in (TAG, ARGS_AUX) for _, _, kind in events)
    assert stale[0] == marked
    if not marked:
        assert streamed == _records(led.records(0))


def _stop_ticks(events):
    return 1000 + sum(d for d, _, _ in events) + 7


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(program=st.lists(ops, max_size=80),
       hidden=st.lists(st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5]), min_size=len(NAMES),
                       max_size=len(NAMES)),
       splits=st.lists(st.integers(1, 7), max_size=20))
def test_plain_scan_gives_the_slice_pipelines_calls(program, hidden, splits):
    """A trace without tags, args or min_duration is scanned by the plain scan (the
    pairing engine's plain mode, pt_walk_run): seeds, hidden keys, carriers, returns
    that close several calls or none, and the clock's TIME records leave its inline
    loop and come back; its counts, calls open at stop and durations (the JSON
    walk's) must be the slice pipeline's."""
    events = [e for e in _events(program) if e[2] not in (TAG, ARGS_AUX)]
    hidden[0] = 0
    assert _streamed(events, hidden, 0, _stop_ticks(events), splits, [None], []) == \
        _sliced(events, hidden, 0, _stop_ticks(events), [None], [])


@pytest.mark.parametrize("tagged", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_the_walks_across_their_blocks(seed, tagged):
    """Long random programs: the pairing engine makes room per block of 1024 events
    (the plain scan checks the clock per block too) and leaves its inline loop at
    any of them. Tagged, the scan is the full walk, as the emitting walks are."""
    import random
    rng = random.Random(seed)
    call, ret = lib.PT_EV_PY_CALL, lib.PT_EV_PY_RETURN
    events, stack = [], []
    for _ in range(6000):
        r = rng.random()
        if r < 0.45 or not stack:
            key = rng.randrange(1, len(NAMES))
            kind = rng.choice([call, call, call, lib.PT_EV_C_CALL, lib.PT_EV_PY_SEED])
            events.append((rng.randrange(0, 50), key, kind))
            stack.append((key, lib.PT_EV_C_RETURN if kind == lib.PT_EV_C_CALL else ret))
            if tagged and rng.random() < 0.1:
                events.append((0, rng.randrange(1, len(TAGS)), TAG))
        elif r < 0.9:
            events.append((rng.randrange(0, 50),) + stack.pop())
        elif r < 0.95:
            key, kind = stack[rng.randrange(len(stack))]        # closes several
            del stack[len(stack) - 1 - stack[::-1].index((key, kind)):]
            events.append((rng.randrange(0, 50), key, kind))
        elif r < 0.97:
            events.append((rng.randrange(0, 50), rng.randrange(1, len(NAMES)), ret))
        else:
            events.append((rng.randrange(0, 1 << 20), rng.randrange(0, 3), TIME))
    hidden = [0] * len(NAMES)
    if seed % 2:
        hidden[rng.randrange(1, len(NAMES))] = rng.choice([1, 2, 3, 4, 5])
    stop = _stop_ticks(events) + sum(k << 32 for _, k, kind in events if kind == TIME)
    splits = [rng.randrange(1, 3000) for _ in range(10)]
    tags = TAGS if tagged else [None]
    assert _streamed(events, hidden, 0, stop, splits, tags, []) == \
        _sliced(events, hidden, 0, stop, tags, [])


def test_an_optimizer_step_names_its_parent_unless_it_is_the_region():
    """The cases the scan exists for: a step's parent renamed after its begin,
    kept when it is torch's region of that name, and renamed too when the step
    call is dropped as short (torch's _optimizer_step_code is an empty marker: its
    parent's name must not hang on whether it took more than min_duration)."""
    call, ret = lib.PT_EV_PY_CALL, lib.PT_EV_PY_RETURN
    hidden = [0] * len(NAMES)
    wrapper, step, enter = 7, 6, 4
    plain = [(0, wrapper, call), (5, 1, call), (5, 1, ret), (5, step, call), (0, 5, TAG),
             (5, step, ret), (5, wrapper, ret)]
    got = _streamed(plain, hidden, 0, 2000, [2])
    assert got == _sliced(plain, hidden, 0, 2000)
    assert [s[0] for s in got[0] if s[4] == 0] == ["Optimizer.step#SGD.step"]
    in_region = [(0, wrapper, call), (1, enter, call), (0, 6, TAG), (1, enter, ret),
                 (5, step, call), (0, 5, TAG), (5, step, ret), (5, wrapper, ret)]
    got = _streamed(in_region, hidden, 0, 2000, [1])
    assert got == _sliced(in_region, hidden, 0, 2000)
    assert [s[0] for s in got[0] if s[4] == 0] == ["wrapper"]
    got = _streamed(plain, hidden, 8, 2000, [3])     # the step (5 ns) is short
    assert got == _sliced(plain, hidden, 8, 2000)
    assert [s[0] for s in got[0] if s[4] == 0] == ["Optimizer.step#SGD.step"]
    assert "step_code" not in [s[0] for s in got[0]]


# --- traced programs -----------------------------------------------------------

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def nested(depth, then):
    if depth:
        return nested(depth - 1, then)
    return then()


def threads_marks_and_calls_open_at_stop():
    """A trace of two threads, a region with args, an instant, a counter, frames
    running at start (seeded) and calls still running at stop."""
    release = threading.Event()
    started = threading.Event()

    def worker():
        started.set()
        fib(10)
        release.wait()

    holder = {}

    def run():
        t = threading.Thread(target=worker, name="worker")
        t.start()
        started.wait()
        with pytrace_cffi.record_function("region", {"n": 3}):
            fib(12)
            pytrace_cffi.instant("here", {"k": 1})
            pytrace_cffi.counter("c", 4)
        holder["trace"] = pytrace_cffi.stop()   # inside nested calls: open at stop
        release.set()
        t.join()

    pytrace_cffi.start()
    nested(5, lambda: nested(3, run))       # started inside calls: seeded frames
    return holder["trace"]


def test_threads_seeded_frames_marks_and_calls_open_at_stop(tmp_path):
    trace = threads_marks_and_calls_open_at_stop()
    assert sum(open_at_stop for _, _, open_at_stop, _ in trace.thread_counts()) > 5
    both_ways(trace, tmp_path)


@pytest.mark.parametrize("options", [
    {"min_duration_us": 2}, {"max_depth": 4}, {"c_calls": False, "min_duration_us": 0.5},
    {"exclude": ["*/threading.py"]}, {"max_events": 3000}])
def test_options(tmp_path, options):
    pytrace_cffi.start(**options)
    t = threading.Thread(target=fib, args=(11,))
    t.start()
    fib(13)
    t.join()
    trace = pytrace_cffi.stop()
    both_ways(trace, tmp_path)


@pytest.mark.parametrize("min_duration_us", [0, 3])
def test_spilled_trace_streams_from_its_file(tmp_path, min_duration_us):
    out = tmp_path / "spill"
    pytrace_cffi.start(max_events=2000, output=str(out), min_duration_us=min_duration_us)
    t = threading.Thread(target=fib, args=(12,))
    t.start()
    fib(14)
    t.join()
    spilled = pytrace_cffi.stop()
    assert isinstance(spilled, pytrace_cffi.SpilledTrace)
    both_ways(pytrace_cffi.load(str(out)), tmp_path)
    # the SpilledTrace exports too, and says the same
    again = tmp_path / "again.pftrace"
    spilled.export_perfetto(str(again), compress=False)
    assert again.read_bytes() == (tmp_path / "t-streamed.pftrace").read_bytes()


TORCH_SCRIPT = r"""
import os, sys, pathlib, time
import pytrace_cffi
import torch, workload
sys.path.insert(0, sys.argv[2])
from test_streaming import both_ways
model, optimizers, x = workload.make()
tmp = pathlib.Path(sys.argv[1])
torch_dir = os.path.dirname(torch.__file__)


def step_without_region(optimizer):
    optimizer._optimizer_step_code()      # its caller is named as the step
    time.sleep(0.001)                     # kept by every min_duration below


for n, options in enumerate([{}, {"exclude": [torch_dir + "/*"]}, {"min_duration_us": 2},
                             {"exclude": [torch_dir + "/*"], "min_duration_us": 1}]):
    workload.train_with_regions(model, optimizers, x)     # warm up
    pytrace_cffi.start(**options)
    workload.train_with_regions(model, optimizers, x)
    workload.train(model, optimizers, x)
    for optimizer in optimizers:
        step_without_region(optimizer)
    trace = pytrace_cffi.stop()
    names = set(trace.names)
    assert any(name.startswith("nn.Module: ") for name in names), names
    assert "train_step" in names, names
    both_ways(trace, tmp, str(n))
    # step_without_region's calls took the step's name (after they began: the
    # scan's rename), one per optimizer, under every option set
    calls = list(trace)
    sleepers = {c.parent for c in calls if c.name == "time.sleep"}
    renamed = [c for c in calls if c.id in sleepers and c.kind == "python"
               and c.name.startswith("Optimizer.step#")]
    assert len(renamed) == len(optimizers), (options, len(renamed))
print("ok")
"""


def _run_torch(tmp_path, stand_in):
    env = dict(os.environ)
    if stand_in:
        env["PYTHONPATH"] = os.pathsep.join([STAND_IN, ROOT])
    else:
        # workload.py alone (the real torch must win): a directory holding just it
        only = tmp_path / "workload_only"
        only.mkdir()
        with open(os.path.join(STAND_IN, "workload.py")) as f:
            (only / "workload.py").write_text(f.read())
        env["PYTHONPATH"] = os.pathsep.join([ROOT, str(only)])
    result = subprocess.run([sys.executable, "-c", TORCH_SCRIPT, str(tmp_path), HERE],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_torch_stand_in_regions_modules_steps_and_carriers(tmp_path):
    _run_torch(tmp_path, stand_in=True)


def test_real_torch(tmp_path):
    pytest.importorskip("torch")
    _run_torch(tmp_path, stand_in=False)


def test_calls_longer_than_four_seconds_keep_their_duration():
    """Durations past 2^32 ns take the walk's side table (slices mode, JSON)."""
    call, ret, time_ = lib.PT_EV_PY_CALL, lib.PT_EV_PY_RETURN, TIME
    events = [(0, 1, call), (5, 2, call), (0, 3, time_), (5, 2, ret), (7, 3, call),
              (0, 2, time_), (5, 3, ret), (5, 1, ret), (1, 2, call)]
    stop = 1000 + (5 << 32) + 40
    got = _streamed(events, [0] * len(NAMES), 0, stop, [2])
    assert got == _sliced(events, [0] * len(NAMES), 0, stop)
    assert max(row[2] - row[1] for row in got[1]) > 5 << 32


def test_a_top_level_region_waits_for_the_last_call_not_the_clock():
    """Under min_duration, a region opened at the top level ends with the thread's
    last call: a return matching nothing moves the clock past min_duration, but the
    region is still short, and what it holds must not be handed out before."""
    c_call, py_call = lib.PT_EV_C_CALL, lib.PT_EV_PY_CALL
    events = [(0, 1, c_call), (0, 1, TAG), (0, 1, py_call), (32, 1, py_call),
              (0, 1, lib.PT_EV_C_RETURN), (28, 1, lib.PT_EV_PY_RETURN)]
    hidden = [0] * len(NAMES)
    assert _streamed(events, hidden, 60, 1067, []) == _sliced(events, hidden, 60, 1067)


def test_exports_from_several_threads_at_once_share_the_scans(tmp_path):
    """Walks share a thread's scan (read only once finished): exports running at
    once on several threads, the GIL released in C, write the same bytes."""
    pytrace_cffi.start()
    fib(15)
    trace = pytrace_cffi.stop()
    paths = [tmp_path / f"{i}.pftrace" for i in range(4)]
    workers = [threading.Thread(target=trace.export_perfetto, args=(str(p),),
                                kwargs={"compress": False}) for p in paths]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len({p.read_bytes() for p in paths}) == 1
    assert not trace.slices_built()


def test_the_oracle_cache_keeps_only_fresh_builds(tmp_path):
    """A new build of the C oracle removes other source states' builds and locks
    older than a day; the current key and young files (another checkout's) stay."""
    import time
    import oracle_build
    old = time.time() - 2 * 24 * 3600
    names = {"stale": "_pt_oracle-aaaa.abi3.so", "stale_lock": "aaaa.lock",
             "young": "_pt_oracle-bbbb.abi3.so", "current": "_pt_oracle-cccc.abi3.so",
             "current_lock": "cccc.lock", "other": "notes.txt"}
    for label, name in names.items():
        path = tmp_path / name
        path.write_text(label)
        if label != "young":
            os.utime(path, (old, old))
    oracle_build._prune(str(tmp_path), "cccc")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [names["young"], names["current"], names["current_lock"], names["other"]])
