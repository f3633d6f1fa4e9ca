"""Saved-trace and job directories, our JSON and torch's, damaged or hostile: one
TraceFormatError naming the file and what is wrong, or what was kept said in
words - never a traceback, a hang, an unbounded read or a file outside the
directory."""
import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings

import pytest

import pytrace_cffi
from pytrace_cffi import TraceFormatError, TraceWarning, processes
from pytrace_cffi.model.realtime import monotonic_to_realtime
from pytrace_cffi.reading import read_trace

ENV = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(
    pytrace_cffi.__file__))))


def f():
    return 1


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pytrace_cffi", *map(str, args)], env=ENV,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """A saved trace and a spilled one, copied by each test that damages them."""
    root = tmp_path_factory.mktemp("traces")
    with pytrace_cffi.trace() as t:
        for _ in range(50):
            f()
    t.trace.save(root / "saved")
    pytrace_cffi.start(max_events=64, output=str(root / "spilled"))
    for _ in range(100):
        f()
    pytrace_cffi.stop()
    return root


def copy(traces, name, tmp_path):
    shutil.copytree(traces / name, tmp_path / name)
    return tmp_path / name


class Unblocker:
    """Opens the FIFOs for writing after `after` seconds, which ends a reader's
    blocked open(): a test of a reader that would wait for good fails instead."""

    def __init__(self, fifos, after=10.0):
        self.fifos, self.after, self.done = fifos, after, threading.Event()

    def __enter__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.started = time.monotonic()
        return self

    def _run(self):
        if self.done.wait(self.after):
            return
        while not self.done.is_set():
            for fifo in self.fifos:
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:             # no reader yet
                    pass
            time.sleep(0.05)

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        self.elapsed = time.monotonic() - self.started


# -- item 13: only regular files, inside the directory, bounded -------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("which", [("saved", "meta.json"), ("saved", "hashes.json"),
                                   ("saved", "slices.bin"), ("spilled", "events.bin")])
def test_a_fifo_in_place_of_a_file_is_refused_at_once(traces, tmp_path, which):
    directory = copy(traces, which[0], tmp_path)
    fifo = directory / which[1]
    fifo.unlink()
    os.mkfifo(fifo)
    for read in (pytrace_cffi.load, read_trace):
        with Unblocker([fifo]) as watch:
            with pytest.raises(TraceFormatError) as caught:
                read(str(directory))
        assert watch.elapsed < 5, f"{read.__name__} waited for the FIFO"
        assert str(fifo) in str(caught.value) and "FIFO" in str(caught.value)
    with Unblocker([fifo]) as watch:
        proc = cli("export", directory, "-o", tmp_path / "out.pftrace")
    assert watch.elapsed < 5 and proc.returncode == 1
    assert "FIFO" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", ["meta.json", "hashes.json", "params.json", "slices.bin"])
def test_a_link_out_of_the_directory_is_not_followed(traces, tmp_path, name):
    directory = copy(traces, "saved", tmp_path)
    outside = tmp_path / f"outside-{name}"
    shutil.move(str(directory / name), str(outside))
    os.symlink(outside, directory / name)       # the same content, outside
    with pytest.raises(TraceFormatError, match=f"{name}: a symbolic link"):
        pytrace_cffi.load(str(directory))


DEVICES = """
import os, resource, shutil, sys
import pytrace_cffi
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
saved, work = sys.argv[1], sys.argv[2]
for name, device in (("meta.json", "/dev/zero"), ("hashes.json", "/dev/urandom"),
                     ("slices.bin", "/dev/zero")):
    directory = os.path.join(work, name)
    shutil.copytree(saved, directory)
    os.unlink(os.path.join(directory, name))
    os.symlink(device, os.path.join(directory, name))
    try:
        pytrace_cffi.load(directory).export_chrome_trace(os.path.join(work, "x.json"))
    except pytrace_cffi.TraceFormatError as exc:
        print(name, exc)
"""


@pytest.mark.skipif(not os.path.exists("/dev/zero") or sys.platform != "linux",
                    reason="needs /dev/zero and RLIMIT_AS")
def test_a_link_to_a_device_is_not_read(traces, tmp_path):
    # (in a child with 2 GB of address space: a read without bound fails there)
    proc = subprocess.run([sys.executable, "-c", DEVICES, str(traces / "saved"),
                           str(tmp_path)], env=ENV, capture_output=True, text=True,
                          timeout=60)
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["meta.json", "hashes.json", "slices.bin"], \
        proc.stderr[-2000:]
    assert all("a symbolic link" in line for line in lines)


def test_a_json_file_beyond_the_bound_is_refused(traces, tmp_path, monkeypatch):
    from pytrace_cffi import _safe_read
    directory = copy(traces, "saved", tmp_path)
    size = os.path.getsize(directory / "hashes.json")
    monkeypatch.setattr(_safe_read, "MAX_JSON_BYTES", size - 1)
    with pytest.raises(TraceFormatError, match=f"hashes.json: {size} bytes, more than"):
        pytrace_cffi.load(str(directory))


def test_a_directory_in_place_of_a_file_is_refused(traces, tmp_path):
    directory = copy(traces, "saved", tmp_path)
    (directory / "meta.json").unlink()
    (directory / "meta.json").mkdir()
    with pytest.raises(TraceFormatError, match="meta.json: a directory, not a regular file"):
        pytrace_cffi.load(str(directory))


# -- jobs ---------------------------------------------------------------------

KILLED = """
import os, signal, sys
import pytrace_cffi
def unique_victim(i):
    return i
pytrace_cffi.start(follow_children=True, output=sys.argv[1], max_events=4096)
for i in range(20000):
    unique_victim(i)
os.kill(os.getpid(), signal.SIGKILL)
"""
VICTIM_CALLS = 20000


@pytest.fixture(scope="module")
def killed_job(tmp_path_factory):
    """A job whose one process was killed: recovered from keys.jsonl and events.bin."""
    job = tmp_path_factory.mktemp("killed") / "job"
    subprocess.run([sys.executable, "-c", KILLED, str(job)], env=ENV, timeout=120)
    [result] = processes.status(str(job))
    assert result.state == "recovered" and result.calls > 0, result
    return job


def job_copy(killed_job, tmp_path):
    shutil.copytree(killed_job, tmp_path / "job")
    job = tmp_path / "job"
    [proc] = [p for p in job.iterdir() if p.name.startswith("proc-")]
    return job, proc


def counted_calls(trace):
    """Calls as ProcessResult.calls counts them: frames already running when the
    trace began (flagged seeded in the slice table) are no call."""
    from pytrace_cffi._core import lib
    return sum(not slices[i].flags & lib.PT_SLICE_SEEDED
               for _, slices, n in trace.thread_slices() for i in range(n))


def victims(trace):
    return sorted(call.start_ns for call in trace if call.name.endswith(": unique_victim"))


def test_a_job_whose_keys_jsonl_lost_its_first_line_keeps_its_calls_and_says_so(
        killed_job, tmp_path):
    job, proc = job_copy(killed_job, tmp_path)
    intact = processes.recover(str(proc))
    assert len(victims(intact)) > VICTIM_CALLS // 2
    keys = proc / "keys.jsonl"
    lines = keys.read_bytes().split(b"\n")
    lines[0] = lines[0][:40] + b"#" + lines[0][41:]           # one byte damaged
    keys.write_bytes(b"\n".join(lines))
    [result] = processes.status(str(job))
    assert result.state == "recovered"
    assert "keys.jsonl line 1 is not JSON" in result.note
    assert "the clock's start was lost" in result.note and "functions unnamed" in result.note
    # The calls are kept; the names that line held are lost (unique_victim's among
    # them: it was named before the first spill).
    trace = processes.recover(str(proc))
    assert len(trace) >= len(intact) and result.calls == counted_calls(trace)
    assert sum(call.name.startswith("<unnamed key ") for call in trace) >= len(victims(intact))
    for args in (("summary", job), ("export", job, "-o", tmp_path / "o.json")):
        run = cli(*args)
        assert run.returncode == 0, run.stderr
        # our TraceWarning as the command line says it: no file, line or class of ours
        assert f"pytrace_cffi: not every process of {job} was read whole:" in (
            run.stderr.splitlines()), run.stderr
        assert "TraceWarning" not in run.stderr
        assert f"pid {result.pid} (" in run.stderr and "keys.jsonl line 1" in run.stderr
    assert json.loads((tmp_path / "o.json").read_text())["traceEvents"]
    with pytest.warns(TraceWarning, match="keys.jsonl line 1 is not JSON"):
        joined = read_trace(str(job))
    assert len(joined) == len(trace)
    merged = cli("merge", job, "-o", tmp_path / "m.json")
    assert merged.returncode == 0 and "keys.jsonl line 1 is not JSON" in merged.stderr


def test_recovered_times_without_the_clock_start_are_those_with_it(killed_job, tmp_path):
    job, proc = job_copy(killed_job, tmp_path)
    intact = victims(processes.recover(str(proc)))
    keys = proc / "keys.jsonl"
    first, rest = keys.read_bytes().split(b"\n", 1)
    record = json.loads(first)
    del record["start_ns"], record["tick0"]                   # the clock's start lost
    keys.write_bytes(json.dumps(record).encode() + b"\n" + rest)
    estimated = victims(processes.recover(str(proc)))
    assert len(estimated) == len(intact)
    assert max(abs(a - b) for a, b in zip(estimated, intact)) < 1_000_000
    [result] = processes.status(str(job))
    assert "the clock's start was lost" in result.note


def test_an_events_bin_of_empty_blocks_is_damage_said_not_walked(killed_job, tmp_path):
    """Blocks of no events, which the writer never writes, appended to a killed
    process's events.bin: its calls are kept, the rest is said to be damaged."""
    job, proc = job_copy(killed_job, tmp_path)
    intact = len(processes.recover(str(proc)))
    size = os.path.getsize(proc / "events.bin")
    with open(proc / "events.bin", "ab") as out:
        out.write(bytes(24) * 100_000)             # thread 0, no events, base 0
    [result] = processes.status(str(job))
    assert result.state == "recovered" and len(processes.recover(str(proc))) == intact
    assert f"events.bin is damaged at byte {size}: the {24 * 100_000} bytes" in result.note


def test_a_deeply_nested_keys_jsonl_line_is_said_not_raised(killed_job, tmp_path):
    job, proc = job_copy(killed_job, tmp_path)
    intact = counted_calls(processes.recover(str(proc)))
    with open(proc / "keys.jsonl", "ab") as out:
        out.write(b"[" * 100_000 + b"\n")
    [result] = processes.status(str(job))
    assert result.state == "recovered" and result.calls == intact
    assert "is nested too deeply" in result.note
    run = cli("summary", job)
    assert run.returncode == 0 and "Traceback" not in run.stderr
    assert "nested too deeply" in run.stderr


@pytest.mark.parametrize("line", [
    '{"pid": 1, "command": 5, "how": "subprocess", "child_pid": null}',
    '{"pid": 1, "command": ["a"], "how": "spawn", "child_pid": "x"}',
    '{"pid": 1, "command": ["x"], "how": 5, "child_pid": 1.5}',
    '[1, 2]', '\x00\xff garbage', '{"pid": 99999999999999999999, "command": ["x"]}'])
def test_a_garbage_launch_note_is_said_not_raised(killed_job, tmp_path, line):
    job, _ = job_copy(killed_job, tmp_path)
    for name in ("launched.jsonl", "unfollowed.jsonl"):
        with open(job / name, "w") as out:
            out.write(line + "\n")
    damaged = [c for c in processes.unfollowed(str(job)) if c.get("damaged")]
    assert sorted(c["damaged"].split()[0] for c in damaged) == ["launched.jsonl",
                                                                 "unfollowed.jsonl"]
    run = cli("merge", job, "-o", tmp_path / "m.json")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "launched.jsonl line 1" in run.stderr


def test_a_linked_process_directory_is_not_merged(killed_job, traces, tmp_path):
    job, _ = job_copy(killed_job, tmp_path)
    os.symlink(traces / "saved", job / "proc-4242")      # another trace, outside the job
    results = {r.pid: r for r in processes.status(str(job))}
    assert results[4242].state == "lost" and "symbolic link" in results[4242].note
    with pytest.warns(TraceWarning, match="symbolic link"):
        trace = read_trace(str(job))
    assert len(trace.processes or {}) <= 1 and not any(call.name.endswith(": f")
                                                       for call in trace)
    # named by the user, a link is followed
    os.symlink(traces / "saved", tmp_path / "named")
    assert len(processes.status(str(tmp_path / "named"))) == 1


# -- item 14: deep JSON, torch's JSON ------------------------------------------------

def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [40, 900])
def test_deeply_nested_key_args_are_refused_as_the_trace_is_read(traces, tmp_path, depth):
    directory = copy(traces, "saved", tmp_path)
    meta = json.loads((directory / "meta.json").read_text())
    meta["keys"][1][2] = {"deep": nested(depth)}
    (directory / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(TraceFormatError, match=rf"{directory}/meta.json: key 1 args nest"):
        pytrace_cffi.load(str(directory))
    run = cli("export", directory, "-o", tmp_path / "out.pftrace")
    assert run.returncode == 1 and "Traceback" not in run.stderr
    # and in our Chrome JSON
    pytrace_cffi.load(str(traces / "saved")).export_chrome_trace(str(tmp_path / "t.json"))
    lines = (tmp_path / "t.json").read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if '"ph":"X"' in line)
    lines[at] = lines[at].replace('"Python thread":0', '"Python thread":0,"deep":'
                                  + json.dumps(nested(depth)))
    (tmp_path / "deep.json").write_text("\n".join(lines))
    with pytest.raises(TraceFormatError, match=r"deep.json: event \d+: args nest deeper"):
        read_trace(str(tmp_path / "deep.json"))


def test_a_line_nested_beyond_the_parser_is_a_format_error(traces, tmp_path):
    pytrace_cffi.load(str(traces / "saved")).export_chrome_trace(str(tmp_path / "t.json"))
    lines = (tmp_path / "t.json").read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if '"ph":"X"' in line)
    lines[at] = lines[at].replace('"Python thread":0', '"Python thread":0,"deep":'
                                  + "[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep.json").write_text("\n".join(lines))
    with pytest.raises(TraceFormatError, match="nested too deeply"):
        read_trace(str(tmp_path / "deep.json"))


def test_a_head_nested_beyond_the_parser_is_a_format_error(traces, tmp_path):
    pytrace_cffi.load(str(traces / "saved")).export_chrome_trace(str(tmp_path / "t.json"))
    lines = (tmp_path / "t.json").read_text().split("\n")
    assert lines[0].startswith("{") and '"otherData":' in lines[0]
    lines[0] = lines[0].replace('"otherData":', '"deep":' + "[" * 100_000 + "]" * 100_000
                                + ',"otherData":', 1)
    (tmp_path / "deep.json").write_text("\n".join(lines))
    with pytest.raises(TraceFormatError, match="the head is not valid JSON .nested too deeply"):
        read_trace(str(tmp_path / "deep.json"))


@pytest.mark.parametrize("where", ["head", "call"])
def test_a_line_beyond_the_bound_is_refused_not_gathered(traces, tmp_path, monkeypatch,
                                                        where):
    """A .json.gz of kilobytes can hold a line of gigabytes (a name of "AAA..."):
    it was gathered whole (1 GB of memory for 261 kB of file). A line over
    LINE_LIMIT (64 MiB; 1 MiB here) is refused as it is read."""
    from pytrace_cffi.readers import chrome_lines
    monkeypatch.setattr(chrome_lines, "LINE_LIMIT", 1 << 20)
    pytrace_cffi.load(str(traces / "saved")).export_chrome_trace(str(tmp_path / "t.json"))
    lines = (tmp_path / "t.json").read_text().split("\n")
    at = 0 if where == "head" else next(i for i, line in enumerate(lines) if '"ph":"X"' in line)
    lines[at] = lines[at].replace('"name":"', '"name":"' + "A" * (3 << 20), 1) \
        if where == "call" else lines[at].replace("{", '{"pad":"' + "A" * (3 << 20) + '",', 1)
    with gzip.open(tmp_path / "bomb.json.gz", "wt") as f:
        f.write("\n".join(lines))
    assert (tmp_path / "bomb.json.gz").stat().st_size < 100_000
    with pytest.raises(TraceFormatError, match="a line longer than 1 MiB"):
        read_trace(str(tmp_path / "bomb.json.gz"))


def test_a_file_in_another_layout_beyond_the_bound_is_refused(traces, tmp_path, monkeypatch):
    """Another layout is parsed whole: at most WHOLE_READ_LIMIT of text (1 GiB;
    1 MiB here), decompressed, is read (a .json.gz could inflate without end)."""
    from pytrace_cffi.readers import chrome
    monkeypatch.setattr(chrome, "WHOLE_READ_LIMIT", 1 << 20)
    pytrace_cffi.load(str(traces / "saved")).export_chrome_trace(str(tmp_path / "t.json"))
    data = json.loads((tmp_path / "t.json").read_text())
    data["otherData"]["pad"] = "A" * (2 << 20)
    with gzip.open(tmp_path / "other.json.gz", "wt") as f:
        json.dump(data, f, indent=1)              # (not one event per line)
    with pytest.raises(TraceFormatError, match="over 1 MiB of JSON: too big to parse whole"):
        read_trace(str(tmp_path / "other.json.gz"))


def test_a_counter_whose_value_is_no_number_is_refused(tmp_path):
    with pytrace_cffi.trace() as t:
        pytrace_cffi.counter("c", 1)
    t.trace.export_chrome_trace(str(tmp_path / "t.json"))
    text = (tmp_path / "t.json").read_text()
    assert '"args": {"c": 1}' in text
    (tmp_path / "bad.json").write_text(text.replace('"args": {"c": 1}', '"args": {"c": "x"}'))
    with pytest.raises(TraceFormatError, match=r"bad.json: event \d+: a counter's values"):
        read_trace(str(tmp_path / "bad.json"))


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    with pytrace_cffi.trace() as t:
        f()
    return t.trace


def torch_json(trace, path, *extra):
    """A torch.profiler-shaped trace: an op on our thread, then extra events."""
    base = (trace.realtime_anchor["start"]["realtime_ns"] // 10 ** 9 - 10) * 10 ** 9
    ts = (monotonic_to_realtime(trace.realtime_anchor, trace.start_ns) - base) / 1000
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::fake", "pid": trace.pid,
          "tid": threading.get_native_id(), "ts": ts, "dur": 1.0, "args": {}}
    data = json.dumps({"baseTimeNanoseconds": base,
                       "traceEvents": [op] + [dict(op, **e) for e in extra]}).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("extra, message", [
    ({"cat": "python_function", "dur": "5"}, "event 1: a python_function event whose dur"),
    ({"pid": [1]}, "event 1: its pid is not a number or a string"),
    ({"tid": {"a": 1}}, "event 1: its tid is not a number or a string")])
def test_torch_events_that_cannot_be_placed_are_format_errors(ours, tmp_path, extra,
                                                             message):
    path = torch_json(ours, tmp_path / "torch.json", extra)
    with pytest.raises(TraceFormatError, match=f"torch trace '{path}': {message}"):
        pytrace_cffi.merge_torch(ours, str(path), str(tmp_path / "m.json"))
    assert not os.path.exists(tmp_path / "m.json")


@pytest.mark.parametrize("cut", ["short", "half", "corrupt", "not gzip"])
def test_a_damaged_torch_json_gz_is_a_format_error(ours, tmp_path, cut):
    whole = torch_json(ours, tmp_path / "whole.json.gz", *[{}] * 3000).read_bytes()
    damaged = {"short": whole[:30], "half": whole[:len(whole) // 2],
               "corrupt": whole[:40] + bytes(b ^ 0x5a for b in whole[40:60]) + whole[60:],
               "not gzip": b"hello world"}[cut]
    path = tmp_path / "torch.json.gz"
    path.write_bytes(damaged)
    ours.save(str(tmp_path / "ours"))
    with pytest.raises(TraceFormatError, match="torch.json.gz"):
        pytrace_cffi.merge_torch(ours, str(path), str(tmp_path / "m.json"))
    run = cli("merge", tmp_path / "ours", path, "-o", tmp_path / "m.json")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "torch.json.gz" in run.stderr


# -- #33 item 4: a host that is no text ---------------------------------------------

@pytest.mark.parametrize("host", [["a", "b"], {"a": 1}, 7])
@pytest.mark.parametrize("where", ["process.json", "meta.json"])
def test_a_host_that_is_no_text_is_left_out_not_raised(killed_job, traces, tmp_path,
                                                        where, host):
    if where == "process.json":
        job, proc = job_copy(killed_job, tmp_path)
    else:
        job = tmp_path / "job"
        proc = job / "proc-4243"
        shutil.copytree(traces / "saved", proc)
    facts = json.loads((proc / where).read_text())
    facts["host"] = host
    (proc / where).write_text(json.dumps(facts))
    other = job / "proc-4244"                               # a process with a true host
    shutil.copytree(traces / "saved", other)
    meta = json.loads((other / "meta.json").read_text())
    (other / "meta.json").write_text(json.dumps(dict(meta, host="vm")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)       # (the killed one's note)
        trace = read_trace(str(job))
    assert any(trace.threads)
    for args in (["summary", job], ["export", job, "-o", tmp_path / "out.json"]):
        proc_run = cli(*args)
        assert proc_run.returncode == 0 and "Traceback" not in proc_run.stderr, (
            args, proc_run.stderr)


@pytest.mark.parametrize("planted", ["live.json", "live/thread-0"])
def test_a_fifo_in_a_jobs_live_encoding_is_encoded_whole_not_waited_on(tmp_path, planted):
    """A job directory whose live.json, or a thread's live part, is a FIFO: `export`
    neither hangs on it nor copies it, and writes the trace from the whole trace
    (#33 item 3: live.json was read with plain open())."""
    prog = tmp_path / "prog.py"
    prog.write_text("import time\ndef leaf(i):\n    return i\nfor i in range(3000):\n"
                    "    leaf(i)\n    if i % 100 == 0:\n        time.sleep(0.01)\n")
    run = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--processes-dir",
                          str(tmp_path / "job"), "-o", str(tmp_path / "first.pftrace"),
                          "--max-events", "4096", "--spill", str(prog)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    [live] = (tmp_path / "job").glob("proc-*/live.json")
    assert json.loads(live.read_text())["complete"] is True     # its parts are used
    [proc] = [d for d in (tmp_path / "job").iterdir() if d.name.startswith("proc-")]
    target = proc / planted
    if target.exists():
        target.unlink()
    target.parent.mkdir(exist_ok=True)
    os.mkfifo(target)
    again = cli("export", tmp_path / "job", "-o", tmp_path / "again.pftrace", timeout=60)
    assert again.returncode == 0, again.stderr
    calls = [c for c in pytrace_cffi.load(tmp_path / "again.pftrace")
             if c.name.endswith(": leaf")]
    assert len(calls) == 3000
