"""One timeline for a whole job in every format: a real job (a parent, a fork
Pool(2) and a `python -c` subprocess) exported or merged to .pftrace (a process
track per process, threads under their own), .json (a pid lane per process), .html
(lanes grouped by process) and a saved directory that loads back as a Trace of
several processes; the summary per process. Call counts are checked against what
each process ran."""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import pytrace_cffi
from helpers import CHROMIUM_INSTALL, missing_tool, perfetto_protos
from pytrace_cffi import processes
from pytrace_cffi.errors import TraceFormatError
from pytrace_cffi.render import summary as summary_module
from pytrace_cffi.reading import read_trace

TIMEOUT = 120
# Enough calls to rank in the page's top 100 by calls: on 3.14 a fork pool's
# processes run 131 functions 77+ times (58 on 3.13: traceback's import now runs
# _colorize's dataclasses and annotationlib), which pushed a 77-call helper out.
HELPER_CALLS = 777
TASKS = 300

PROGRAM = """
import os, subprocess, sys, multiprocessing as mp
import pytrace_cffi

def unique_task(i):
    return os.getpid()

def unique_main():
    pass

if __name__ == "__main__":
    pytrace_cffi.start(follow_children=True, output=sys.argv[1])
    unique_main()
    with mp.get_context("fork").Pool(2) as pool:
        pids = pool.map(unique_task, range(%d), chunksize=5)
    helper = subprocess.run(
        [sys.executable, "-c",
         "import os\\ndef unique_helper(): pass\\nfor _ in range(%d): unique_helper()\\n"
         "print(os.getpid())"], check=True, capture_output=True, text=True, timeout=60)
    pytrace_cffi.stop()
    print(json.dumps({"root": os.getpid(), "helper": int(helper.stdout),
                      "tasks": {str(p): pids.count(p) for p in set(pids)}}))
""".replace("import os,", "import json, os,") % (TASKS, HELPER_CALLS)


def _env():
    env = dict(os.environ)
    env.pop(processes.ENV, None)
    return env


def cli(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", *map(str, args)], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(job directory, {pid: Counter of unique_* calls it ran}, root pid, labels)."""
    where = tmp_path_factory.mktemp("job")
    script = where / "prog.py"
    script.write_text(textwrap.dedent(PROGRAM))
    proc = subprocess.run([sys.executable, str(script), str(where / "job")], cwd=where,
                          env=_env(), capture_output=True, text=True, timeout=TIMEOUT,
                          start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.splitlines()[-1])
    expected = collections.defaultdict(collections.Counter)
    expected[facts["root"]]["unique_main"] = 1
    expected[facts["helper"]]["unique_helper"] = HELPER_CALLS
    for pid, n in facts["tasks"].items():
        expected[int(pid)]["unique_task"] = n
    results = processes.status(where / "job")
    # Every process complete: a pool worker that ran no task, terminated by the
    # pool as it starts, saved its trace too (SIGTERM waits for its after-fork hook).
    assert all(r.state == "complete" for r in results), results
    assert set(expected) <= {r.pid for r in results} and len(results) == 4, results
    labels = {r.pid: r.label for r in results if r.state == "complete"}
    assert labels[facts["helper"]] == "python -c" and labels[facts["root"]] == "prog.py"
    return where / "job", dict(expected), facts["root"], labels


def unique_counts(pairs):
    """{pid: Counter of unique_* function names} from (pid, full name) pairs."""
    out = collections.defaultdict(collections.Counter)
    for pid, name in pairs:
        short = name.rsplit(": ", 1)[-1]
        if short.startswith("unique_"):
            out[pid][short] += 1
    return {pid: counter for pid, counter in out.items() if counter}


def trace_counts(trace):
    pid_of = {t.native_id: trace.thread_pid(t) for t in trace.threads}
    return unique_counts((pid_of[call.thread], call.name) for call in trace)


def own_starts(job_dir):
    """{pid: sorted start ns of its unique_* calls} read from each process's own directory."""
    out = {}
    for result in processes.status(job_dir):
        if result.state == "lost":
            continue
        trace = processes.read_process(result.directory)[0]
        out[result.pid] = sorted(c.start_ns for c in trace
                                 if c.name.rsplit(": ", 1)[-1].startswith("unique_"))
    return {pid: starts for pid, starts in out.items() if starts}


# --- the Trace of a job ----------------------------------------------------------------

def test_a_job_reads_as_a_trace_of_several_processes(job):
    job_dir, expected, root, labels = job
    trace = read_trace(job_dir)
    assert list(trace.processes)[0] == root == trace.pid
    assert {pid: info["label"] for pid, info in trace.processes.items()} == labels
    assert all(trace.processes[pid]["state"] == "complete" for pid in labels)
    assert trace_counts(trace) == expected
    # Thread names stay plain: the process says whose they are.
    assert all(not re.search(r"pid \d+\)$", t.name) for t in trace.threads)
    assert sum(t.name == "MainThread" for t in trace.threads) == len(labels)
    # The threads come process by process, in lane order.
    order = [trace.thread_pid(t) for t in trace.threads]
    assert order == sorted(order, key=list(trace.processes).index)
    totals = {t.pid: t.calls for t in summary_module.process_totals(trace)}
    assert totals == {r.pid: r.calls for r in processes.status(job_dir) if r.pid in labels}


def test_one_process_traces_stay_as_they_were(tmp_path):
    with pytrace_cffi.trace() as t:
        sorted(range(3))
    trace = t.trace
    assert trace.processes is None and all(th.pid is None for th in trace.threads)
    trace.export_chrome_trace(tmp_path / "one.json")
    text = (tmp_path / "one.json").read_text()
    assert "process_name" not in text and '"processes"' not in text
    trace.save(tmp_path / "saved")
    meta = json.loads((tmp_path / "saved" / "meta.json").read_text())
    assert "processes" not in meta and all("pid" not in th for th in meta["threads"])
    again = pytrace_cffi.load(tmp_path / "saved")
    assert again.processes is None
    again.export_chrome_trace(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == text
    assert read_trace(tmp_path / "one.json").processes is None


# --- .pftrace --------------------------------------------------------------------------

def pftrace_tracks(path):
    """(root descriptor or None, {uuid: process descriptor}, {uuid: thread descriptor},
    decoded file) of a .pftrace."""
    test_perfetto = pytest.importorskip("test_perfetto")
    root, process_tracks, thread_tracks = None, {}, {}
    with open(path, "rb") as f:
        data = f.read()
    for what, packet in test_perfetto._packets(data):
        if packet is None or not packet.HasField("track_descriptor"):
            continue
        d = packet.track_descriptor
        if d.HasField("process"):
            process_tracks[d.uuid] = d
        elif d.HasField("thread"):
            thread_tracks[d.uuid] = d
        elif d.uuid == 0:
            root = d
    return root, process_tracks, thread_tracks, test_perfetto.decode(path)


@pytest.mark.parametrize("command", ["export", "merge"])
def test_pftrace_has_a_process_track_per_process(job, tmp_path, command):
    perfetto_protos()
    job_dir, expected, root_pid, labels = job
    out = tmp_path / "job.pftrace"
    cli(command, job_dir, "-o", out, cwd=tmp_path)
    root, process_tracks, thread_tracks, decoded = pftrace_tracks(out)
    # One process track per process, named by its label; ranked root first, then
    # in lane order, which the root descriptor tells the UI to honour.
    by_pid = {d.process.pid: d for d in process_tracks.values()}
    assert {pid: d.process.process_name for pid, d in by_pid.items()} == labels
    assert by_pid[root_pid].sibling_order_rank == 0
    assert sorted(d.sibling_order_rank for d in by_pid.values()) == list(range(len(labels)))
    order = [pid for pid, _ in sorted(by_pid.items(), key=lambda i: i[1].sibling_order_rank)]
    assert order == list(read_trace(job_dir).processes)
    assert root is not None and root.process_ordering == 1 and root.thread_ordering == 1
    # Each thread track hangs under its own process's track, with that pid.
    assert len(thread_tracks) == len(read_trace(job_dir).threads)
    for d in thread_tracks.values():
        parent = process_tracks[d.parent_uuid]
        assert parent.process.pid == d.thread.pid
        assert not re.search(r"pid \d+\)$", d.thread.thread_name)
    # The calls of each process are on its threads' tracks, as many as it made ...
    pid_of_track = {uuid: d.thread.pid for uuid, d in thread_tracks.items()}
    assert unique_counts((pid_of_track[s["track"]], s["name"])
                         for s in decoded["slices"]) == expected
    # ... at the times its own trace has (one host: the shared CLOCK_MONOTONIC).
    starts = collections.defaultdict(list)
    for s in decoded["slices"]:
        if s["name"].rsplit(": ", 1)[-1].startswith("unique_"):
            starts[pid_of_track[s["track"]]].append(s["start"])
    assert {pid: sorted(v) for pid, v in starts.items()} == own_starts(job_dir)


# --- .json from a loaded job --------------------------------------------------------------

def json_lanes(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    events = data["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    ranks = {e["pid"]: e["args"]["sort_index"] for e in events
             if e.get("name") == "process_sort_index"}
    calls = unique_counts((e["pid"], e["name"]) for e in events if e["ph"] == "X")
    return data, lanes, ranks, calls


def test_saved_job_directory_round_trip(job, tmp_path):
    job_dir, expected, root_pid, labels = job
    out = tmp_path / "joined"
    cli("merge", job_dir, "-o", out, cwd=tmp_path)
    meta = json.loads((out / "meta.json").read_text())
    assert [p["pid"] for p in meta["processes"]] == list(read_trace(job_dir).processes)
    assert {p["pid"]: p["label"] for p in meta["processes"]} == labels
    assert {th["pid"] for th in meta["threads"]} == set(labels)
    trace = pytrace_cffi.load(out)
    assert trace.pid == root_pid
    assert {pid: info["label"] for pid, info in trace.processes.items()} == labels
    assert trace_counts(trace) == expected
    # It re-exports with a pid lane per process, as the job's own join does.
    trace.export_chrome_trace(tmp_path / "again.json")
    _, lanes, ranks, calls = json_lanes(tmp_path / "again.json")
    assert lanes == labels and calls == expected
    assert sorted(ranks, key=ranks.get) == list(trace.processes)
    processes.join(job_dir, tmp_path / "direct.json")
    assert json_lanes(tmp_path / "direct.json")[1:] == (lanes, ranks, calls)
    # ... and saves again the same.
    trace.save(tmp_path / "resaved")
    assert json.loads((tmp_path / "resaved" / "meta.json").read_text()) == meta
    assert (tmp_path / "resaved" / "slices.bin").read_bytes() == \
        (out / "slices.bin").read_bytes()
    # `export DIR -o OUTDIR` writes the same directory.
    cli("export", job_dir, "-o", tmp_path / "exported", cwd=tmp_path)
    assert json.loads((tmp_path / "exported" / "meta.json").read_text()) == meta


def damaged(tmp_path, job_dir, change):
    out = tmp_path / "joined"
    if not out.exists():
        processes.join(job_dir, out)
    target = tmp_path / "damaged"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(out, target)
    meta = json.loads((target / "meta.json").read_text())
    change(meta)
    (target / "meta.json").write_text(json.dumps(meta))
    return target


def _set(path, value):
    def change(meta):
        where = meta
        for step in path[:-1]:
            where = where[step]
        if value is KeyError:
            del where[path[-1]]
        else:
            where[path[-1]] = value
    return change


def _pid_twice(meta):
    meta["processes"][1]["pid"] = meta["processes"][0]["pid"]


DAMAGE = {
    "processes an object": _set(["processes"], {}),
    "processes empty": _set(["processes"], []),
    "processes a string": _set(["processes"], "rank 0"),
    "process not an object": _set(["processes", 0], 7),
    "process pid a string": _set(["processes", 0, "pid"], "1"),
    "process pid a bool": _set(["processes", 0, "pid"], True),
    "process pid too big": _set(["processes", 0, "pid"], 2 ** 70),
    "label null": _set(["processes", 0, "label"], None),
    "label missing": _set(["processes", 0, "label"], KeyError),
    "pid listed twice": _pid_twice,
    "thread in an unlisted process": _set(["threads", 0, "pid"], 1),
    "thread without its pid": _set(["threads", 0, "pid"], None),
    "thread pid a string": _set(["threads", 0, "pid"], "x"),
    "trace pid not a process": _set(["pid"], 1),
    "threads with pids, no processes": _set(["processes"], KeyError),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_job_directory_is_a_format_error(job, tmp_path, damage):
    with pytest.raises(TraceFormatError):
        pytrace_cffi.load(damaged(tmp_path, job[0], DAMAGE[damage]))


# --- .html -------------------------------------------------------------------------------

def embedded(text, element_id):
    match = re.search(f'<script type="application/json" id="{element_id}">(.*?)</script>',
                      text, re.S)
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def job_page(job, tmp_path_factory):
    path = tmp_path_factory.mktemp("page") / "job.html"
    cli("export", job[0], "-o", path, cwd=path.parent)
    return path


def test_html_groups_lanes_by_process(job, job_page):
    job_dir, expected, root_pid, labels = job
    meta = embedded(job_page.read_text(encoding="utf-8"), "pt-meta")
    trace = read_trace(job_dir)
    assert [p["pid"] for p in meta["processes"]] == list(trace.processes)
    assert {p["pid"]: p["label"] for p in meta["processes"]} == labels
    assert {p["pid"]: p["calls"] for p in meta["processes"]} == \
        {r.pid: r.calls for r in processes.status(job_dir) if r.pid in labels}
    assert [t["pid"] for t in meta["threads"]] == [trace.thread_pid(t) for t in trace.threads]
    assert {p["pid"]: p["threads"] for p in meta["processes"]} == \
        dict(collections.Counter(t["pid"] for t in meta["threads"]))
    # The summary table still covers every process's calls; each process's own
    # table has just its calls.
    rows = {row[0].rsplit(": ", 1)[-1]: row[1] for row in meta["summary"]["rows"]}
    assert rows["unique_task"] == TASKS and rows["unique_helper"] == HELPER_CALLS
    per_process = {}
    for process in meta["processes"]:
        found = collections.Counter({row[0].rsplit(": ", 1)[-1]: row[1]
                                     for row in process["summary"]["rows"]})
        per_process[process["pid"]] = collections.Counter(
            {name: n for name, n in found.items() if name.startswith("unique_")})
    # (the root's table holds its top functions only: unique_main may not be among them)
    assert {pid: c for pid, c in per_process.items() if c and pid != root_pid} == \
        {pid: c for pid, c in expected.items() if pid != root_pid}
    assert set(per_process[root_pid]) <= {"unique_main"}


def test_html_draws_a_header_per_process(job, job_page, tmp_path):
    test_html = pytest.importorskip("test_html")
    binary = test_html.install_chromium()
    if binary is None:
        missing_tool("chromium", CHROMIUM_INSTALL)
    labels = job[3]

    def chromium(*args, page=job_page):
        command = [binary, "--headless", "--no-sandbox", "--disable-gpu",
                   "--no-first-run", "--disable-background-networking",
                   f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                   *args, *([page.as_uri()] if page else [])]
        proc = subprocess.run(command, capture_output=True, timeout=180, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.decode("utf-8")

    dom = chromium("--dump-dom")
    facts = re.search(r'<span class="facts" id="facts">(.*?)</span>', dom).group(1)
    assert f"{len(labels)} processes (" in facts
    for pid, label in labels.items():
        assert f"{label}, pid {pid}" in facts
    assert dom.count("<tr") > 10                  # the script ran to the summary table
    select = re.search(r'<select id="summary-process">(.*?)</select>', dom, re.S).group(1)
    options = re.findall(r"<option[^>]*>(.*?)</option>", select)
    assert options == ["all processes"] + [f"{labels[pid]} (pid {pid})"
                                           for pid in read_trace(job[0]).processes]
    # Each process's group header: a band of its colour across the timeline.
    width, _, rows = test_html.canvas_pixels(lambda *args: chromium(*args, page=None),
                                             job_page, tmp_path, window="1000,5000")
    # A column right of any header text, between the time axis's grid lines (drawn
    # across the headers every 110+ px, where they would be missed): one where lane
    # headers (#eef1f4) show.
    lane = (0xee, 0xf1, 0xf4)
    x = next((4 * column for column in range(width - 40, width - 200, -1)
              if any(tuple(row[4 * column:4 * column + 3]) == lane for row in rows)), None)
    assert x is not None, "no lane header was drawn"
    header = [tuple(row[x:x + 3]) == (0xd8, 0xde, 0xe4) for row in rows]
    bands = sum(1 for y in range(1, len(rows)) if header[y] and not header[y - 1])
    assert bands == len(labels), bands


# --- summary -----------------------------------------------------------------------------

def test_summary_per_process_and_across_all(job, tmp_path):
    job_dir, expected, root_pid, labels = job
    results = {r.pid: r for r in processes.status(job_dir) if r.pid in labels}
    out = cli("summary", job_dir, "--limit", "0", cwd=tmp_path).stdout
    assert f"{sum(r.calls for r in results.values()):,} calls in {len(labels)} processes" in out
    for pid, r in results.items():
        assert re.search(rf"^  pid {pid} \({re.escape(r.label)}\): {r.calls:,} calls? on \d+ "
                         rf"threads?", out, re.M), out
    assert re.search(rf"^ +{TASKS} .*: unique_task$", out, re.M)
    per = cli("summary", job_dir, "--limit", "0", "--per-process", "--sort", "name",
              cwd=tmp_path).stdout
    found = collections.defaultdict(collections.Counter)
    for line in per.splitlines():
        match = re.match(r"^ +(\d+) +\S+ +\S+ +(.*) \(pid (\d+)\) +.*: (unique_\w+)$", line)
        if match:
            found[int(match[3])][match[4]] += int(match[1])
            assert match[2].strip() == labels[int(match[3])]
    assert dict(found) == expected
    trace = read_trace(job_dir)
    rows = summary_module.summarize(trace, limit=None, per_process=True)
    assert {row.thread for row in rows} == {f"{labels[pid]} (pid {pid})" for pid in labels}


# --- several hosts ------------------------------------------------------------------------

def test_another_hosts_process_is_aligned_in_every_format(job, tmp_path):
    """A process of another host (CLOCK_MONOTONIC 5 s behind, CLOCK_REALTIME the
    same) is mapped through the realtime anchors in the saved directory, the
    .pftrace and the .html as in the joined JSON."""
    job_dir, expected, root_pid, labels = job
    moved = tmp_path / "job"
    shutil.copytree(job_dir, moved)
    [helper] = [pid for pid, label in labels.items() if label == "python -c"]
    meta_path = moved / f"proc-{helper}" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["host"] = "elsewhere"
    meta_path.write_text(json.dumps(meta))

    def helper_starts(trace):
        return sorted(c.start_ns for c in trace
                      if c.name.endswith(": unique_helper"))

    # Aligned through CLOCK_REALTIME already (the anchors' own pairing error aside).
    with pytest.warns(pytrace_cffi.TraceWarning, match="2 hosts"):
        before = helper_starts(read_trace(moved))
    shift = 5_000_000_000
    for point in meta["realtime_anchor"].values():
        point["realtime_ns"] += shift
    meta_path.write_text(json.dumps(meta))
    with pytest.warns(pytrace_cffi.TraceWarning, match="2 hosts"):
        processes.join(moved, tmp_path / "saved")
    after = helper_starts(pytrace_cffi.load(tmp_path / "saved"))
    assert len(before) == len(after) == HELPER_CALLS
    assert all(abs(b - a - shift) <= 1 for a, b in zip(before, after))
    # The root's calls stay where they were.
    root_calls = sorted(c.start_ns for c in read_trace(job_dir)
                        if c.name.endswith(": unique_main"))
    assert root_calls == sorted(c.start_ns for c in pytrace_cffi.load(tmp_path / "saved")
                                if c.name.endswith(": unique_main"))
    if perfetto_protos() is not None:
        with pytest.warns(pytrace_cffi.TraceWarning, match="2 hosts"):
            processes.join(moved, tmp_path / "moved.pftrace")
        _, _, thread_tracks, decoded = pftrace_tracks(tmp_path / "moved.pftrace")
        starts = sorted(s["start"] for s in decoded["slices"]
                        if s["name"].endswith(": unique_helper"))
        assert starts == after


# --- a joined JSON read back strictly -------------------------------------------------------

JSON_DAMAGE = {
    "label not a string": (b'"name": "process_name", "pid": ROOT, "tid": 0, '
                           b'"args": {"name": "prog.py"}',
                           b'"name": "process_name", "pid": ROOT, "tid": 0, '
                           b'"args": {"name": 7}'),
    "sort index not an integer": (b'"name": "process_sort_index", "pid": ROOT, "tid": 0, '
                                  b'"args": {"sort_index": 0}',
                                  b'"name": "process_sort_index", "pid": ROOT, "tid": 0, '
                                  b'"args": {"sort_index": "0"}'),
    "thread of an unlisted process": (b'"name": "thread_name", "pid": ROOT,',
                                      b'"name": "thread_name", "pid": 1,'),
    "otherData.processes not a list": (b'"processes": [', b'"processes": 5, "x": ['),
}


@pytest.mark.parametrize("layout", ["lines", "whole"])
@pytest.mark.parametrize("damage", list(JSON_DAMAGE))
def test_a_damaged_joined_json_is_a_format_error(job, tmp_path, damage, layout):
    job_dir, _, root_pid, _ = job
    path = tmp_path / "joined.json"
    processes.join(job_dir, path)
    assert read_trace(path).processes is not None
    old, new = (part.replace(b"ROOT", str(root_pid).encode()) for part in JSON_DAMAGE[damage])
    text = path.read_bytes()
    assert text.count(old) >= 1, damage
    text = text.replace(old, new, 1)
    if layout == "whole":          # reformatted: read by json.loads of the whole file
        text = text.replace(b",\n", b",\n ")
    path.write_bytes(text)
    with pytest.raises(TraceFormatError):
        read_trace(path)


# --- fuzzing the processes of a saved directory --------------------------------------------

def _two_process_dir(where):
    """A saved directory of a trace made to span two processes (pid, pid + 1)."""
    import threading
    with pytrace_cffi.trace() as t:
        worker = threading.Thread(target=sorted, args=(range(5),))
        worker.start()
        worker.join()
        sorted(range(3))
    trace = t.trace
    pid = trace.pid
    trace.processes = {pid: {"label": "first", "host": "h"}, pid + 1: {"label": "</script>x"}}
    trace.threads = [th._replace(pid=pid + (i % 2)) for i, th in enumerate(trace.threads)]
    trace.save(where)
    return trace


def _use_everywhere(directory, tmp_path):
    """Loads directory: a TraceFormatError, or a trace every exporter takes."""
    try:
        trace = pytrace_cffi.load(directory)
    except TraceFormatError:
        return None
    from pytrace_cffi.render.html import write_html
    trace.export_chrome_trace(tmp_path / "f.json")
    trace.export_perfetto(tmp_path / "f.pftrace")
    write_html(trace, tmp_path / "f.html")
    again = read_trace(tmp_path / "f.json")
    assert len(again) == len(trace)
    assert (again.processes is None) == (trace.processes is None)
    return trace


def test_a_trace_of_two_processes_made_by_hand_round_trips(tmp_path):
    made = _two_process_dir(tmp_path / "two")
    loaded = _use_everywhere(tmp_path / "two", tmp_path)
    assert loaded.processes == made.processes
    assert [th.pid for th in loaded.threads] == [th.pid for th in made.threads]
    assert "</script>x" not in (tmp_path / "f.html").read_text(encoding="utf-8")
    again = read_trace(tmp_path / "f.json")
    assert {pid: info["label"] for pid, info in again.processes.items()} == \
        {pid: info["label"] for pid, info in made.processes.items()}


def test_counters_of_each_process_hang_under_its_own_track(tmp_path):
    perfetto_protos()
    import threading

    def count(value):
        pytrace_cffi.counter("load", value)
    with pytrace_cffi.trace() as t:
        worker = threading.Thread(target=count, args=(2,))
        worker.start()
        worker.join()
        count(1)
    trace = t.trace
    pid = trace.pid
    trace.processes = {pid: {"label": "main"}, pid + 1: {"label": "other"}}
    [worker_tid] = [th.native_id for th in trace.threads
                    if th.native_id != threading.get_native_id()]
    trace.threads = [th._replace(pid=pid + (th.native_id == worker_tid))
                     for th in trace.threads]
    trace.export_perfetto(tmp_path / "c.pftrace")
    _, process_tracks, _, decoded = pftrace_tracks(tmp_path / "c.pftrace")
    pid_of = {uuid: d.process.pid for uuid, d in process_tracks.items()}
    counters = {uuid: pid_of[parent] for uuid, (name, parent) in decoded["counters"].items()
                if name == "load"}
    values = {counters[track]: value for track, _, value in decoded["counter_values"]}
    assert values == {pid: 1, pid + 1: 2}


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats()
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@pytest.fixture(scope="module")
def two_process_dir(tmp_path_factory):
    where = tmp_path_factory.mktemp("two") / "saved"
    _two_process_dir(where)
    return where


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(where=st.sampled_from(["processes", "processes.0", "processes.0.label",
                              "processes.1.pid", "processes.0.host", "threads.0.pid",
                              "threads.1.pid", "pid"]), value=_json_values)
def test_fuzzed_processes_load_or_raise_format_errors(two_process_dir, tmp_path, where,
                                                       value):
    target = tmp_path / "fuzzed"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(two_process_dir, target)
    meta = json.loads((target / "meta.json").read_text())
    *path, last = where.split(".")
    entry = meta
    for part in path:
        entry = entry[int(part)] if isinstance(entry, list) else entry[part]
    entry[int(last) if isinstance(entry, list) else last] = value
    (target / "meta.json").write_text(json.dumps(meta))
    _use_everywhere(target, tmp_path)


@pytest.fixture(scope="module")
def two_process_json(two_process_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("two-json") / "two.json"
    pytrace_cffi.load(two_process_dir).export_chrome_trace(path)
    return path


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(event=st.sampled_from(["process_name", "process_sort_index", "thread_name"]),
       field=st.sampled_from(["pid", "args"]), value=_json_values, whole=st.booleans(),
       processes_value=st.none() | _json_values)
def test_fuzzed_process_lanes_of_a_json_read_or_raise_format_errors(
        two_process_json, tmp_path, event, field, value, whole, processes_value):
    lines = two_process_json.read_bytes().split(b"\n")
    head = json.loads(lines[0][:-1] + b"}")
    if processes_value is not None:
        head["otherData"]["processes"] = processes_value
    lines[0] = json.dumps(head).encode()[:-1] + b","
    for number, line in enumerate(lines):
        if f'"name": "{event}"'.encode() in line:
            comma = line.endswith(b",")
            data = json.loads(line.rstrip(b","))
            data[field] = value
            lines[number] = json.dumps(data).encode() + (b"," if comma else b"")
            break
    text = b"\n".join(lines)
    if whole:
        text = text.replace(b",\n", b",\n ")
    path = tmp_path / "fuzzed.json"
    path.write_bytes(text)
    try:
        trace = read_trace(path)
    except TraceFormatError:
        return
    trace.export_perfetto(tmp_path / "f.pftrace")
    trace.export_chrome_trace(tmp_path / "f.json")
    assert len(read_trace(tmp_path / "f.json")) == len(trace)


def test_export_counts_the_calls_as_summary_does(job, tmp_path):
    """export's last line counts calls as summary and run do: the frames a forked
    worker continues from its parent, running when its trace began, are none."""
    job_dir, expected, root_pid, labels = job
    total = sum(r.calls for r in processes.status(job_dir) if r.pid in labels)
    run = cli("export", job_dir, "-o", tmp_path / "job.pftrace", cwd=tmp_path)
    assert f"pytrace_cffi: {total:,} calls on " in run.stderr, run.stderr
    summary = cli("summary", tmp_path / "job.pftrace", "--limit", "1", cwd=tmp_path)
    assert f": {total:,} calls in {len(labels)} processes" in summary.stdout
    again = cli("export", tmp_path / "job.pftrace", "-o", tmp_path / "job.html", cwd=tmp_path)
    assert f"pytrace_cffi: {total:,} calls on " in again.stderr, again.stderr
