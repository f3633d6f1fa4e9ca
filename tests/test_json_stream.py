"""A big .json/.json.gz read back streams: read_trace checks and counts the calls
without keeping them, and summary and exports read each thread again in batches
(readers.chrome_lines._JsonStreams), never building the slice table."""
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

import pytrace_cffi
from helpers import PROC_STATUS
from pytrace_cffi import TraceFormatError
from pytrace_cffi import reading
from pytrace_cffi.readers import chrome_lines as summary_module
from pytrace_cffi.render.html import write_html
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render.summary import process_totals, summarize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def worker(n):
    with pytrace_cffi.record_function("worker region", {"n": n}):
        fib(n)
    pytrace_cffi.instant("worker done", {"n": n})


def work():
    threads = [threading.Thread(target=worker, args=(n,)) for n in (9, 11)]
    for thread in threads:
        thread.start()
    with pytrace_cffi.record_function("main region"):
        fib(12)
        sorted(range(50))
    pytrace_cffi.counter("queue", 3)
    for thread in threads:
        thread.join()


@pytest.fixture(scope="module")
def live_trace():
    # The frames running at start (pytest's) are still open at stop.
    with pytrace_cffi.trace() as t:
        work()
    return t.trace


@pytest.fixture(scope="module", params=["one", "job"])
def source(request, live_trace):
    """A trace to write as JSON: one process, or the same threads as a job's
    (a process lane for the main thread and one for the others)."""
    if request.param == "one":
        return live_trace
    return as_job(live_trace, {100: {"label": "root"}, 200: {"label": "rank 1"}})


def as_job(trace, processes):
    """trace's threads as a job's: the main thread in the first of processes (pid ->
    facts), the others in the second."""
    first, second = processes
    job = pytrace_cffi.Trace(
        names=trace.names, key_kinds=trace.key_kinds, key_args=trace.key_args,
        threads=[t._replace(pid=first if t.index == 0 else second) for t in trace.threads],
        slices=[(slices, n) for _, slices, n in trace.thread_slices()],
        start_ns=trace.start_ns, stop_ns=trace.stop_ns, pid=first,
        python_version=trace.python_version, backend=trace.backend, clock=trace.clock,
        params=trace.params, marks=trace.marks, realtime_anchor=trace.realtime_anchor)
    job.processes = processes
    return job


def table_read(path):
    """The trace at path with its slice table built (as every read was before)."""
    trace = read_trace(path)
    list(trace.thread_slices())
    assert trace.slices_built()
    return trace


def outputs(trace, where):
    """Every export of trace under where, as {name: bytes} (a directory's files
    joined), and the summaries."""
    where.mkdir()
    out = {"summary": summarize(trace, limit=None),
           "per_thread": summarize(trace, limit=None, per_thread=True),
           "totals": process_totals(trace),
           "counts": list(trace.thread_counts()),
           "calls": list(trace)}
    trace.export_chrome_trace(where / "t.json")
    trace.export_chrome_trace(where / "t.json.gz")
    trace.export_perfetto(where / "t.pftrace")
    write_html(trace, where / "t.html")
    trace.save(where / "saved")
    for name in ("t.json", "t.html", "t.pftrace"):
        out[name] = (where / name).read_bytes()
    out["t.json.gz"] = gzip.decompress((where / "t.json.gz").read_bytes())
    for name in sorted(os.listdir(where / "saved")):
        out["saved/" + name] = (where / "saved" / name).read_bytes()
    return out


@pytest.mark.parametrize("batch", [3, 64, summary_module.STREAM_BATCH_SLICES])
@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_streamed_read_gives_what_the_table_read_gives(source, tmp_path, monkeypatch, batch,
                                                       name):
    path = tmp_path / name
    source.export_chrome_trace(path)
    monkeypatch.setattr(summary_module, "STREAM_BATCH_SLICES", batch)
    streamed = read_trace(path)
    assert streamed._streams is not None
    assert len(streamed.threads) == 3 and streamed.marks
    assert streamed.processes == source.processes
    got = outputs(streamed, tmp_path / "streamed")
    assert not streamed.slices_built()
    expected = outputs(table_read(path), tmp_path / "table")
    assert got.keys() == expected.keys()
    for key in got:
        assert got[key] == expected[key], key
    # And both are the trace written.
    assert got["calls"] == list(source)
    assert got["summary"] == summarize(source, limit=None)
    # Batches: bounded, in order, numbered over the thread, parents thread-global.
    for index, (n, _, depth) in enumerate(streamed._streams.stats):
        seen = 0
        for slices, count, first in streamed._streams.slices(index):
            assert first == seen and 0 < count <= batch
            assert all(-1 <= slices[i].parent < first + i for i in range(count))
            seen += count
        assert seen == n


def test_a_big_batch_of_threads_asked_for_out_of_order(live_trace, tmp_path, monkeypatch):
    # Consumers ask in order; out of order (or again) still reads right, the .gz
    # decompressed again from its start.
    monkeypatch.setattr(summary_module, "STREAM_BATCH_SLICES", 5)
    path = tmp_path / "t.json.gz"
    live_trace.export_chrome_trace(path)
    trace = read_trace(path)
    expected = [list(slice_tuples(trace, index)) for index in range(len(trace.threads))]
    for index in (2, 0, 0, 1, 2, 1):
        assert list(slice_tuples(trace, index)) == expected[index]
    table = list(table_read(path).thread_slices())
    for index, (_, slices, n) in enumerate(table):
        assert expected[index] == [tuple_of(slices[i]) for i in range(n)]


def tuple_of(s):
    return s.start, s.end, s.key, s.flags, s.parent, s.depth


def slice_tuples(trace, index):
    for slices, count, _ in trace._streams.slices(index):
        for i in range(count):
            yield tuple_of(slices[i])


def test_a_job_json_reads_after_its_file_is_gone(live_trace, tmp_path):
    path = tmp_path / "t.json"
    live_trace.export_chrome_trace(path)
    trace = read_trace(path)
    path.unlink()
    assert summarize(trace, limit=None) == summarize(live_trace, limit=None)
    # Replaced by another file under its name: the trace still reads its own.
    path.write_text("{}")
    assert list(trace) == list(live_trace)


def rewrite_in_place(path, change, keep_time):
    """change(bytes) -> bytes written into path's own file (same inode); with
    keep_time, its mtime set back."""
    before = os.stat(path)
    data = change(path.read_bytes())
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate()
    if keep_time:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def same_size_other_call(data):
    """A leaf call a nanosecond shorter (the last digit of its dur changed in
    place): the file still reads, nesting and all, but with another call."""
    parents = set(re.findall(rb'"Python parent id":(\d+)', data))
    lines = data.split(b"\n")
    for number in reversed(range(len(lines))):
        call = re.search(rb'"dur":\d+\.\d\d([1-9]),.*"Python id":(\d+),', lines[number])
        if call and call[2] not in parents:
            at = call.start(1)
            lines[number] = (lines[number][:at] + b"%d" % (int(call[1]) - 1)
                             + lines[number][at + 1:])
            return b"\n".join(lines)
    raise AssertionError("no leaf call to change")


@pytest.mark.parametrize("keep_time", [False, True])
@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_a_file_changed_between_read_and_export_is_a_format_error(live_trace, tmp_path,
                                                                  name, keep_time):
    path = tmp_path / name
    live_trace.export_chrome_trace(path)
    trace = read_trace(path)
    if name.endswith(".gz"):
        change = (lambda data: gzip.compress(same_size_other_call(gzip.decompress(data)),
                                             mtime=0))
    else:
        change = same_size_other_call
    rewrite_in_place(path, change, keep_time)
    if keep_time and name.endswith(".json"):
        assert os.path.getsize(path) == len(path.read_bytes())
    # Same size and time: what the calls add up to tells.
    message = "has other calls" if keep_time and name == "t.json" else "changed since it was"
    for export in (lambda: summarize(trace),
                   lambda: trace.export_chrome_trace(tmp_path / "out.json"),
                   lambda: write_html(trace, tmp_path / "out.html")):
        with pytest.raises(TraceFormatError, match=message):
            export()
    assert not os.path.exists(tmp_path / "out.json")


def test_a_file_cut_short_between_read_and_export(live_trace, tmp_path):
    path = tmp_path / "t.json"
    live_trace.export_chrome_trace(path)
    trace = read_trace(path)
    data = path.read_bytes()
    rewrite_in_place(path, lambda data: data[:len(data) // 2], keep_time=False)
    with pytest.raises(TraceFormatError, match="changed since it was read"):
        list(trace)
    # Put back as it was (its time too): reads again.
    stat = os.stat(path)
    rewrite_in_place(path, lambda _: data, keep_time=False)
    os.utime(path, ns=(stat.st_atime_ns, trace._streams._source.identity[1]))
    assert list(trace) == list(live_trace)


def test_the_cli_summary_and_export_leave_no_table(live_trace, tmp_path, monkeypatch):
    from pytrace_cffi import __main__ as cli
    path = tmp_path / "t.json.gz"
    live_trace.export_chrome_trace(path)
    read = []
    real = reading.read_trace
    monkeypatch.setattr(reading, "read_trace",
                        lambda p: read.append(real(p)) or read[-1])
    assert cli.main(["summary", str(path)]) == 0
    for out in ("o.json", "o.json.gz", "o.html", "o.pftrace", "o_dir"):
        assert cli.main(["export", str(path), "-o", str(tmp_path / out)]) == 0
    assert len(read) == 6
    assert not any(trace.slices_built() for trace in read)
    assert list(read_trace(tmp_path / "o.json")) == list(live_trace)
    assert list(read_trace(tmp_path / "o_dir")) == list(live_trace)


BIG_SCRIPT = PROC_STATUS + r"""
import json, sys
from pytrace_cffi.render.html import write_html
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render.summary import summarize
# the code the reads and writes below use, imported before measuring (they import it
# when first used): what is measured is the data's growth, not the modules'
import pytrace_cffi.formats, pytrace_cffi.readers.chrome, pytrace_cffi.readers.pftrace
import pytrace_cffi.render.chrome, pytrace_cffi.render.perfetto, pytrace_cffi.model.saved
import pytrace_cffi.model.walk  # noqa: E401


before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")                    # VmHWM from here
trace = read_trace(sys.argv[1])
rows = summarize(trace, limit=None)
out = sys.argv[2]
write_html(trace, out + ".html")
trace.export_perfetto(out + ".pftrace")
trace.export_chrome_trace(out + ".json.gz")
trace.save(out + "_dir")
print(json.dumps({"calls": len(trace), "rows": [list(row) for row in rows],
                  "growth": status("VmHWM") - before, "built": trace.slices_built()}))
"""


def many_calls(n):
    for _ in range(n):
        fib(1)
        len("x")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
@pytest.mark.big
def test_a_big_json_summary_and_exports_in_memory_that_does_not_grow(tmp_path):
    # 2.5M calls, ~450 MB of JSON, summarized and exported to .html, .pftrace,
    # .json.gz and a saved directory. The slice table alone was 40 bytes a call
    # (100 MB); streamed, what grows is the reading's blocks, a batch and the page's
    # bounded content, a few MB whatever the number of calls.
    facts, expected, calls = big_read(tmp_path / "big.json", 1_250_000)
    assert facts["growth"] < 10 * calls, f"{facts['growth'] / calls:.1f} bytes a call"
    assert facts["calls"] == calls > 2_500_000
    assert facts["rows"] == expected
    assert not facts["built"]
    for written in ("out.json.gz", "out_dir"):
        assert len(read_trace(tmp_path / written)) == calls
    shutil.rmtree(tmp_path)


def big_read(path, n):
    """(what BIG_SCRIPT says, the summary rows expected, calls) of a trace of
    many_calls(n) exported to path (.json or .pftrace) and read back in a fresh
    process."""
    with pytrace_cffi.trace() as t:
        many_calls(n)
    if str(path).endswith(".pftrace"):
        t.trace.export_perfetto(path)
    else:
        t.trace.export_chrome_trace(path)
    expected = [list(row) for row in summarize(t.trace, limit=None)]
    calls = len(t.trace)
    del t
    out = os.path.join(os.path.dirname(path), "out")
    proc = subprocess.run([sys.executable, "-c", BIG_SCRIPT, str(path), out],
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), expected, calls
