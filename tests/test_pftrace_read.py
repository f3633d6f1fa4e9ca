"""Reading back our own .pftrace (pytrace_cffi.readers.pftrace): for traces of
threads, marks, regions with args, a job of several processes and torch-named
calls, the .pftrace reads back as the Chrome JSON of the same trace does (the
JSON reader is the independent check): the same calls, threads, processes,
names, args and marks, the same summary text and the same exports, streamed
without the slice table. What a .pftrace cannot carry is pinned down; a corrupt
or hostile file is a TraceFormatError."""
import gzip
import math
import os
import re
import subprocess
import sys
import threading
import time
import zlib

import pytest

import pytrace_cffi
from pytrace_cffi import TraceFormatError
from pytrace_cffi.readers import pftrace as pftrace_reader
from pytrace_cffi.render.html import write_html
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render.summary import (calls_begun, format_process_totals, format_summary,
                                         process_totals, summarize)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "torch_stand_in")


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Shaped:
    """What instant() and record_function() record as its .shape (a list of ints)."""

    def __init__(self, shape):
        self.shape = shape


def worker(n):
    with pytrace_cffi.record_function("worker region", {"n": n, "lr": 0.5, "tag": "a"}):
        fib(n)
    pytrace_cffi.instant("worker done", {"n": n, "ok": True, "what": "x", "shape": Shaped((2, 3))})


def work():
    threads = [threading.Thread(target=worker, args=(n,), name=f"worker-{n}") for n in (7, 9)]
    for thread in threads:
        thread.start()
    with pytrace_cffi.record_function("main region"):
        with pytrace_cffi.record_function("inner", {"batch": 7}):
            fib(10)
        sorted(range(50))
    pytrace_cffi.counter("queue", 3)
    pytrace_cffi.counter("memory", {"rss": 1 << 40, "heap": 1.5})
    pytrace_cffi.counter("loss", 0.25)
    pytrace_cffi.instant("plain")
    for thread in threads:
        thread.join()


@pytest.fixture(scope="module")
def live_trace():
    # pytest's frames, running at start, are still open at stop
    with pytrace_cffi.trace() as t:
        work()
    return t.trace


@pytest.fixture(scope="module", params=["one", "job"])
def source(request, live_trace):
    """A trace of one process, or the same threads as a job's (two lanes)."""
    if request.param == "one":
        return live_trace
    from test_json_stream import as_job
    return as_job(live_trace, {100: {"label": "root", "host": "h", "argv": ["a.py", "-x"]},
                               200: {"label": "rank 1", "os_pid": 100, "host": "h"}})


def outputs(trace, where):
    """What a reader of trace can make of it: the calls, summaries, and every export's
    bytes (the same output names in each directory: the page's title is its name)."""
    where.mkdir()
    out = {"calls": list(trace), "names": trace.names, "kinds": trace.key_kinds,
           "key_args": trace.key_args, "threads": trace.threads, "marks": trace.marks,
           "processes": trace.processes, "pid": trace.pid, "counts": list(trace.thread_counts()),
           "facts": [getattr(trace, name) for name in (
               "start_ns", "stop_ns", "python_version", "backend", "clock", "dropped_events",
               "realtime_anchor", "params")],
           "totals": process_totals(trace), "totals text": format_process_totals(trace)}
    for sort in ("total", "self", "calls", "name"):
        for per in ({}, {"per_thread": True}, {"per_process": True}):
            out[f"summary {sort} {per}"] = format_summary(summarize(trace, sort=sort,
                                                                    limit=None, **per))
    trace.export_chrome_trace(where / "t.json")
    trace.export_perfetto(where / "t.pftrace")
    write_html(trace, where / "t.html")
    trace.save(where / "saved")
    for name in ("t.json", "t.html", "t.pftrace"):
        out[name] = (where / name).read_bytes()
    for name in sorted(os.listdir(where / "saved")):
        out["saved/" + name] = (where / "saved" / name).read_bytes()
    return out


def without_open_flags(counts):
    """thread_counts without the calls open at stop, which the JSON does not mark."""
    return [(thread, n, 0, depth) for thread, n, _, depth in counts]


@pytest.mark.parametrize("batch", [3, pftrace_reader.STREAM_BATCH_SLICES])
@pytest.mark.parametrize("compress", [True, False])
def test_a_pftrace_reads_back_as_the_json_of_the_same_trace(source, tmp_path, monkeypatch,
                                                           compress, batch):
    monkeypatch.setattr(pftrace_reader, "STREAM_BATCH_SLICES", batch)
    source.export_perfetto(tmp_path / "t.pftrace", compress=compress)
    source.export_chrome_trace(tmp_path / "t.json")
    ours, theirs = read_trace(tmp_path / "t.pftrace"), read_trace(tmp_path / "t.json")
    got = outputs(ours, tmp_path / "from_pftrace")
    expected = outputs(theirs, tmp_path / "from_json")
    assert not ours.slices_built()
    got["counts"] = without_open_flags(got["counts"])
    assert got.keys() == expected.keys()
    for key in got:
        # the open-at-stop flags, which the JSON lost, are in these
        if key not in ("t.pftrace", "saved/slices.bin"):
            assert got[key] == expected[key], key
    assert list(pytrace_cffi.load(tmp_path / "from_pftrace" / "saved")) == got["calls"]
    # and both are the trace written
    assert got["calls"] == list(source)
    assert got["marks"] == source.marks
    assert ours.processes == source.processes
    assert [s for s in summarize(ours, limit=None)] == summarize(source, limit=None)
    # frames running at start (pytest's) read back as such: shown, counted as no call
    assert calls_begun(ours) == calls_begun(theirs) == calls_begun(source) < len(source)
    # the .pftrace keeps which calls were open at stop, the JSON does not
    assert [c[2] for c in ours.thread_counts()] == [c[2] for c in source.thread_counts()]
    assert any(c[2] for c in ours.thread_counts())
    # batches: bounded, in order, numbered over the thread, parents thread-global
    for index, (n, _, _) in enumerate(ours._streams.stats):
        seen = 0
        for slices, count, first in ours._streams.slices(index):
            assert first == seen and 0 < count <= batch
            assert all(-1 <= slices[i].parent < first + i for i in range(count))
            seen += count
        assert seen == n


def test_process_totals_and_calls_begun_of_a_pftrace_read_no_call_again(source, tmp_path):
    # the first read counted what they need (#34 item 5): a summary or page of a
    # big .pftrace then reads its calls once, not once more for each of them
    source.export_perfetto(tmp_path / "t.pftrace")
    ours = read_trace(tmp_path / "t.pftrace")

    def no_second_read(index):
        raise AssertionError(f"thread {index}'s calls read again")

    ours._streams.slices = no_second_read
    assert process_totals(ours) == process_totals(source)
    assert format_process_totals(ours) == format_process_totals(source)
    assert calls_begun(ours) == calls_begun(source) < len(source)


@pytest.mark.parametrize("budget", [None, 0, 400])
def test_a_walk_reads_each_threads_packets_once_when_the_first_read_kept_durations(
        live_trace, tmp_path, monkeypatch, budget):
    # the first read keeps each call's duration (up to KEEP_DURATIONS_CALLS calls in
    # all): a walk is then one pass over a thread's packets, not a durations pass
    # and a slices pass (#34 item 5); past the budget, a thread gets both, as before
    if budget is not None:
        monkeypatch.setattr(pftrace_reader, "KEEP_DURATIONS_CALLS", budget)
    live_trace.export_perfetto(tmp_path / "t.pftrace")
    ours = read_trace(tmp_path / "t.pftrace")
    counts = [n for n, _, _ in ours._streams.stats]
    kept = [c is not None for c in ours._streams._kept]
    if budget is None:
        assert all(kept)
    elif budget == 0:
        assert not any(kept)
    else:                                   # the first threads' fit, then none
        assert kept[0] and not all(kept), (counts, kept)
    passes = []
    real_packets = pftrace_reader.packets

    def counted(raw, location, reader, *resumes):
        passes.append(reader.index)
        return real_packets(raw, location, reader, *resumes)

    monkeypatch.setattr(pftrace_reader, "packets", counted)
    for _ in range(2):                      # and again: the durations are kept
        passes.clear()
        assert list(ours) == list(live_trace)
        walked = [i for i, n in enumerate(counts) if n]
        assert sorted(passes) == sorted(walked + [i for i in walked if not kept[i]])
    assert summarize(ours, limit=None) == summarize(live_trace, limit=None)


def test_what_the_protobuf_decoder_reads_is_what_we_read(live_trace, tmp_path):
    """An independent decoder (the perfetto package's protos) sees the calls we read."""
    try:
        from test_perfetto import decode
    except pytest.skip.Exception:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("the perfetto and protobuf packages are not installed")
    path = tmp_path / "t.pftrace"
    live_trace.export_perfetto(path)
    decoded = decode(path)
    threads = decoded["threads"]
    theirs = sorted((threads[s["track"]][1], s["name"], s["start"], s["end"], s["depth"])
                    for s in decoded["slices"])
    trace = read_trace(path)
    depth = {}
    ours = []
    for call in trace:
        depth[call.id] = 0 if call.parent is None else depth[call.parent] + 1
        ours.append((call.thread, call.name, call.start_ns, call.end_ns, depth[call.id]))
    assert sorted(ours) == theirs


def test_what_a_pftrace_cannot_carry(tmp_path):
    """Documented in pftrace_reader and docs/FORMAT.md: a counter's thread, a lone
    series' split from its counter's name, numbers int64/double cannot hold, empty
    containers, lone surrogates."""
    samples = {}

    def other_thread():
        pytrace_cffi.counter("on a thread", 5)
        fib(3)

    with pytrace_cffi.trace() as t:
        fib(4)
        pytrace_cffi.counter("one", {"series": 3})
        pytrace_cffi.counter("two series", {"a": 1, "b": 2.5})
        pytrace_cffi.instant("numbers", {"big": 2 ** 70, "inf": math.inf,
                                         "empty": Shaped(()), "odd": "caf\udce9"})
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        samples["main"] = threading.get_native_id()
    t.trace.export_perfetto(tmp_path / "t.pftrace")
    t.trace.export_chrome_trace(tmp_path / "t.json")
    ours = {m.name: m for m in read_trace(tmp_path / "t.pftrace").marks}
    theirs = {m.name: m for m in read_trace(tmp_path / "t.json").marks}
    assert theirs["one"].args == {"series": 3}
    assert ours["one series"].args == {"one series": 3}
    assert ours["two series"] == theirs["two series"]
    # JSON writes non-finite numbers as strings and undecodable text as U+FFFD
    assert theirs["numbers"].args == {"big": 2 ** 70, "inf": "Infinity", "empty": [],
                                      "odd": "caf\ufffd"}
    assert ours["numbers"].args == {"big": str(2 ** 70), "inf": "inf", "empty": {},
                                    "odd": "caf\ufffd"}
    assert ours["numbers"].thread == theirs["numbers"].thread == samples["main"]
    # a counter sample is on its process's first thread
    assert theirs["on a thread"].thread != samples["main"]
    assert ours["on a thread"].thread == samples["main"]
    assert list(read_trace(tmp_path / "t.pftrace")) == list(t.trace)


JOB = r"""
import multiprocessing, sys, threading
import pytrace_cffi


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def child(n):
    pytrace_cffi.instant("child says", {"n": n})
    with pytrace_cffi.record_function("child region", {"n": n}):
        fib(n)


if __name__ == "__main__":
    forked = multiprocessing.get_context("fork").Process(target=child, args=(9,))
    forked.start()
    helper = threading.Thread(target=fib, args=(8,), name="helper")
    helper.start()
    helper.join()
    pytrace_cffi.counter("mem", {"rss": 5, "heap": 7})
    fib(10)
    forked.join()
    sys.exit(forked.exitcode)
"""


def cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_summary_and_export_of_a_jobs_pftrace_from_the_command_line(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    cli("run", "--processes-dir", tmp_path / "procs", "-o", tmp_path / "job.pftrace",
        tmp_path / "job.py", cwd=tmp_path)
    cli("export", tmp_path / "procs", "-o", tmp_path / "job.json", cwd=tmp_path)
    for options in ([], ["--per-thread"], ["--per-process"], ["--sort", "self", "--limit", "0"]):
        ours = cli("summary", *options, tmp_path / "job.pftrace", cwd=tmp_path)
        theirs = cli("summary", *options, tmp_path / "job.json", cwd=tmp_path)
        assert "in 2 processes" in ours
        assert ours == theirs.replace(str(tmp_path / "job.json"), str(tmp_path / "job.pftrace"))
    for out in ("a", "b"):
        (tmp_path / out).mkdir()
    cli("export", tmp_path / "job.pftrace", "-o", tmp_path / "a" / "job.html", cwd=tmp_path)
    cli("export", tmp_path / "job.json", "-o", tmp_path / "b" / "job.html", cwd=tmp_path)
    assert (tmp_path / "a" / "job.html").read_bytes() == (tmp_path / "b" / "job.html").read_bytes()
    cli("export", tmp_path / "job.pftrace", "-o", tmp_path / "a" / "job.json", cwd=tmp_path)
    assert (tmp_path / "a" / "job.json").read_bytes() == (tmp_path / "job.json").read_bytes()
    ours, theirs = read_trace(tmp_path / "job.pftrace"), read_trace(tmp_path / "job.json")
    assert len(ours.processes) == 2 and ours.processes == theirs.processes
    assert list(ours) == list(theirs)
    assert {m.name for m in ours.marks} == {"child says", "mem"}
    assert ours.marks == theirs.marks
    assert {c.name for c in ours if c.kind == "annotation"} == {"child region"}


TORCH_RUN = r"""
import importlib.util, sys
# the stand-in only where there is no torch: after site-packages, it gives workload.py
stand_in = sys.argv[2]
if importlib.util.find_spec("torch") is None:
    sys.path.insert(0, stand_in)
else:
    sys.path.append(stand_in)
import pytrace_cffi
import torch, workload
model, optimizers, x = workload.make()
workload.train(model, optimizers, x)
with pytrace_cffi.trace(record_params=True) as t:
    workload.train(model, optimizers, x)
t.trace.export_chrome_trace(sys.argv[1] + ".json")
t.trace.export_perfetto(sys.argv[1] + ".pftrace")
"""


def test_a_torch_named_trace_reads_back_with_its_module_ids(tmp_path):
    """Real torch where it is installed (3.11), the stand-in elsewhere."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", TORCH_RUN, str(tmp_path / "t"), STAND_IN],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours, theirs = read_trace(tmp_path / "t.pftrace"), read_trace(tmp_path / "t.json")
    modules = [c for c in ours if c.name.startswith("nn.Module: ")]
    assert modules and any(c.name.startswith("Optimizer.step#") for c in ours)
    assert list(ours) == list(theirs)
    assert ours.key_args == theirs.key_args
    assert {args["Python module id"] for args in ours.key_args.values()
            if "Python module id" in args}
    assert format_summary(summarize(ours, limit=None)) == \
        format_summary(summarize(theirs, limit=None))


# --- a file that changed, or is not ours ---------------------------------------------

def test_a_file_changed_between_read_and_export_is_a_format_error(live_trace, tmp_path):
    path = tmp_path / "t.pftrace"
    live_trace.export_perfetto(path, compress=False)
    trace = read_trace(path)
    data = bytearray(path.read_bytes())
    # a slice end's one-byte delta, one ns longer: same size, other calls
    end = list(re.finditer(rb"\x40[\x00-\x7e]\x5a\x02\x48\x02", data))[-1].start()
    data[end + 1] += 1
    stat = os.stat(path)
    with open(path, "r+b") as f:
        f.write(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    for export in (lambda: summarize(trace), lambda: list(trace),
                   lambda: trace.export_chrome_trace(tmp_path / "out.json")):
        with pytest.raises(TraceFormatError, match="changed since it was read"):
            export()
    assert not os.path.exists(tmp_path / "out.json")


def test_a_pftrace_that_is_not_ours_is_refused(live_trace, tmp_path):
    path = tmp_path / "x.pftrace"
    for data, message in (
            (b"", "its facts are missing"),
            (b"hello, world\n" * 10, "not a Perfetto trace"),
            (b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x7f" + b"\x50\x01" * 20, "more than"),
            (b"\x0a\xff\xff\xff\xff\x0f\x92\x03\x80", "ends inside"),
            (b"\x0a\x80", "ends inside a packet"),
            (b"\x0a\x02\x50\x01", "facts are missing"),
            (b"\x0a\x04\x50\x05\x58\x07", "no thread's as pytrace_cffi writes")):
        path.write_bytes(data)
        with pytest.raises(TraceFormatError, match=message):
            read_trace(path)
    with pytest.raises(TraceFormatError, match="does not exist"):
        read_trace(tmp_path / "missing.pftrace")


def packet(*fields):
    from pytrace_cffi.render.protobuf import bytes_field
    return bytes_field(1, b"".join(fields))


def test_a_compressed_bomb_is_refused_in_bounded_memory(tmp_path):
    import tracemalloc
    from pytrace_cffi.render.protobuf import bytes_field as _bytes
    bomb = zlib.compress(bytes(256 << 20), 9)            # 256 MiB of zeros in ~250 KB
    path = tmp_path / "bomb.pftrace"
    path.write_bytes(packet(_bytes(50, bomb)))
    tracemalloc.start()
    try:
        with pytest.raises(TraceFormatError, match="where a packet should begin"):
            read_trace(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    # compressed inside compressed, and a stream cut short
    inner = packet(_bytes(50, zlib.compress(b"")))
    path.write_bytes(packet(_bytes(50, zlib.compress(inner))))
    with pytest.raises(TraceFormatError, match="compressed packets inside compressed"):
        read_trace(path)
    path.write_bytes(packet(_bytes(50, zlib.compress(bytes(100))[:-6])))
    with pytest.raises(TraceFormatError, match="cut short|where a packet should begin"):
        read_trace(path)


def test_a_compressed_packet_of_many_tiny_packets_is_refused_at_once(tmp_path):
    """#33 item 5: 16 MiB of packets naming their sequence only, in 16 KB (a ratio of 1000) were all parsed
    (minutes for a 1 MB file); the inflated size is capped by its compressed size."""
    from pytrace_cffi.render.protobuf import bytes_field as _bytes
    bomb = zlib.compress(b"\x0a\x02\x50\x01" * (4 << 20), 9)     # sequence id 1 each
    assert len(bomb) < 64 << 10
    path = tmp_path / "bomb.pftrace"
    path.write_bytes(packet(_bytes(50, bomb)))
    started = time.monotonic()
    with pytest.raises(TraceFormatError, match="inflates to more than .* decompression bomb"):
        read_trace(path)
    assert time.monotonic() - started < 5


def test_begins_without_ends_nest_a_million_deep_at_most(tmp_path):
    """A hostile file's begins never ended cost a bounded stack, then an error."""
    with pytrace_cffi.trace() as t:
        fib(2)
    path = tmp_path / "deep.pftrace"
    t.trace.export_perfetto(path, compress=False)
    data = path.read_bytes()
    # a begin packet of a key already interned (no interned data), its delta 0
    begin = re.search(rb"\x0a(.)\x40.\x5a(.)\x48\x01", data, re.S)
    while b"\x62" in data[begin.start() + 2:begin.start() + 2 + data[begin.start() + 1]]:
        begin = re.compile(rb"\x0a(.)\x40.\x5a(.)\x48\x01", re.S).search(data, begin.end())
    packet = bytearray(data[begin.start():begin.start() + 2 + data[begin.start() + 1]])
    packet[3] = 0
    path.write_bytes(data + bytes(packet) * ((1 << 20) + 1))
    with pytest.raises(TraceFormatError, match="nest over a million deep"):
        read_trace(path)
    path.write_bytes(data + bytes(packet) * 3)
    with pytest.raises(TraceFormatError, match="3 slices begin and never end"):
        read_trace(path)


def test_a_file_cut_anywhere_reads_or_is_a_format_error(live_trace, tmp_path):
    for compress in (True, False):
        path = tmp_path / "t.pftrace"
        live_trace.export_perfetto(path, compress=compress)
        data = path.read_bytes()
        step = max(1, len(data) // 150)
        for cut in list(range(0, len(data), step)) + [len(data) - 1]:
            path.write_bytes(data[:cut])
            try:
                trace = read_trace(path)
                list(trace)
            except TraceFormatError:
                continue
            # a cut between packets where no call is open (between two threads'
            # sequences, or before a thread's first call) leaves a shorter valid file:
            # a .pftrace has no end mark. What it reads is a beginning of the trace.
            kept = len(trace.threads)
            assert [(t.native_id, t.name) for t in trace.threads] == \
                [(t.native_id, t.name) for t in live_trace.threads][:kept]
            counts = [n for _, n, _, _ in trace.thread_counts()]
            full = [n for _, n, _, _ in live_trace.thread_counts()][:kept]
            assert counts[:-1] == full[:-1] and counts[-1:] in ([], [0], full[-1:])


def test_fuzzed_files_read_or_are_format_errors(live_trace, tmp_path):
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    files = {}
    for compress in (True, False):
        path = tmp_path / f"c{int(compress)}.pftrace"
        live_trace.export_perfetto(path, compress=compress)
        files[compress] = path.read_bytes()
    target = tmp_path / "fuzzed.pftrace"

    @settings(max_examples=300, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(st.booleans(), st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(0, 255),
                                             st.sampled_from(["set", "insert", "delete"])),
                                   min_size=1, max_size=4))
    def fuzz(compress, edits):
        data = bytearray(files[compress])
        for where, value, how in edits:
            at = where % max(1, len(data))
            if how == "set" and data:
                data[at] = value
            elif how == "insert":
                data.insert(at, value)
            elif data:
                del data[at]
        target.write_bytes(bytes(data))
        try:
            trace = read_trace(target)
            summarize(trace)
            list(trace)
        except TraceFormatError:
            pass

    assert hypothesis
    fuzz()


# --- memory --------------------------------------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
@pytest.mark.big
def test_a_big_pftrace_summary_and_exports_in_memory_that_does_not_grow(tmp_path):
    # 1.6M calls read back, summarized and exported to .html, .pftrace, .json.gz and
    # a saved directory (test_json_stream's script): the slice table alone would be
    # 40 bytes a call; streamed, what grows is the durations of one thread (4 bytes a
    # call), a batch, blocks and the page.
    from test_json_stream import big_read
    facts, expected, calls = big_read(tmp_path / "big.pftrace", 800_000)
    assert facts["calls"] == calls > 1_600_000
    assert facts["rows"] == expected
    assert not facts["built"]
    # 4 bytes a call of durations, and ~9-12 MB of batches, blocks and writers' buffers
    # (the .pftrace writer's deflaters, one per pool thread, each in its thread's malloc
    # arena: 14-15 MB in all here, 18 MB once on 3.13 under load); the slice table would
    # add 40 bytes a call (64 MB)
    assert facts["growth"] < 6 * calls + (12 << 20), \
        f"{facts['growth'] / calls:.1f} bytes a call"
    with gzip.open(tmp_path / "out.json.gz", "rt") as f:
        assert sum(1 for line in f if re.match(r'\{"ph":"X"', line)) == calls
