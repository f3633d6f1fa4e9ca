"""summarize / format_summary / read_trace: numbers worked out by hand."""
import gzip
import json
import os
import re
import subprocess
import sys
import threading
import types

import pytest

import pytrace_cffi
from pytrace_cffi import TraceFormatError, TraceWarning
from pytrace_cffi.readers import chrome as summary_module
from pytrace_cffi.readers import chrome_lines
from pytrace_cffi._core import ffi, lib
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render.summary import SummaryRow, format_summary, summarize
from pytrace_cffi.model.trace import ThreadInfo, Trace

US = 1000            # the synthetic trace counts in microseconds
OUTER, MIDDLE, CRC, LEN = "m.py(1): outer", "m.py(2): middle", "zlib.crc32", "builtins.len"

# (name, start us, end us, parent index) per thread, parents first:
#   main:  outer [0,100] > middle [10,60] > outer [20,50] > crc32 [25,48]
#                        > middle [70,90]
#                        > len [91,92], len [93,94], len [95,96]
#   other: outer [200,260]
MAIN = [(OUTER, 0, 100, None), (MIDDLE, 10, 60, 0), (OUTER, 20, 50, 1), (CRC, 25, 48, 2),
        (MIDDLE, 70, 90, 0), (LEN, 91, 92, 0), (LEN, 93, 94, 0), (LEN, 95, 96, 0)]
OTHER = [(OUTER, 200, 260, None)]
# outer: total 100 + 60 (its inner call is inside the outer one: not counted again);
#        self (100 - 50 - 20 - 3) + (30 - 23) + 60 = 27 + 7 + 60
EXPECTED = {
    OUTER: SummaryRow(OUTER, 3, 160 * US, 94 * US, None),
    MIDDLE: SummaryRow(MIDDLE, 2, 70 * US, 40 * US, None),     # self (50 - 30) + 20
    CRC: SummaryRow(CRC, 1, 23 * US, 23 * US, None),
    LEN: SummaryRow(LEN, 3, 3 * US, 3 * US, None),
}


def synthetic_trace(threads):
    names = ["<unknown>", OUTER, MIDDLE, CRC, LEN]
    kinds = ["python", "python", "python", "c", "c"]
    infos, slices = [], []
    for index, (thread_name, calls) in enumerate(threads):
        array = ffi.new("pt_slice[]", len(calls))
        for i, (name, start, end, parent) in enumerate(calls):
            s = array[i]
            s.start, s.end, s.key = start * US, end * US, names.index(name)
            s.flags = 1 if kinds[s.key] == "c" else 0
            s.parent = -1 if parent is None else parent
            s.depth = 0 if parent is None else array[parent].depth + 1
        infos.append(ThreadInfo(index, 100 + index, 200 + index, thread_name, 0, 0))
        slices.append((array, len(calls)))
    return Trace(names=names, key_kinds=kinds, key_args={}, threads=infos, slices=slices,
                 start_ns=0, stop_ns=300 * US, pid=4242, python_version="3.x",
                 backend="synthetic", clock="monotonic",
                 params={"modules": [], "optimizer_steps": []})


@pytest.fixture(scope="module")
def trace():
    return synthetic_trace([("MainThread", MAIN), ("other", OTHER)])


def test_totals_count_recursion_once_and_self_excludes_callees(trace):
    rows = summarize(trace, limit=None)
    assert {row.name: row for row in rows} == EXPECTED
    assert sum(row.self_ns for row in rows) == 100 * US + 60 * US   # all time, once


@pytest.mark.parametrize("sort, order", [
    ("total", [OUTER, MIDDLE, CRC, LEN]),
    ("self", [OUTER, MIDDLE, CRC, LEN]),
    ("calls", [LEN, OUTER, MIDDLE, CRC]),          # outer and len: 3 calls, by name
    ("name", [LEN, OUTER, MIDDLE, CRC]),
])
def test_sort_keys(trace, sort, order):
    assert [row.name for row in summarize(trace, sort=sort)] == order


def test_sort_by_self_differs_from_total_on_one_thread():
    main_only = synthetic_trace([("MainThread", MAIN)])
    assert [r.name for r in summarize(main_only, sort="total")] == [OUTER, MIDDLE, CRC, LEN]
    assert [r.name for r in summarize(main_only, sort="self")] == [MIDDLE, OUTER, CRC, LEN]


def test_limit_and_bad_sort(trace):
    assert [row.name for row in summarize(trace, limit=2)] == [OUTER, MIDDLE]
    with pytest.raises(ValueError, match="sort must be one of"):
        summarize(trace, sort="fastest")


@pytest.mark.parametrize("limit", [None, 0])
def test_limit_none_or_zero_gives_every_row_as_the_cli_does(trace, limit):
    assert [row.name for row in summarize(trace, limit=limit)] == [OUTER, MIDDLE, CRC, LEN]
    assert len(summarize(trace, per_thread=True, limit=limit)) == 4 + 1


@pytest.mark.parametrize("limit, error", [
    (-1, ValueError), (-20, ValueError),
    (True, TypeError), (False, TypeError), (1.5, TypeError), (2.0, TypeError),
    ("3", TypeError), ([2], TypeError),
])
def test_a_bad_limit_raises_naming_it_before_any_work(limit, error):
    from pytrace_cffi import summary
    for function in (summarize, summary.summarize):
        with pytest.raises(error, match="limit must be"):
            function(object(), limit=limit)         # not a trace: never looked at


def test_per_thread(trace):
    rows = summarize(trace, per_thread=True, limit=2)
    assert rows == [
        SummaryRow(OUTER, 2, 100 * US, 34 * US, "MainThread"),
        SummaryRow(MIDDLE, 2, 70 * US, 40 * US, "MainThread"),
        SummaryRow(OUTER, 1, 60 * US, 60 * US, "other"),
    ]


def test_format_summary_is_a_fixed_width_table(trace):
    text = format_summary(summarize(trace), title="synthetic")
    lines = text.splitlines()
    assert lines[0] == "synthetic"
    assert lines[1].split() == ["calls", "total", "ms", "self", "ms", "function"]
    assert lines[3].split(None, 3) == ["3", "0.160", "0.094", OUTER]
    assert lines[6].split(None, 3) == ["3", "0.003", "0.003", LEN]
    function_column = lines[1].index("function")
    assert all(line[function_column - 2:function_column] == "  " and
               line[function_column] != " " for line in lines[2:])
    per_thread = format_summary(summarize(trace, per_thread=True)).splitlines()
    assert "thread" in per_thread[0]
    assert per_thread[-2] == ""                    # a blank line before the next thread
    assert per_thread[-1].split(None, 4) == ["1", "0.060", "0.060", "other", OUTER]
    assert "(no calls)" in format_summary([])


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def driver():
    return fib(5) + fib(5)


def test_traced_recursion(tmp_path):
    with pytrace_cffi.trace(c_calls=False) as t:
        driver()
    calls = list(t.trace)
    outer_fibs = [c for c in calls if c.name.endswith(": fib")
                  and not calls[c.parent].name.endswith(": fib")]
    driver_call = next(c for c in calls if c.name.endswith(": driver"))
    rows = {row.name.rsplit(": ", 1)[1]: row for row in summarize(t.trace, limit=None)}
    assert rows["fib"].calls == 2 * 15
    # fib's time is its two outermost calls; it calls nothing else, so self == total
    assert rows["fib"].total_ns == sum(c.end_ns - c.start_ns for c in outer_fibs)
    assert rows["fib"].self_ns == rows["fib"].total_ns
    assert rows["driver"].total_ns == driver_call.end_ns - driver_call.start_ns
    assert rows["driver"].self_ns == rows["driver"].total_ns - rows["fib"].total_ns


@pytest.mark.parametrize("form", ["out.json", "out.json.gz", "saved"])
def test_read_trace_gives_back_what_was_written(trace, tmp_path, form):
    path = tmp_path / form
    if form == "saved":
        trace.save(path)
    else:
        trace.export_chrome_trace(path)
    loaded = read_trace(path)
    assert list(loaded) == list(trace)
    assert [t.name for t in loaded.threads] == ["MainThread", "other"]
    assert (loaded.start_ns, loaded.stop_ns, loaded.pid) == (0, 300 * US, 4242)
    assert summarize(loaded, limit=None) == summarize(trace, limit=None)


def test_read_json_of_a_live_trace_round_trips(tmp_path):
    with pytrace_cffi.trace() as t:
        driver()
        with pytrace_cffi.record_function("region", {"step": 3}):
            sorted([3, 1, 2])
        pytrace_cffi.instant("mark", {"k": 1})
    path = tmp_path / "live.json"
    t.trace.export_chrome_trace(path)
    loaded = read_trace(str(path))
    assert list(loaded) == list(t.trace)             # names, times, parents and kinds
    assert loaded.marks == t.trace.marks
    again = tmp_path / "again.json"
    loaded.export_chrome_trace(again)
    assert again.read_text() == path.read_text()


def seeded_leaf():
    return 1


class LateWorker(threading.Thread):
    def run(self):
        seeded_leaf()


def started_inside():
    """Running when start() is called: this frame and its caller's (the test's)."""
    pytrace_cffi.start()
    seeded_leaf()
    worker = LateWorker()         # born while tracing: its frames began in the trace
    worker.start()
    worker.join()
    return pytrace_cffi.stop()


def test_frames_running_at_start_count_their_time_but_no_call(tmp_path):
    trace = started_inside()
    rows = {row.name.rsplit(": ", 1)[1]: row for row in summarize(trace, limit=None)
            if "test_summary.py(" in row.name}
    [frame] = [c for c in trace if c.name.endswith(": started_inside")]
    assert frame.start_ns == trace.start_ns
    assert (rows["started_inside"].calls, rows["started_inside"].total_ns) == \
        (0, frame.end_ns - frame.start_ns)
    assert rows["test_frames_running_at_start_count_their_time_but_no_call"].calls == 0
    assert rows["seeded_leaf"].calls == 2
    # The worker's frames were seeded when it was attached, after start: calls.
    assert rows["run"].calls == 1
    flagged = sorted(trace.names[array[i].key].rsplit(": ", 1)[1]
                     for _, array, n in trace.thread_slices() for i in range(n)
                     if array[i].flags & lib.PT_SLICE_SEEDED)
    assert "started_inside" in flagged and "run" not in flagged
    # Every form of the trace says so: the JSON marks the frames, the saved
    # directory keeps the flag, and each reads back to the same summary.
    path = tmp_path / "seeded.json"
    trace.export_chrome_trace(path)
    marked = sorted(e["name"].rsplit(": ", 1)[1] for e in json.loads(path.read_text())
                    ["traceEvents"] if e.get("args", {}).get("open at start") is True)
    assert marked == flagged
    trace.save(tmp_path / "saved")
    for again in (read_trace(str(path)), read_trace(str(tmp_path / "saved"))):
        assert summarize(again, limit=None) == summarize(trace, limit=None)
    table = format_summary(summarize(trace, limit=None)).splitlines()
    assert [line.split()[0] for line in table if line.endswith(": started_inside")] == ["0"]


def chrome_json(trace, tmp_path):
    path = tmp_path / "good.json"
    trace.export_chrome_trace(path)
    return json.loads(path.read_text())


def broken(data, change):
    change(data)
    return json.dumps(data)


def x_events(data):
    return [e for e in data["traceEvents"] if e["ph"] == "X"]


@pytest.mark.parametrize("name, content, message", [
    ("garbage.json", lambda d: "{not json", "not valid JSON"),
    ("empty.json", lambda d: "", "not valid JSON"),
    ("list.json", lambda d: "[]", "no traceEvents"),
    ("foreign.json", lambda d: broken(d, lambda d: d.pop("otherData")),
     "not written by pytrace_cffi"),
    ("no_start.json", lambda d: broken(d, lambda d: d["otherData"].pop("start_monotonic_ns")),
     "start_monotonic_ns"),
    ("escapes.json", lambda d: broken(d, lambda d: x_events(d)[1].update(dur=1e6)),
     "does not nest"),
    ("orphan.json", lambda d: broken(d, lambda d: x_events(d)[1]["args"].update(
        {"Python parent id": 5})), "not an earlier call"),
    ("gap.json", lambda d: broken(d, lambda d: x_events(d)[1]["args"].update(
        {"Python id": 50})), "not consecutive"),
    ("tid.json", lambda d: broken(d, lambda d: x_events(d)[0].update(tid=999)),
     "do not match a thread_name"),
    ("nan.json", lambda d: broken(d, lambda d: x_events(d)[0].update(ts=float("nan"))),
     "bad ts or dur"),
    ("phase.json", lambda d: broken(d, lambda d: d["traceEvents"].append({"ph": "B"})),
     "unexpected phase"),
    ("category.json", lambda d: broken(d, lambda d: x_events(d)[0].update(cat="gpu")),
     "unknown category"),
    ("notes.txt", lambda d: "hello", "neither a saved-trace directory"),
    # a page or a flame graph of ours: said what it is and what to write instead
    ("page.html", lambda d: "<html></html>", r"\(a self-contained page: timeline and "
     r"summary\) is made for its viewer and not read back: write a \.pftrace"),
    ("flame.folded", lambda d: "a;b 1\n", r"is made for its viewer and not read back"),
])
def test_bad_files_raise_trace_format_error(trace, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content(chrome_json(trace, tmp_path)))
    with pytest.raises(TraceFormatError, match=message):
        read_trace(path)


def test_bad_gzip_and_missing_paths(trace, tmp_path):
    good = tmp_path / "good.json.gz"
    trace.export_chrome_trace(good)
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(good.read_bytes()[:-20])
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_trace(truncated)
    fake = tmp_path / "fake.json.gz"
    fake.write_bytes(b"plain text, not gzip")
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_trace(fake)
    with pytest.raises(TraceFormatError, match="does not exist"):
        read_trace(tmp_path / "missing.json")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(TraceFormatError, match="meta.json is missing"):
        read_trace(tmp_path / "empty_dir")
    with gzip.open(tmp_path / "list.json.gz", "wt") as f:
        f.write("[1, 2]")
    with pytest.raises(TraceFormatError, match="no traceEvents"):
        read_trace(tmp_path / "list.json.gz")


# --- big JSON: read line by line ----------------------------------------------------

# Names and args that try to end the name or the args early on the line.
TRICKY = types.FunctionType(fib.__code__.replace(co_name='a","ts":1.000,"dur":2}},\\'),
                            globals())


def tricky_work():
    TRICKY(3)
    with pytrace_cffi.record_function('b"}}', {"ts": 5, "Python": "}},", "u": "\u00e9\u2028"}):
        driver()


@pytest.fixture(scope="module")
def live_trace():
    with pytrace_cffi.trace() as t:
        tricky_work()
        pytrace_cffi.instant("mark", {"k": 1})
    return t.trace


@pytest.fixture
def whole_reads(monkeypatch):
    """Counts the reads that fall back to parsing the whole file."""
    reads = []
    whole = summary_module._read_chrome_whole
    monkeypatch.setattr(summary_module, "_read_chrome_whole",
                        lambda path, compressed: reads.append(path) or whole(path, compressed))
    return reads


@pytest.mark.parametrize("name", ["live.json", "live.json.gz"])
def test_our_json_is_read_line_by_line(live_trace, tmp_path, whole_reads, name):
    path = tmp_path / name
    live_trace.export_chrome_trace(path)
    loaded = read_trace(path)
    assert whole_reads == []
    assert list(loaded) == list(live_trace)
    assert any('"ts":1.000' in name for name in loaded.names)
    assert loaded.key_args == {loaded.names.index('b"}}'): {"ts": 5, "Python": "}},",
                                                            "u": "\u00e9\u2028"}}
    assert loaded.marks == live_trace.marks
    assert summarize(loaded, limit=None) == summarize(live_trace, limit=None)
    again = tmp_path / ("again" + name[4:])
    loaded.export_chrome_trace(again)
    assert read_trace(again).names == loaded.names


def test_call_lines_are_read_in_c(live_trace, tmp_path, monkeypatch):
    # Python sees only the lines C leaves it: thread names, marks, the first call
    # of each function and the last event; C takes the rest.
    path = tmp_path / "live.json"
    live_trace.export_chrome_trace(path)
    in_python = []
    line = chrome_lines._LineReader.line
    monkeypatch.setattr(chrome_lines._LineReader, "line",
                        lambda self, text: in_python.append(text) or line(self, text))
    assert list(read_trace(path)) == list(live_trace)
    keys_used = {c.name for c in live_trace}
    assert len(in_python) <= len(live_trace.threads) + len(keys_used) + 2 + 2
    assert len(live_trace) > 2 * len(in_python)


def test_damaged_lines_never_crash(live_trace, tmp_path):
    # Every byte of a few call lines changed in turn: read as before, or a
    # TraceFormatError - never a crash, a hang or another exception.
    path = tmp_path / "live.json"
    live_trace.export_chrome_trace(path)
    good = path.read_bytes()
    lines = good.split(b"\n")
    expected = list(live_trace)
    for number in (4, len(lines) - 5):
        start = sum(len(line) + 1 for line in lines[:number])
        for offset in range(len(lines[number]) + 1):
            for byte in (b"9", b"\"", b"\\", b"\n"):
                damaged = good[:start + offset] + byte + good[start + offset + 1:]
                path.write_bytes(damaged)
                try:
                    read_trace(path)
                except TraceFormatError:
                    pass
    path.write_bytes(good)
    assert list(read_trace(path)) == expected


def test_other_layouts_are_read_whole_with_a_note_when_big(live_trace, tmp_path, whole_reads,
                                                           monkeypatch):
    ours = tmp_path / "ours.json"
    live_trace.export_chrome_trace(ours)
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads(ours.read_text()), indent=1))
    assert list(read_trace(pretty)) == list(live_trace)
    assert whole_reads == [str(pretty)]
    # Calls of a thread out of order: our head, but not our layout after all.
    lines = ours.read_text().splitlines(keepends=True)
    lines[3], lines[4] = lines[4], lines[3]
    shuffled = tmp_path / "shuffled.json"
    shuffled.write_text("".join(lines))
    monkeypatch.setattr(summary_module, "WHOLE_READ_NOTE_BYTES", 0)
    with pytest.warns(TraceWarning, match="out of order.*reading it whole"):
        assert list(read_trace(shuffled)) == list(live_trace)
    assert whole_reads == [str(pretty), str(shuffled)]


def edit_line(lines, number, change):
    lines = list(lines)
    lines[number] = change(lines[number])
    return lines


@pytest.mark.parametrize("name, change, message", [
    ("truncated.json", lambda lines: lines[:-3], "ends before the closing"),
    ("no_comma.json", lambda lines: edit_line(lines, 4, lambda l: l.replace("},\n", "}\n")),
     "no comma after event"),
    ("after.json", lambda lines: lines + ["{}\n"], "text after the closing"),
    ("garbage.json", lambda lines: edit_line(lines, 5, lambda l: "{nope,\n"),
     "event 3: not valid JSON"),
    ("escapes.json", lambda lines: edit_line(lines, 4, lambda l: re.sub(
        r'"dur":[\d.]+', '"dur":1000000.000', l)), "does not nest"),
    ("orphan.json", lambda lines: edit_line(lines, 4, lambda l: l.replace(
        '"Python parent id":0', '"Python parent id":7')), "not an earlier call"),
    ("badname.json", lambda lines: edit_line(lines, 4, lambda l: re.sub(
        r'"name":"[^"]*"', '"name":"a"b"', l)), "event 2: not valid JSON"),
    ("zeros.json", lambda lines: edit_line(lines, 5, lambda l: l.replace('"tid":', '"tid":0')),
     "event 3: not valid JSON"),
    ("phase.json", lambda lines: edit_line(lines, 4, lambda l: l.replace('"ph":"X"',
                                                                         '"ph":"B"')),
     "unexpected phase"),
    ("tid.json", lambda lines: edit_line(lines, 4, lambda l: re.sub(r'"tid":\d+', '"tid":9',
                                                                    l)),
     "do not match a thread_name"),
    ("huge.json", lambda lines: edit_line(lines, 0, lambda l: re.sub(
        r'"start_monotonic_ns": \d+', '"start_monotonic_ns": 9223372036854775000', l)),
     "out of range"),
])
def test_bad_lines_raise_trace_format_error(live_trace, tmp_path, whole_reads, name, change,
                                            message):
    good = tmp_path / "good.json"
    live_trace.export_chrome_trace(good)
    path = tmp_path / name
    path.write_text("".join(change(good.read_text().splitlines(keepends=True))))
    with pytest.raises(TraceFormatError, match=message):
        read_trace(path)
    assert whole_reads == []


READ_AND_SUMMARIZE = r"""
import json, sys
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render.summary import summarize

def peak_rss_kb():
    # VmHWM, not ru_maxrss: a child's ru_maxrss starts from its parent's (the
    # pytest process's) peak, as vfork/exec carries the high-water mark over.
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))

trace = read_trace(sys.argv[1])
rows = summarize(trace, limit=None)
print(json.dumps({"calls": len(trace), "rows": [list(row) for row in rows],
                  "maxrss_kb": peak_rss_kb()}))
"""


def many_calls(n):
    for i in range(n):
        fib(1)
        len("x")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM")
@pytest.mark.parametrize("name", ["many.json", "many.json.gz"])
def test_a_big_json_summary_takes_little_memory(tmp_path, name):
    # 500k calls, ~90 MB of JSON: read whole, the events alone took ~1 KB a call
    # (~500 MB) as Python objects; line by line the trace takes 44 bytes a call.
    with pytrace_cffi.trace() as t:
        many_calls(250_000)
    path = tmp_path / name
    t.trace.export_chrome_trace(path)
    expected = [list(row) for row in summarize(t.trace, limit=None)]
    script = tmp_path / "read_and_summarize.py"
    script.write_text(READ_AND_SUMMARIZE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(pytrace_cffi.__file__))] +
        [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, str(script), str(path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["calls"] == len(t.trace) > 500_000
    assert facts["rows"] == expected
    assert facts["maxrss_kb"] < 150 << 10
