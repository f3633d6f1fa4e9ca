"""Garbage collections (log_gc): each a region on the thread that ran it. Expected
counts come from the programs themselves (how often they call gc.collect and what
it returns, the collector's own statistics), never from the tracer."""
import gc
import json
import subprocess
import sys
import threading

import pytest

import pytrace_cffi

from helpers import missing_tool

GC_NAMES = {f"gc (generation {n})" for n in range(3)}


def gc_slices(trace):
    return [call for call in trace if call.name in GC_NAMES]


def region_args(trace, path):
    """The gc slices' args in the trace's Chrome JSON, in start order."""
    trace.export_chrome_trace(str(path))
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    return [{k: e["args"][k] for k in ("generation", "collected", "uncollectable")
             if k in e["args"]} for e in events if e.get("name") in GC_NAMES]


@pytest.fixture
def no_automatic_collection():
    """Only the test's own collections: none triggered by an allocation."""
    enabled = gc.isenabled()
    gc.disable()
    yield
    if enabled:
        gc.enable()


@pytest.fixture
def no_other_gc_callbacks():
    """No gc.callbacks but ours while tracing: another library's (hypothesis keeps
    one once used) is Python code that each collection runs."""
    others = list(gc.callbacks)
    gc.callbacks[:] = []
    yield
    gc.callbacks[:] = others


class Cycle:
    def __init__(self):
        self.me = self


def test_each_collect_is_one_slice_under_its_call_with_what_it_found(
        tmp_path, no_automatic_collection):
    found = []
    before = list(gc.callbacks)     # other libraries' (hypothesis keeps one)
    pytrace_cffi.start(log_gc=True)
    for n in range(3):
        for _ in range(n + 1):
            Cycle()
        found.append(gc.collect())
    trace = pytrace_cffi.stop()
    calls = {call.id: call for call in trace}
    slices = gc_slices(trace)
    assert [s.name for s in slices] == ["gc (generation 2)"] * 3
    assert {s.thread for s in slices} == {threading.get_native_id()}
    assert [calls[s.parent].name for s in slices] == ["gc.collect"] * 3
    assert all(s.kind == "annotation" for s in slices)
    args = region_args(trace, tmp_path / "t.json")
    # gc.collect() returns what it found unreachable: collected + uncollectable
    assert [a["collected"] + a["uncollectable"] for a in args] == found
    assert [a["generation"] for a in args] == [2, 2, 2]
    assert not any("pytrace_cffi" in call.name for call in trace)
    assert gc.callbacks == before


def test_collected_and_uncollectable_are_each_their_own_number(tmp_path,
                                                               no_automatic_collection):
    """A collection that finds 3 cycles it frees and 2 it cannot: objects with a
    legacy tp_del finalizer (_testcapi.with_tp_del; __del__ has been collectable
    since 3.4, and gc.DEBUG_SAVEALL counts what it keeps as collected) are
    uncollectable and go to gc.garbage. The region's args are the numbers CPython's
    own callback is given, each in its place (the two swapped passed every check of
    their sum) (#31)."""
    try:
        import _testcapi
    except ImportError:
        missing_tool("CPython's _testcapi module", "part of a standard CPython build")

    @_testcapi.with_tp_del
    class Legacy:
        def __init__(self):
            self.me = self

        def __tp_del__(self):
            pass

    seen = []

    def recorder(phase, info):
        if phase == "stop":
            seen.append(dict(info))
    gc.collect()
    gc.callbacks.append(recorder)
    try:
        pytrace_cffi.start(log_gc=True)
        Legacy(), Legacy(), Cycle(), Cycle(), Cycle()
        found = gc.collect()
        trace = pytrace_cffi.stop()
    finally:
        gc.callbacks.remove(recorder)
        kept = [o for o in gc.garbage if isinstance(o, Legacy)]
        gc.garbage[:] = [o for o in gc.garbage if not isinstance(o, Legacy)]
        for legacy in kept:
            legacy.me = None
        del kept
    (info,) = seen
    # 2 uncollectable cycles (3.9 also counts each one's __dict__: 4), 3 collected:
    # each number non-zero and not the other's
    assert info["uncollectable"] in (2, 4) and info["collected"] >= 3
    assert info["collected"] != info["uncollectable"]
    assert info["collected"] + info["uncollectable"] == found
    # (the three numbers recorded: 3.15's callback is also given candidates and
    # duration, which would make each young collection's args distinct)
    assert region_args(trace, tmp_path / "t.json") == [
        {key: info[key] for key in ("generation", "collected", "uncollectable")}]


def test_a_finalizer_run_by_a_collection_is_inside_its_slice(tmp_path,
                                                             no_automatic_collection):
    class Finalized(Cycle):
        def __del__(self):
            pass

    pytrace_cffi.start(log_gc=True)
    Finalized()
    found = gc.collect()
    trace = pytrace_cffi.stop()
    calls = {call.id: call for call in trace}
    (collection,) = gc_slices(trace)
    finalizers = [c for c in trace if c.name.endswith(": __del__")]
    assert finalizers and all(calls[c.parent] is collection or
                              calls[c.parent].name == collection.name for c in finalizers)
    assert all(collection.start_ns <= c.start_ns <= c.end_ns <= collection.end_ns
               for c in finalizers)
    (args,) = region_args(trace, tmp_path / "t.json")
    assert args["collected"] + args["uncollectable"] == found >= 1


def test_young_collections_show_on_the_thread_that_ran_them():
    def allocate():
        kept = [[i] for i in range(30_000)]     # survivors: young collections run
        return len(kept)

    gc.collect()            # young counts at zero: none due on this thread meanwhile
    before = [s["collections"] for s in gc.get_stats()]
    pytrace_cffi.start(log_gc=True)
    worker = threading.Thread(target=allocate)
    worker.start()
    worker.join()
    trace = pytrace_cffi.stop()
    ran = sum(s["collections"] for s in gc.get_stats()) - sum(before)
    slices = gc_slices(trace)
    assert ran >= 1 and len(slices) == ran
    assert "gc (generation 0)" in {s.name for s in slices}
    assert {s.thread for s in slices} == {worker.native_id}


def test_off_by_default_installs_nothing(no_automatic_collection):
    before = list(gc.callbacks)     # other libraries' (hypothesis keeps one)
    pytrace_cffi.start()
    seen = list(gc.callbacks)
    gc.collect()
    trace = pytrace_cffi.stop()
    assert seen == before and gc_slices(trace) == []


def test_a_written_file_keeps_the_slices_and_their_args(tmp_path, no_automatic_collection):
    out = tmp_path / "out.json"
    pytrace_cffi.start(log_gc=True, output=str(out))
    found = gc.collect()
    pytrace_cffi.stop()
    with open(out, encoding="utf-8") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("name") in GC_NAMES]
    assert [(e["cat"], e["args"]["generation"]) for e in events] == [("user_annotation", 2)]
    assert events[0]["args"]["collected"] + events[0]["args"]["uncollectable"] == found


def test_run_log_gc(tmp_path):
    (tmp_path / "prog.py").write_text("import gc\nfor _ in range(2):\n    gc.collect()\n")
    for flags, expected in ((("--log-gc",), 2), ((), 0)):
        proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", *flags,
                               "-o", "t.json", "prog.py"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        with open(tmp_path / "t.json", encoding="utf-8") as f:
            names = [e.get("name") for e in json.load(f)["traceEvents"]]
        assert names.count("gc (generation 2)") == expected


def test_collections_that_run_no_python_code_share_their_args(tmp_path, no_other_gc_callbacks):
    """A flight recorder runs for days: a young collection's args must not take
    memory of their own each (only those of collections that ran Python code do)."""
    from pytrace_cffi._tracer import Session
    session = Session(log_gc=True)
    session.start()
    for _ in range(300):
        gc.collect(0)
    session.stop()
    assert len(session.annotation_args) <= 10
    trace = session.result()
    slices = [s for s in gc_slices(trace) if s.name == "gc (generation 0)"]
    assert len(slices) >= 300
    args = region_args(trace, tmp_path / "t.json")
    assert all(set(a) == {"generation", "collected", "uncollectable"} for a in args)


def test_a_program_clearing_gc_callbacks_is_told_what_the_trace_lacks(
        no_automatic_collection, no_other_gc_callbacks):
    """The program empties gc.callbacks while log_gc traces: the collections before
    are in the trace, those after are not, and stop() says so once (they went
    missing silently)."""
    pytrace_cffi.start(log_gc=True)
    gc.collect()
    gc.collect()
    gc.callbacks.clear()
    gc.collect()
    with pytest.warns(pytrace_cffi.TraceWarning, match="log_gc: the program removed "
                      "pytrace_cffi's callback from gc.callbacks") as warned:
        trace = pytrace_cffi.stop()
    assert len(gc_slices(trace)) == 2
    assert len([w for w in warned if "gc.callbacks" in str(w.message)]) == 1


def test_log_gc_with_its_callback_kept_says_nothing(no_automatic_collection,
                                                    no_other_gc_callbacks):
    import warnings
    pytrace_cffi.start(log_gc=True)
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pytrace_cffi.TraceWarning)
        trace = pytrace_cffi.stop()
    assert len(gc_slices(trace)) == 1
