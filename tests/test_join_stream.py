"""A job's processes joined into one Trace that streams from their own traces
(processes.joined_trace: no temporary JSON, no slice table). The oracle is what
the joined Chrome JSON reads back as (readers.chrome.read_chrome_trace, the path
joined_trace used to take): the same calls per thread (ids, names, times,
depths, parents, pids), threads, processes in lane order, marks and summaries,
for a real job (a parent with a second thread, a fork Pool(2), a `python -c`
subprocess) in every output (.html, .pftrace, saved directory) and with another
host's clock shifted. Two nodes whose processes have the same pids and tids
(containers) join into distinct lanes. A job of ~3M calls joins to .pftrace and
.html in a few bytes a call of memory."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import pytrace_cffi
from helpers import PROC_STATUS, perfetto_protos
from pytrace_cffi import processes
from pytrace_cffi._core import ffi, lib
from pytrace_cffi.errors import TraceFormatError
from pytrace_cffi.readers import chrome as chrome_reader
from pytrace_cffi.render import summary as summary_module
from pytrace_cffi.render.html import write_html
from pytrace_cffi.readers.chrome import read_chrome_trace as _read_chrome_trace
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render.summary import format_process_totals, format_summary, summarize

TIMEOUT = 180
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))

PROGRAM = r"""
import json, os, subprocess, sys, threading, multiprocessing as mp
import pytrace_cffi

def unique_task(i):
    sorted(range(i % 7))
    return os.getpid()

def unique_thread():
    pytrace_cffi.instant("in a thread", {"n": 3})

if __name__ == "__main__":
    pytrace_cffi.start(follow_children=True, output=sys.argv[1])
    worker = threading.Thread(target=unique_thread)
    worker.start()
    worker.join()
    pytrace_cffi.counter("load", 2)
    with mp.get_context("fork").Pool(2) as pool:
        pids = pool.map(unique_task, range(60), chunksize=3)
    helper = subprocess.run(
        [sys.executable, "-c",
         "import os\ndef unique_helper(): pass\nfor _ in range(9): unique_helper()\n"
         "print(os.getpid())"], check=True, capture_output=True, text=True, timeout=60)
    pytrace_cffi.stop()
    print(json.dumps({"root": os.getpid(), "helper": int(helper.stdout)}))
"""


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop(processes.ENV, None)
    return env


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(job directory, the pid of its `python -c` helper)."""
    where = tmp_path_factory.mktemp("job")
    (where / "prog.py").write_text(PROGRAM)
    proc = subprocess.run([sys.executable, str(where / "prog.py"), str(where / "job")],
                          cwd=where, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.splitlines()[-1])
    results = processes.status(where / "job")
    # Every process complete, a pool worker that ran no task too (terminated by the
    # pool as it starts: SIGTERM waits for its after-fork hook, it saves its trace).
    assert len(results) == 4 and all(r.state == "complete" for r in results), results
    return where / "job", facts["helper"]


def json_read_back(job_dir, where, results=False):
    """The oracle: the job joined to Chrome JSON and read back (and join's results)."""
    path = os.path.join(str(where), "oracle.json")
    found = processes.join(job_dir, path)
    return (_read_chrome_trace(path), found) if results else _read_chrome_trace(path)


def calls_of(trace):
    """Per thread (in order): its calls as (id, name, start, end, depth, parent id, pid,
    thread id)."""
    out = []
    depth_of = {}
    for thread, batches in zip(trace.threads, _per_thread(trace)):
        pid = trace.thread_pid(thread)
        out.append([(c.id, c.name, c.start_ns, c.end_ns, depth_of.setdefault(
            c.id, 0 if c.parent is None else depth_of[c.parent] + 1), c.parent, pid,
            c.thread) for c in batches])
    return out


def _per_thread(trace):
    calls = list(trace)
    counts = [n for _, n, _, _ in trace.thread_counts()]
    at = 0
    for n in counts:
        yield calls[at:at + n]
        at += n


def facts_of(trace):
    return dict(threads=[(t.index, t.native_id, t.name, trace.thread_pid(t))
                         for t in trace.threads],
                processes=[(pid, list(info.items())) for pid, info in trace.processes.items()],
                marks=trace.marks, start=trace.start_ns, stop=trace.stop_ns, pid=trace.pid,
                python=trace.python_version, backend=trace.backend, clock=trace.clock,
                dropped=trace.dropped_events, anchor=trace.realtime_anchor,
                params=trace.params)


def summaries(trace):
    return [format_summary(summarize(trace, sort=sort, limit=None, **options))
            for sort in ("total", "self", "calls")
            for options in ({}, {"per_thread": True}, {"per_process": True})] + \
        [format_process_totals(trace)]


def test_joined_trace_is_what_the_joined_json_reads_back_as(job, tmp_path):
    job_dir, _ = job
    oracle, oracle_results = json_read_back(job_dir, tmp_path, results=True)
    trace, results = processes.joined_trace(job_dir)
    assert results == oracle_results
    assert facts_of(trace) == facts_of(oracle)
    assert calls_of(trace) == calls_of(oracle)
    # ... in several processes, with marks of more than one thread
    assert len(trace.processes) >= 3 and len(trace.marks) >= 2
    assert not trace.slices_built()
    assert summaries(trace) == summaries(oracle)
    assert not trace.slices_built()          # the summaries streamed
    # The table built on demand holds the same calls.
    tables = list(trace.thread_slices())
    assert trace.slices_built() and len(tables) == len(trace.threads)
    assert calls_of(trace) == calls_of(oracle)


def test_read_trace_of_a_job_directory_streams(job):
    trace = read_trace(job[0])
    assert trace.processes and not trace.slices_built()
    summarize(trace, per_process=True)
    list(summary_module.process_totals(trace))
    assert not trace.slices_built()


def _no_temporary_json(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("joining wrote a temporary JSON")
    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    monkeypatch.setattr(chrome_reader, "read_chrome_trace", refused)


def test_outputs_hold_the_json_read_back_calls(job, tmp_path, monkeypatch):
    """.html, .pftrace and a saved directory, joined without a temporary JSON and
    without a slice table, hold what the JSON read back holds."""
    job_dir, _ = job
    oracle = json_read_back(job_dir, tmp_path)
    expected = calls_of(oracle)
    trace = processes.joined_trace(job_dir)[0]
    _no_temporary_json(monkeypatch)
    for name in ("job.html", "saved", "job.pftrace"):
        processes.join(job_dir, tmp_path / name)
        processes.write_any(trace, str(tmp_path / ("again-" + name)))
        assert not trace.slices_built(), name
    # The saved directory: loads back as the same trace, and saves again the same.
    saved = pytrace_cffi.load(tmp_path / "saved")
    assert calls_of(saved) == expected
    assert facts_of(saved) == facts_of(oracle)
    for part in ("meta.json", "hashes.json", "params.json", "slices.bin"):
        assert (tmp_path / "saved" / part).read_bytes() == \
            (tmp_path / "again-saved" / part).read_bytes(), part
    assert summaries(saved) == summaries(oracle)
    # The page: the same threads, processes and summaries as the oracle's page.
    monkeypatch.undo()
    write_html(oracle, tmp_path / "oracle.html")
    pages = [_page_meta(tmp_path / name) for name in ("oracle.html", "job.html",
                                                      "again-job.html")]
    for meta in pages[1:]:
        for field in ("threads", "processes", "summary", "calls", "start_ns", "stop_ns",
                      "pid", "reduced", "dropped_events"):
            assert meta[field] == pages[0][field], field
    # The .pftrace, decoded where the perfetto protos are installed.
    test_perfetto = pytest.importorskip("test_perfetto")
    perfetto_protos()
    for name in ("job.pftrace", "again-job.pftrace"):
        decoded = test_perfetto.decode(str(tmp_path / name))
        pid_of_track = {uuid: pid for uuid, (pid, _, _) in decoded["threads"].items()}
        found = sorted((pid_of_track[s["track"]], s["name"], s["start"], s["end"], s["depth"])
                       for s in decoded["slices"])
        assert found == sorted((pid, name, start, end, depth)
                               for thread in expected
                               for _, name, start, end, depth, _, pid, _ in thread)
        assert {pid for pid, _ in decoded["processes"].values()} == set(oracle.processes)


def _page_meta(path):
    import re
    text = open(path, encoding="utf-8").read()
    match = re.search('<script type="application/json" id="pt-meta">(.*?)</script>', text,
                      re.S)
    return json.loads(match.group(1))


def test_summary_and_export_of_a_job_write_no_temporary_json(job, tmp_path, monkeypatch):
    job_dir, _ = job
    expected = summaries(json_read_back(job_dir, tmp_path))
    _no_temporary_json(monkeypatch)
    trace = read_trace(job_dir)
    assert summaries(trace) == expected
    assert not trace.slices_built()


def test_another_hosts_clock_is_shifted_as_in_the_json(job, tmp_path):
    """A process of another host, its CLOCK_REALTIME 5 s ahead: its calls and marks
    move by the anchors' offset, in the joined trace as in the joined JSON."""
    job_dir, helper = job
    moved = tmp_path / "job"
    shutil.copytree(job_dir, moved)
    meta_path = moved / f"proc-{helper}" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["host"] = "elsewhere"
    for point in meta["realtime_anchor"].values():
        point["realtime_ns"] += 5_000_000_000
    meta_path.write_text(json.dumps(meta))
    with pytest.warns(pytrace_cffi.TraceWarning, match="2 hosts"):
        oracle = json_read_back(moved, tmp_path)
    with pytest.warns(pytrace_cffi.TraceWarning, match="2 hosts"):
        trace = processes.joined_trace(moved)[0]
    assert calls_of(trace) == calls_of(oracle)
    assert facts_of(trace) == facts_of(oracle)
    own = pytrace_cffi.load(job_dir / f"proc-{helper}")
    shift = processes._realtime_offset(pytrace_cffi.load(meta_path.parent)) - \
        processes._realtime_offset(processes.read_process(
            str(job_dir / f"proc-{trace.pid}"))[0])
    assert abs(shift - 5_000_000_000) < 10_000_000
    helper_starts = sorted(c.start_ns for c in trace if c.name.endswith(": unique_helper"))
    assert helper_starts == sorted(c.start_ns + shift for c in own
                                   if c.name.endswith(": unique_helper"))
    assert len(helper_starts) == 9


def test_keys_of_several_processes_share_one_table(job):
    """One key per (name, kind, args) across processes: a function every process
    ran (the pool's worker loop, builtins) has one key, so summaries add them up."""
    trace = processes.joined_trace(job[0])[0]
    identities = [(name, kind, json.dumps(trace.key_args.get(key), sort_keys=True))
                  for key, (name, kind) in enumerate(zip(trace.names, trace.key_kinds))]
    assert len(identities) == len(set(identities))
    by_name = {row.name: row for row in summarize(trace, limit=None)}
    tasks = [name for name in by_name if name.endswith(": unique_task")]
    assert len(tasks) == 1 and by_name[tasks[0]].calls == 60


# --- pt_remap_slices -------------------------------------------------------------------

def _slices(*rows):
    out = ffi.new("pt_slice[]", len(rows))
    for s, (start, end, key, parent, depth) in zip(out, rows):
        s.start, s.end, s.key, s.parent, s.depth = start, end, key, parent, depth
        s.flags, s.tag = lib.PT_SLICE_OPEN_AT_STOP, 7
    return out


def test_remap_slices_maps_keys_shifts_times_and_clears_tags():
    src = _slices((10, 50, 2, -1, 0), (20, 30, 1, 0, 1))
    out = ffi.new("pt_slice[]", 2)
    key_map = ffi.new("uint32_t[]", [0, 9, 4])
    assert lib.pt_remap_slices(src, 2, key_map, 3, -5, out) == lib.PT_OK
    assert [(s.start, s.end, s.key, s.parent, s.depth, s.flags, s.tag) for s in out] == [
        (5, 45, 4, -1, 0, lib.PT_SLICE_OPEN_AT_STOP, 0),
        (15, 25, 9, 0, 1, lib.PT_SLICE_OPEN_AT_STOP, 0)]
    assert src[0].key == 2 and src[0].start == 10          # the input is left as it was


@pytest.mark.parametrize("rows,shift", [
    (((10, 50, 3, -1, 0),), 0),                            # a key past the map
    (((10, 2 ** 63 - 2, 0, -1, 0),), 5),                   # an end that would overflow
    (((-2 ** 63 + 2, 0, 0, -1, 0),), -5),                  # a start that would overflow
])
def test_remap_slices_refuses_what_does_not_fit(rows, shift):
    out = ffi.new("pt_slice[]", len(rows))
    key_map = ffi.new("uint32_t[]", [0, 1, 2])
    assert lib.pt_remap_slices(_slices(*rows), len(rows), key_map, 3, shift, out) == \
        lib.PT_ERR_ARG


def test_a_call_of_an_unknown_key_is_a_format_error(job, monkeypatch):
    trace = processes.joined_trace(job[0])[0]
    streams = trace._streams
    trace_of, local, key_map, n_map, shift = streams.parts[0]
    streams.parts[0] = (trace_of, local, key_map, 1, shift)   # a map too short
    with pytest.raises(TraceFormatError, match="does not know"):
        summarize(trace)


# --- memory ------------------------------------------------------------------------------

BIG_JOB = r"""
import os, sys, multiprocessing as mp
import pytrace_cffi

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def work(n):
    fib(n)
    return os.getpid()

if __name__ == "__main__":
    pytrace_cffi.start(follow_children=True, output=sys.argv[1])
    with mp.get_context("fork").Pool(2) as pool:
        pool.map(work, [28, 28], chunksize=1)
    fib(28)
    pytrace_cffi.stop()
"""

MEASURE = PROC_STATUS + r"""
import sys
import pytrace_cffi
from pytrace_cffi import processes
import pytrace_cffi.render.html, pytrace_cffi.render.perfetto, pytrace_cffi.render.summary  # noqa




calls = sum(r.calls for r in processes.status(sys.argv[1]))
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")                # VmHWM from here: the peak of the join
processes.join(sys.argv[1], sys.argv[2])
print(calls, status("VmHWM") - before)
"""

FIB_CALLS = 2 * 514229 - 1          # fib(28) makes 2 * fib(29) - 1 calls


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
@pytest.mark.parametrize("output", ["job.pftrace", "job.html"])
def test_a_big_job_joins_in_a_few_bytes_a_call(tmp_path, output):
    """A job of three processes, ~3.1M calls, joined to .pftrace and .html: the
    join's peak RSS stays under 20 bytes a call (the JSON read back's slice table
    alone took 40, its text ~190 on disk)."""
    subprocess.run([sys.executable, "-c", BIG_JOB, str(tmp_path / "big")], env=_env(),
                   check=True, capture_output=True, timeout=600, start_new_session=True)
    result = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "big"),
                             str(tmp_path / output)], env=_env(), capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    calls, peak = map(int, result.stdout.split())
    assert calls >= 3 * FIB_CALLS
    assert peak < 20 * calls, f"{peak / calls:.1f} bytes a call"
    assert os.path.getsize(tmp_path / output) > 0
    if output.endswith(".html"):
        meta = _page_meta(tmp_path / output)
        assert meta["calls"] == calls and len(meta["processes"]) >= 2
        fib = [row for row in meta["summary"]["rows"] if row[0].endswith(": fib")]
        assert fib[0][1] == 3 * FIB_CALLS


def _other_node(job_dir, where, host="node-b"):
    """A copy of job_dir as another node's job: the same pids and tids, host renamed."""
    copy = where / "node-b-job"
    shutil.copytree(job_dir, copy)
    for process_dir in copy.iterdir():
        meta_path = process_dir / "meta.json"
        if meta_path.exists():
            meta = json.loads(meta_path.read_text())
            meta["host"] = host
            meta_path.write_text(json.dumps(meta))
    return copy


def test_two_nodes_with_the_same_pids_get_their_own_lanes(job, tmp_path):
    """Containers on two nodes often run the same pids (and tids): each process
    must keep its own lane, its own calls and its own marks, in every output."""
    job_dir, _ = job
    other = _other_node(job_dir, tmp_path)
    alone = processes.joined_trace(job_dir)[0]
    with pytest.warns(pytrace_cffi.TraceWarning, match="2 hosts"):
        both, results = processes.joined_trace([job_dir, other])
    n = len(alone.processes)
    assert len(both.processes) == len(results) == 2 * n
    lanes = list(both.processes)
    assert len(set(lanes)) == 2 * n
    tids = [t.native_id for t in both.threads]
    assert len(set(tids)) == len(tids)
    # Each node-b process: the OS pid of its node-a twin, a lane of its own.
    twin = {}
    for pid, info in both.processes.items():
        if info["host"] == "node-b":
            assert info["os_pid"] in alone.processes and pid == info["os_pid"] + (1 << 22)
            twin[pid] = info["os_pid"]
        else:
            assert "os_pid" not in info and pid in alone.processes
    assert len(twin) == n
    # Each lane holds exactly its process's calls (its own trace is the oracle).
    per_lane = {}
    for thread, calls in zip(both.threads, _per_thread(both)):
        per_lane.setdefault(both.thread_pid(thread), []).append(
            [(c.name, c.start_ns, c.end_ns) for c in calls])
    for lane, pid in twin.items():
        # node-b's times come through its own realtime anchor: one shift per process,
        # as small as the anchors' jitter.
        shift = per_lane[lane][0][0][1] - per_lane[pid][0][0][1]
        assert abs(shift) < 10_000_000
        assert per_lane[lane] == [[(name, start + shift, end + shift)
                                   for name, start, end in thread] for thread in per_lane[pid]]
        own = [t for t in alone.threads if alone.thread_pid(t) == pid]
        assert len(per_lane[lane]) == len(own)
    assert sum(len(calls) for threads in per_lane.values() for calls in threads) == \
        2 * len(alone)
    # Marks: each on its own node's thread.
    lane_of_tid = {t.native_id: both.thread_pid(t) for t in both.threads}
    host_of_mark = sorted((both.processes[lane_of_tid[m.thread]]["host"], m.name, m.ns)
                          for m in both.marks)
    assert host_of_mark == sorted([(info, m.name, m.ns) for m in alone.marks
                                   for info in ("node-b", alone.processes[
                                       alone.thread_pid(next(t for t in alone.threads
                                                             if t.native_id == m.thread))
                                   ]["host"])])
    # The JSON: a pid per lane, marks under their own lane; it reads back the same.
    path = tmp_path / "both.json"
    with pytest.warns(pytrace_cffi.TraceWarning):
        processes.join([job_dir, other], path)
    events = json.loads(path.read_text())["traceEvents"]
    named = {e["pid"] for e in events if e.get("name") == "process_name"}
    assert named == set(lanes)
    for event in events:
        if event["ph"] in ("i", "C"):
            assert event["pid"] == lane_of_tid[event["tid"]]
    again = _read_chrome_trace(str(path))
    assert facts_of(again) == facts_of(both) and calls_of(again) == calls_of(both)
    # Text and page say which node's pid a lane is.
    text = format_process_totals(both)
    for lane, pid in twin.items():
        label = both.processes[lane]["label"]
        assert f"pid {pid} on node-b ({label}):" in text
        assert f"pid {pid} on {alone.processes[pid]['host']} ({label}):" in text
    write_html(both, tmp_path / "both.html")
    shown = {p["pid"]: p["shown"] for p in _page_meta(tmp_path / "both.html")["processes"]}
    assert all(shown[lane] == f"pid {pid} on node-b" for lane, pid in twin.items())
    # The saved directory keeps the lanes and the OS pids.
    both.save(tmp_path / "saved")
    loaded = pytrace_cffi.load(tmp_path / "saved")
    assert loaded.processes == both.processes and calls_of(loaded) == calls_of(both)
    # The .pftrace: a process track per lane, named with its OS pid and node.
    test_perfetto = pytest.importorskip("test_perfetto")
    perfetto_protos()
    both.export_perfetto(str(tmp_path / "both.pftrace"))
    decoded = test_perfetto.decode(str(tmp_path / "both.pftrace"))
    tracks = dict(decoded["processes"].values())
    assert set(tracks) == set(lanes)
    for lane, pid in twin.items():
        assert tracks[lane].endswith(f" (pid {pid} on node-b)")
    assert len(decoded["slices"]) == 2 * len(alone)
