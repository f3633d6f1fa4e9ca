"""The HTML page and the summary stream from a trace's events (no slice table, no
Python object per call). The oracle is the slice-table path they replaced, written
out here as html.py and summary.py ran it (pt_reduce_slices tried once per
threshold, pt_summarize_slices per thread): the page's data and the summary's
numbers must be exactly its own, on traces of every shape (test_streaming's
both_ways runs these checks on its threads, options, spilled and torch traces),
and a 10M-call trace exported to .pftrace, .json.gz and .html stays within a few
bytes per event of memory from stop() on."""
import json
import os
import re
import subprocess
import sys
import threading

import pytest

import pytrace_cffi
from helpers import PROC_STATUS, perfetto_protos
from replay_reference import table_checked_against_replay
from pytrace_cffi._core import ffi, lib
from pytrace_cffi.render import html as html_module
from pytrace_cffi.render.summary import SORT_KEYS, SummaryRow, summarize

HERE = os.path.dirname(os.path.abspath(__file__))
# Where the pytrace_cffi under test is importable from, for subprocesses: the
# installed wheel in CI, the source tree with an in-place build otherwise.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))


def _embedded(text, element_id):
    match = re.search(f'<script type="application/json" id="{element_id}">(.*?)</script>',
                      text, re.S)
    assert match, element_id
    return json.loads(match.group(1))


def page_data(path):
    text = open(path, encoding="utf-8").read()
    return _embedded(text, "pt-meta"), _embedded(text, "pt-slices")


def budgets_for(calls):
    """Above and below the budget: every call, a third, a fiftieth, a handful."""
    return sorted({calls + 1, max(1, calls // 3), max(1, calls // 50), 3})


def streamed_html_and_summary(trace, tmp_path, name="t"):
    """The pages (one per budget) and summaries, streamed: the slice table is never
    built. Returns what table_html_and_summary must reproduce."""
    assert not trace.slices_built()
    calls = len(trace)
    pages = {}
    for budget in budgets_for(calls):
        path = tmp_path / f"{name}-{budget}.html"
        html_module.write_html(trace, path, call_budget=budget)
        pages[budget] = page_data(path)
    summaries = (summarize(trace, limit=None), summarize(trace, limit=None, per_thread=True),
                 summarize(trace, sort="self", limit=3, per_thread=True))
    assert not trace.slices_built(), "the streamed page or summary built the slice table"
    return pages, summaries


def check_against_table(trace, streamed):
    """Builds the slice table (the walk's, checked against the replay reference's)
    and checks the streamed pages and summaries equal what the slice-table path
    makes of it."""
    pages, summaries = streamed
    table_checked_against_replay(trace)
    assert summaries == (table_summarize(trace), table_summarize(trace, per_thread=True),
                         table_summarize(trace, sort="self", limit=3, per_thread=True))
    for budget, (meta, flats) in pages.items():
        reduction, arrays = table_page(trace, budget)
        assert meta["reduced"] == reduction, budget
        assert flats == arrays, budget
        assert meta["summary"] == html_module._summary_rows(table_summarize(trace))
        # the page counts calls as the summary does: frames open at start are none
        assert meta["calls"] == sum(not slices[i].flags & lib.PT_SLICE_SEEDED
                                    for _, slices, n in trace.thread_slices()
                                    for i in range(n))
        assert [t["calls"] for t in meta["threads"]] == [n for _, _, n in trace.thread_slices()]


# --- the oracle: the slice-table path as it was -----------------------------------------

def _table_reduce(slices, n, min_ns, top_levels, cap=0):
    kept = ffi.new("uint64_t[]", max(1, cap))
    self_ns = ffi.new("int64_t[]", max(1, cap))
    count = lib.pt_reduce_slices(slices, n, min_ns, top_levels, kept, self_ns, cap)
    assert count >= 0
    return count, kept, self_ns


def table_page(trace, budget):
    """(reduced, per-thread arrays) of the page, from the slice table: the threshold
    tried pass by pass (choose_reduction's loop), then the kept calls per thread."""
    tables = list(trace.thread_slices())
    calls = sum(n for _, _, n in tables)
    reduction = None
    if calls > budget:
        span = max(1, trace.stop_ns - trace.start_ns)
        min_ns = max(1, -(-span // html_module.REDUCED_WIDTH_PX))
        top_levels = html_module.TOP_LEVELS
        while True:
            shown = sum(_table_reduce(s, n, min_ns, top_levels)[0] for _, s, n in tables)
            if shown <= budget:
                reduction = {"min_ns": min_ns, "top_levels": top_levels, "shown": shown,
                             "calls": calls, "budget": budget}
                break
            if top_levels:
                top_levels -= 1
            else:
                min_ns *= 2
    arrays = []
    for _, slices, n in tables:
        flat, previous_start = [], trace.start_ns
        if reduction is None:
            for i in range(n):
                s = slices[i]
                flat += [s.start - previous_start, s.end - s.start, s.key, s.depth]
                previous_start = s.start
        else:
            count = _table_reduce(slices, n, min_ns, top_levels)[0]
            count, kept, self_ns = _table_reduce(slices, n, min_ns, top_levels, count)
            previous_index = -1
            for position in range(count):
                index = kept[position]
                s = slices[index]
                flat += [s.start - previous_start, s.end - s.start, s.key, s.depth,
                         index - previous_index - 1, self_ns[position]]
                previous_start, previous_index = s.start, index
        arrays.append(flat)
    return reduction, arrays


def table_summarize(trace, sort="total", limit=None, per_thread=False):
    """summarize() over the slice table with pt_summarize_slices, per thread whole."""
    unique_names = sorted(set(trace.names))
    name_id = {name: index for index, name in enumerate(unique_names)}
    n_names = len(unique_names)
    name_of_key = ffi.new("uint32_t[]", [name_id[name] for name in trace.names])
    times_open = ffi.new("uint32_t[]", max(1, n_names))

    def new_table():
        return (ffi.new("uint64_t[]", max(1, n_names)), ffi.new("int64_t[]", max(1, n_names)),
                ffi.new("int64_t[]", max(1, n_names)))

    tables = [] if per_thread else [(None, new_table())]
    for thread, slices, count in trace.thread_slices():
        if per_thread:
            tables.append((thread.name, new_table()))
        assert lib.pt_summarize_slices(slices, count, name_of_key, len(trace.names), n_names,
                                       *tables[-1][1], times_open) == lib.PT_OK
    rows = []
    for title, (calls, total, self_time) in tables:
        found = [SummaryRow(unique_names[i], calls[i], total[i], self_time[i], title)
                 for i in range(n_names) if calls[i] or total[i] or self_time[i]]
        found.sort(key=SORT_KEYS[sort])
        rows.extend(found[:limit])
    return rows


# --- traced programs ----------------------------------------------------------------

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recurse(n):
    return fib(8) if n == 0 else recurse(n - 1) + fib(3)


def program():
    worker = threading.Thread(target=fib, args=(13,), name="worker")
    worker.start()
    recurse(30)                 # recursion: total counts it once
    fib(14)
    sorted(range(100))
    worker.join()


def check_both_ways(trace, tmp_path):
    check_against_table(trace, streamed_html_and_summary(trace, tmp_path))


def test_threads_and_recursion(tmp_path):
    pytrace_cffi.start()
    program()
    check_both_ways(pytrace_cffi.stop(), tmp_path)


@pytest.mark.parametrize("options", [
    {"min_duration_us": 2}, {"max_depth": 5}, {"c_calls": False, "min_duration_us": 0.5},
    {"exclude": ["*/threading.py"]}, {"include": ["*/test_html_stream.py"]}])
def test_options(tmp_path, options):
    pytrace_cffi.start(**options)
    program()
    check_both_ways(pytrace_cffi.stop(), tmp_path)


def test_calls_open_at_stop_regions_and_marks(tmp_path):
    holder = {}

    def run():
        with pytrace_cffi.record_function("region", {"n": 3}):
            fib(12)
            pytrace_cffi.instant("here", {"k": 1})
        with pytrace_cffi.record_function("open region"):
            fib(10)
            holder["trace"] = pytrace_cffi.stop()     # inside nested calls: open at stop

    pytrace_cffi.start()
    recurse(6)
    recurse(10 if fib(2) else 0)
    run()
    trace = holder["trace"]
    assert sum(open_at_stop for _, _, open_at_stop, _ in trace.thread_counts()) > 1
    check_both_ways(trace, tmp_path)


@pytest.mark.parametrize("size", [1, 5, 97])
def test_batches_of_any_size(tmp_path, monkeypatch, size):
    """The reducer's and summarizer's state carries from batch to batch: the walk's
    batches cut again into pieces of `size` calls (a call's parent and ancestors in
    earlier pieces) give the same page and summary."""
    from pytrace_cffi.model import walk
    from pytrace_cffi.render import chrome
    whole = walk.thread_batches

    def pieces(trace):
        for thread, batches in whole(trace):
            yield thread, ((slices + at, min(size, n - at), first + at)
                           for slices, n, first in batches for at in range(0, n, size))

    pytrace_cffi.start()
    program()
    recurse(40)
    trace = pytrace_cffi.stop()
    monkeypatch.setattr(walk, "thread_batches", pieces)        # (summary's, read at call)
    monkeypatch.setattr(chrome, "thread_batches", pieces)
    monkeypatch.setattr(html_module, "thread_batches", pieces)
    streamed = streamed_html_and_summary(trace, tmp_path)
    monkeypatch.undo()
    check_against_table(trace, streamed)


def test_a_thread_of_several_walk_batches(tmp_path):
    """fib(22) on one thread: 114k events, more than one of the walk's runs."""
    pytrace_cffi.start()
    fib(22)
    trace = pytrace_cffi.stop()
    check_both_ways(trace, tmp_path)


@pytest.mark.parametrize("min_duration_us", [0, 2])
def test_spilled(tmp_path, min_duration_us):
    out = tmp_path / "spill"
    pytrace_cffi.start(max_events=3000, output=str(out), min_duration_us=min_duration_us)
    program()
    assert isinstance(pytrace_cffi.stop(), pytrace_cffi.SpilledTrace)
    check_both_ways(pytrace_cffi.load(str(out)), tmp_path)


def test_torch_stand_in_regions(tmp_path):
    """Modules, optimizer steps and record_function regions (the stand-in torch):
    test_streaming's both_ways runs these checks on each of its traces."""
    script = r"""
import sys, pathlib
sys.path.insert(0, sys.argv[2])
import pytrace_cffi, workload
from test_html_stream import check_both_ways
model, optimizers, x = workload.make()
workload.train_with_regions(model, optimizers, x)
for n, options in enumerate([{}, {"min_duration_us": 1}]):
    pytrace_cffi.start(**options)
    workload.train_with_regions(model, optimizers, x)
    workload.train(model, optimizers, x)
    trace = pytrace_cffi.stop()
    assert any(name.startswith("nn.Module: ") for name in trace.names)
    (pathlib.Path(sys.argv[1]) / str(n)).mkdir()
    check_both_ways(trace, pathlib.Path(sys.argv[1]) / str(n))
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "torch_stand_in"),
                                                        ROOT]))
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path), HERE], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


# --- ten million calls: content and memory ----------------------------------------------

BIG_SCRIPT = PROC_STATUS + r"""
import sys
import pytrace_cffi


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)




import gzip, pytrace_cffi.render.chrome, pytrace_cffi.render.perfetto  # noqa
import pytrace_cffi.render.html, pytrace_cffi.render.summary  # noqa
fib(15)
untraced = status("VmRSS")
pytrace_cffi.start()
fib(int(sys.argv[2]))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")                # VmHWM from here: the peak from stop() on
trace = pytrace_cffi.stop()
trace.export_perfetto(sys.argv[1] + ".pftrace")
trace.export_chrome_trace(sys.argv[1] + ".json.gz")
pytrace_cffi.render.html.write_html(trace, sys.argv[1] + ".html")
events = sum(t.n_events for t in trace.threads)
print(events, status("VmHWM") - untraced, len(trace), int(trace.slices_built()))
"""

FIB_N = 33
FIB_CALLS = 11_405_773          # fib(33) makes 2 * fib(34) - 1 calls


def _pftrace_counts(path):
    """(slice begins, slice ends, names of the begins in the first compressed packet
    that has any) of a .pftrace, by the perfetto package's protos: every packet
    parsed; the names resolved through the sequence's interning up to that packet
    only (resolving 22M names in Python would double the test's time)."""
    import zlib
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    begins = ends = 0
    first_names = None
    interned = {}
    outer = pb.Trace()
    with open(path, "rb") as f:
        outer.ParseFromString(f.read())
    for packet in outer.packet:
        if packet.HasField("compressed_packets"):
            inner = pb.Trace()
            inner.ParseFromString(zlib.decompress(packet.compressed_packets))
            packets = inner.packet
        else:
            packets = [packet]
        types = [p.track_event.type for p in packets]
        begins += types.count(pb.TrackEvent.TYPE_SLICE_BEGIN)
        ends += types.count(pb.TrackEvent.TYPE_SLICE_END)
        if first_names is None:
            found = []
            for p in packets:
                names = interned.setdefault(p.trusted_packet_sequence_id, {})
                for entry in p.interned_data.event_names:
                    names[entry.iid] = entry.name
                if p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                    found.append(names[p.track_event.name_iid])
            if found and packet.HasField("compressed_packets"):
                first_names = found
    return begins, ends, first_names


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
@pytest.mark.big
def test_ten_million_calls_to_pftrace_json_gz_and_html_in_bounded_memory(tmp_path):
    """fib(33): 11.4M calls, 22.8M events, written as .pftrace, .json.gz and .html in
    a subprocess. The peak RSS from stop() through all three stays under 16 bytes an
    event (the events hold 8; the slice table the page and its summary used to build
    took 20 more, ~28 in all); the files hold every call."""
    base = tmp_path / "big"
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, "-c", BIG_SCRIPT, str(base), str(FIB_N)],
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    events, peak, calls, built = map(int, result.stdout.split())
    assert calls >= FIB_CALLS and events >= 2 * FIB_CALLS
    assert peak < 16 * events, f"{peak / events:.1f} bytes per event"
    assert not built
    # The page: reduced, its summary over every call, its notice's numbers.
    meta, flats = page_data(f"{base}.html")
    assert meta["calls"] == calls - 1       # <module>, running at start(), is no call
    assert meta["reduced"]["calls"] == calls
    assert 0 < meta["reduced"]["shown"] <= html_module.CALL_BUDGET
    assert sum(len(flat) // 6 for flat in flats) == meta["reduced"]["shown"]
    rows = {row[0].rsplit(": ", 1)[-1]: row for row in meta["summary"]["rows"]}
    assert rows["fib"][1] == FIB_CALLS
    assert rows["fib"][2] > 0 and rows["fib"][3] > 0
    # The JSON: read back (line by line, in C), every fib call.
    from pytrace_cffi.reading import read_trace
    by_name = {row.name.rsplit(": ", 1)[-1]: row
               for row in summarize(read_trace(f"{base}.json.gz"), limit=None)}
    assert by_name["fib"].calls == FIB_CALLS
    assert [by_name["fib"].calls, by_name["fib"].total_ns, by_name["fib"].self_ns] == \
        rows["fib"][1:]
    # The .pftrace, decoded where the perfetto protos are installed.
    if perfetto_protos(required=False) is None:                # fails in CI
        assert os.path.getsize(f"{base}.pftrace") > calls    # at least a byte a call
        return
    begins, ends, first_names = _pftrace_counts(f"{base}.pftrace")
    assert begins == ends == calls
    fibs = [name for name in first_names if name.endswith(": fib")]
    assert len(fibs) > 1000 and len(set(fibs)) == 1
