"""The flame-graph outputs: collapsed stacks (.folded, .collapsed), speedscope
(.speedscope.json) and pprof (.pprof, .pb.gz).

A small program with a known call structure (main calls f twice, f calls spin
and g, g calls spin; a thread "worker" runs g) is traced by `run`; what each
output says is held to literals from that structure, and its times to an
aggregation per stack written here in plain Python over the slice table (calls
less frames open at start; self time less direct callees). Every source `export`
reads (a saved directory, .json, .json.gz, .pftrace, a job of two processes)
gives the same output, and so does the API.
"""
import json
import re
import shutil
import subprocess
import sys
from collections import defaultdict

import pytest

import pytrace_cffi
from pytrace_cffi import formats
from pytrace_cffi._core import lib
from pytrace_cffi.render.folded import frame_text

from flame_decoding import decode_pprof, evented_errors, schema_errors
from helpers import missing_tool

TIMEOUT = 120
PROGRAM = """\
import threading
import time


def spin(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def g():
    spin(2)


def f():
    spin(1)
    g()


def main():
    f()
    f()
    worker = threading.Thread(target=g, name="worker")
    worker.start()
    worker.join()


main()
"""


def _name(function):
    """A function of PROGRAM as traces name it, its line found here."""
    line = PROGRAM.splitlines().index(f"def {function}({'ms' if function == 'spin' else ''}):")
    return f"prog.py({line + 1}): {function}"


MODULE, MAIN, F, G, SPIN = ("prog.py(1): <module>", _name("main"), _name("f"), _name("g"),
                            _name("spin"))


def cli(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """(directory holding prog.py, its saved trace "saved")."""
    where = tmp_path_factory.mktemp("flame")
    (where / "prog.py").write_text(PROGRAM)
    cli("run", "--no-c-calls", "-o", "saved", "prog.py", cwd=where)
    return where, where / "saved"


def expected_stacks(trace):
    """{(thread name, function names...): [calls, self ns]}, from the slice table:
    a frame open at start adds time but no call, a call's self time is its time
    less its direct callees'."""
    stacks = defaultdict(lambda: [0, 0])
    for thread, slices, n in trace.thread_slices():
        paths = []
        for i in range(n):
            s = slices[i]
            parent = paths[s.parent] if s.parent >= 0 else (thread.name,)
            paths.append(parent + (trace.names[s.key],))
            stacks[paths[-1]][0] += not s.flags & lib.PT_SLICE_SEEDED
            stacks[paths[-1]][1] += s.end - s.start
            if s.parent >= 0:
                stacks[parent][1] -= s.end - s.start
    return stacks


def expected_folded(trace):
    """{stack text: count}: self time rounded half up to whole microseconds, 0 left out."""
    lines = {}
    for path, (_, self_ns) in expected_stacks(trace).items():
        micros = (self_ns + 500) // 1000
        if micros:
            lines[";".join(path)] = micros
    return lines


def parse_folded(text):
    assert text.endswith("\n")
    lines = {}
    for line in text.splitlines():
        stack, count = re.fullmatch(r"(.+) (\d+)", line).groups()
        assert stack not in lines, f"{stack!r} twice"
        lines[stack] = int(count)
    return lines


def ending_in(lines, *frames):
    """The entries of lines (stack text -> value) whose stack ends in frames."""
    tail = ";" + ";".join(frames)
    return {stack: value for stack, value in lines.items() if stack.endswith(tail)}


# --- collapsed stacks ---------------------------------------------------------

@pytest.mark.parametrize("suffix", [".folded", ".collapsed", ".FOLDED"])
def test_folded_lines_are_the_stacks_with_their_self_time(traced, suffix):
    where, saved = traced
    cli("export", saved, "-o", f"out{suffix}", cwd=where)
    lines = parse_folded((where / f"out{suffix}").read_text(encoding="utf-8"))
    trace = pytrace_cffi.load(str(saved))
    assert lines == expected_folded(trace)
    main_stack = f"MainThread;{MODULE};{MAIN}"
    # f twice spinning 1 ms, g twice spinning 2 ms: at least that much self time
    assert lines[f"{main_stack};{F};{SPIN}"] >= 2000
    assert lines[f"{main_stack};{F};{G};{SPIN}"] >= 4000
    worker = ending_in(lines, G, SPIN)
    del worker[f"{main_stack};{F};{G};{SPIN}"]
    (stack, micros), = worker.items()
    assert stack.startswith("worker;") and micros >= 2000
    # the counts add up to the threads' root calls' time, within half a
    # microsecond per line left out or rounded
    total_ns = sum(s.end - s.start for _, slices, n in trace.thread_slices()
                   for s in (slices[i] for i in range(n)) if s.parent < 0)
    assert abs(sum(lines.values()) * 1000 - total_ns) <= 500 * len(expected_stacks(trace))


def test_folded_frames_keep_the_format_readable():
    assert frame_text("a;b") == "a,b"
    assert frame_text("two\nlines\r\tend") == "two lines  end"
    assert frame_text("step 3") == "step_3"           # not a second count
    assert frame_text("step\t42") == "step_42"
    assert frame_text("f(3): g") == "f(3): g"
    assert frame_text("3") == "3"
    assert frame_text("") == "?"
    assert frame_text("bad \udcff") == "bad \ufffd"


def test_folded_region_names_are_made_safe(tmp_path):
    def work():
        with pytrace_cffi.record_function("load;batch\n7"):
            sum(range(20000))       # (not traced: c_calls=False) time enough for a line
    with pytrace_cffi.trace(c_calls=False) as t:
        work()
    t.export(str(tmp_path / "t.folded"))
    stacks = [line.rsplit(" ", 1)[0] for line in
              (tmp_path / "t.folded").read_text(encoding="utf-8").splitlines()]
    region = [stack for stack in stacks if stack.endswith("load,batch_7")]
    assert len(region) == 1 and region[0].startswith("MainThread;"), stacks


# --- speedscope ---------------------------------------------------------------

def load_speedscope(path):
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    assert schema_errors(document) == []
    return document


def test_speedscope_profiles_are_valid_nested_and_named(traced):
    where, saved = traced
    cli("export", saved, "-o", "out.speedscope.json", cwd=where)
    assert formats.find("out.speedscope.json").name == "speedscope"     # not .json
    document = load_speedscope(where / "out.speedscope.json")
    assert document["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert document["name"] == "prog.py"
    frames = document["shared"]["frames"]
    names = [frame["name"] for frame in frames]
    for function in (MAIN, F, G, SPIN):
        frame = frames[names.index(function)]
        assert (frame["file"], frame["line"]) == ("prog.py", int(function[8:].split(")")[0]))
    trace = pytrace_cffi.load(str(saved))
    profiles = document["profiles"]
    assert [p["name"] for p in profiles] == ["MainThread", "worker"]
    calls = defaultdict(int)
    for profile, thread in zip(profiles, trace.threads):
        assert profile["unit"] == "nanoseconds" and profile["type"] == "evented"
        assert evented_errors(profile, len(frames)) == []
        assert profile["startValue"] == 0
        assert profile["endValue"] == trace.stop_ns - trace.start_ns
        opened = [e for e in profile["events"] if e["type"] == "O"]
        assert len(opened) == sum(n for t, n, _, _ in trace.thread_counts() if t == thread)
        for event in opened:
            calls[profile["name"], names[event["frame"]]] += 1
    assert calls["MainThread", F] == 2 and calls["MainThread", G] == 2
    assert calls["MainThread", SPIN] == 4 and calls["MainThread", MAIN] == 1
    assert calls["worker", G] == 1 and calls["worker", SPIN] == 1
    assert ("worker", F) not in calls


def _stopped_inside(t_path):
    def inner():
        return pytrace_cffi.stop()

    def outer():
        return inner()
    pytrace_cffi.start(c_calls=False)
    trace = outer()
    trace.export(t_path)
    return trace, outer.__code__.co_firstlineno


def test_speedscope_closes_the_calls_open_at_stop_at_its_end(tmp_path):
    path = str(tmp_path / "t.speedscope.json")
    trace, _ = _stopped_inside(path)
    document = load_speedscope(path)
    (profile,) = document["profiles"]
    assert evented_errors(profile, len(document["shared"]["frames"])) == []
    names = [frame["name"] for frame in document["shared"]["frames"]]
    closes = [e for e in profile["events"] if e["type"] == "C"]
    end = trace.stop_ns - trace.start_ns
    # outer and inner are open at stop (and the test's frames, open at start too)
    closed_at_end = {names[e["frame"]].rsplit(": ", 1)[-1] for e in closes if e["at"] == end}
    assert {"outer", "inner"} <= closed_at_end
    assert profile["endValue"] == end


# --- pprof --------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".pprof", ".pb.gz"])
def test_pprof_samples_are_the_stacks_with_calls_and_self_time(traced, suffix):
    where, saved = traced
    cli("export", saved, "-o", f"out{suffix}", cwd=where)
    with open(where / f"out{suffix}", "rb") as f:
        assert f.read(2) == b"\x1f\x8b"         # gzip, as pprof writes it
    profile = decode_pprof(where / f"out{suffix}")
    assert profile.string_table[0] == ""
    assert profile.sample_types == [("calls", "count"), ("wall", "nanoseconds")]
    assert profile.period_type == ("wall", "nanoseconds")
    assert profile.default_sample_type == "wall"
    trace = pytrace_cffi.load(str(saved))
    assert profile.duration_nanos == trace.stop_ns - trace.start_ns
    anchor = trace.realtime_anchor["start"]
    assert profile.time_nanos == anchor["realtime_ns"] + trace.start_ns - anchor["monotonic_ns"]
    samples = {(labels["thread"],) + stack: values
               for stack, values, labels in profile.samples}
    assert len(samples) == len(profile.samples)         # one per distinct stack
    expected = {path: values for path, values in expected_stacks(trace).items() if any(values)}
    assert samples == expected
    main_stack = ("MainThread", MODULE, MAIN)
    assert samples[main_stack + (F,)][0] == 2
    assert samples[main_stack + (F, G)][0] == 2
    assert samples[main_stack + (F, SPIN)][0] == 2
    assert samples[main_stack + (F, G, SPIN)][0] == 2
    assert samples[main_stack][0] == 1
    assert [values[0] for stack, values in samples.items()
            if stack[0] == "worker" and stack[-1] == G] == [1]
    functions = {function.name: function for function in profile.functions}
    assert (functions[G].filename, functions[G].start_line) == ("prog.py",
                                                                int(G[8:].split(")")[0]))


def test_go_tool_pprof_reads_it(traced):
    go = shutil.which("go")
    if go is None:
        missing_tool("go", "Debian: apt-get install golang-go; .ci/run installs it")
    where, saved = traced
    cli("export", saved, "-o", "go.pb.gz", cwd=where)
    proc = subprocess.run([go, "tool", "pprof", "-top", "-sample_index=calls", "go.pb.gz"],
                          cwd=where, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    flat = {}
    for line in proc.stdout.splitlines():
        found = re.fullmatch(r"\s*(\d+)\s+\S+%\s+\S+%\s+\d+\s+\S+%\s+(.+)", line)
        if found:
            flat[found.group(2)] = int(found.group(1))
    assert flat[F] == 2 and flat[G] == 3 and flat[SPIN] == 5 and flat[MAIN] == 1, proc.stdout
    assert "Type: calls" in proc.stdout and "File: prog.py" in proc.stdout


# --- every source, the API, a job -----------------------------------------------

OUTPUTS = ("out.folded", "out.speedscope.json", "out.pb.gz")


def _comparable(path):
    """What an output says, independent of frame order: folded lines, speedscope
    events by frame name, pprof samples."""
    if path.endswith(".folded"):
        return parse_folded(open(path, encoding="utf-8").read())
    if path.endswith(".speedscope.json"):
        document = load_speedscope(path)
        names = [frame["name"] for frame in document["shared"]["frames"]]
        return [(p["name"], p["startValue"], p["endValue"],
                 [(e["type"], names[e["frame"]], e["at"]) for e in p["events"]])
                for p in document["profiles"]]
    return sorted((stack, tuple(values), sorted(labels.items()))
                  for stack, values, labels in decode_pprof(path).samples)


def test_every_source_gives_the_same_outputs(traced, tmp_path):
    where, saved = traced
    sources = {"saved": saved}
    for name in ("t.json", "t.json.gz", "t.pftrace"):
        cli("export", saved, "-o", tmp_path / name, cwd=where)
        sources[name] = tmp_path / name
    for output in OUTPUTS:
        cli("export", saved, "-o", tmp_path / output, cwd=where)
        reference = _comparable(str(tmp_path / output))
        for name, source in sources.items():
            written = tmp_path / f"{name}-{output}"
            cli("export", source, "-o", written, cwd=where)
            assert _comparable(str(written)) == reference, (name, output)
        # the API: a loaded trace's export, by the name
        assert pytrace_cffi.load(str(saved)).export(str(tmp_path / f"api-{output}")) \
            == str(tmp_path / f"api-{output}")
        assert _comparable(str(tmp_path / f"api-{output}")) == reference


def test_a_trace_in_memory_streams_the_same_outputs(tmp_path):
    """A stopped session's trace exports from its events (no slice table built)
    and says what the same trace saved and loaded says."""
    def leaf():
        return 1

    def work():
        return sum(leaf() for _ in range(1000))
    with pytrace_cffi.trace(c_calls=False) as t:
        work()
    trace = t.trace
    for output in OUTPUTS:
        trace.export(str(tmp_path / output))
    assert not trace.slices_built()
    trace.save(str(tmp_path / "saved"))
    for output in OUTPUTS:
        loaded = str(tmp_path / f"loaded-{output}")
        pytrace_cffi.load(str(tmp_path / "saved")).export(loaded)
        assert _comparable(loaded) == _comparable(str(tmp_path / output))
    lines = parse_folded((tmp_path / "out.folded").read_text(encoding="utf-8"))
    assert lines == expected_folded(trace)


CHILD_PROGRAM = """\
import subprocess
import sys


def parent_work():
    subprocess.run([sys.executable, "-c",
                    "def child_work(): return sum(range(100000))\\nchild_work()"], check=True)


parent_work()
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A directory where `run` wrote a job of two processes to out.folded, and
    `export` of the processes it kept to the other outputs."""
    where = tmp_path_factory.mktemp("flame_job")
    (where / "parent.py").write_text(CHILD_PROGRAM)
    cli("run", "--no-c-calls", "--processes-dir", "procs", "-o", OUTPUTS[0], "parent.py",
        cwd=where)
    for output in OUTPUTS[1:]:
        cli("export", "procs", "-o", output, cwd=where)
    return where


def test_a_jobs_outputs_keep_its_processes_apart(job):
    lines = parse_folded((job / "out.folded").read_text(encoding="utf-8"))
    parent = [stack for stack in lines if "parent.py(5): parent_work" in stack]
    child = [stack for stack in lines if stack.endswith(": child_work")]
    assert parent and len(child) == 1
    parent_title, child_title = parent[0].split(";")[0], child[0].split(";")[0]
    assert re.fullmatch(r"parent\.py \(pid \d+\)", parent_title)
    assert child_title != parent_title and "(pid " in child_title
    assert all(stack.split(";")[1] == "MainThread" for stack in lines)
    names = [p["name"] for p in load_speedscope(job / "out.speedscope.json")["profiles"]]
    assert f"{parent_title} / MainThread" in names and f"{child_title} / MainThread" in names
    samples = decode_pprof(job / "out.pb.gz").samples
    (child_sample,) = [s for s in samples if s[0][-1].endswith(": child_work")]
    assert child_sample[1][0] == 1
    assert child_sample[2] == {"process": child_title, "thread": "MainThread"}


def test_threads_of_one_name_stay_apart(tmp_path):
    import threading

    def run_in_threads():
        threads = [threading.Thread(target=sorted, args=([3, 1],), name="twin")
                   for _ in range(2)]
        for thread in threads:
            thread.start()
            thread.join()
    with pytrace_cffi.trace() as t:
        run_in_threads()
    t.export(str(tmp_path / "t.folded"))
    roots = {line.split(";")[0] for line in
             (tmp_path / "t.folded").read_text(encoding="utf-8").splitlines()}
    assert {"twin", "twin #2"} <= roots
    t.export(str(tmp_path / "t.speedscope.json"))
    names = [p["name"] for p in load_speedscope(str(tmp_path / "t.speedscope.json"))["profiles"]]
    assert names.count("twin") == 1 and names.count("twin #2") == 1


def test_speedscope_starts_at_a_call_begun_before_the_traces_start(tmp_path):
    """A call that began before the trace's start (here a Chrome JSON whose outer
    call is moved 2 ms before it, as a job's process running before it joined the
    timeline) opens at a negative time, and startValue is that time, not 0: speedscope
    refuses an event before startValue (#31)."""
    def work():
        return sorted([2, 1])
    with pytrace_cffi.trace(c_calls=False) as t:
        work()
    t.export(str(tmp_path / "t.json"))
    with open(tmp_path / "t.json", encoding="utf-8") as f:
        document = json.load(f)
    (root,) = [e for e in document["traceEvents"]
               if e.get("ph") == "X" and e["args"]["Python parent id"] is None]
    root["ts"], root["dur"] = -2000.0, root["dur"] + 2000.0
    with open(tmp_path / "early.json", "w", encoding="utf-8") as f:
        json.dump(document, f)
    pytrace_cffi.load(str(tmp_path / "early.json")).export(str(tmp_path / "e.speedscope.json"))
    speedscope = load_speedscope(str(tmp_path / "e.speedscope.json"))
    (profile,) = [p for p in speedscope["profiles"] if p["name"] == "MainThread"]
    assert profile["events"][0] == {"type": "O", "frame": profile["events"][0]["frame"],
                                    "at": -2_000_000}
    assert profile["startValue"] == -2_000_000
    assert evented_errors(profile, len(speedscope["shared"]["frames"])) == []


def _recurse(n):
    if n:
        return _recurse(n - 1)
    end = __import__("time").perf_counter() + 0.002      # self time enough for a line
    while __import__("time").perf_counter() < end:
        pass


def test_a_stack_deeper_than_64_frames_keeps_every_frame(tmp_path):
    """_recurse(100) is 101 nested calls: the deepest collapsed stack holds all
    101 (a stack kept its first 64 levels only, the deeper ones
    merged into their parent, and passed every test of shallow programs) (#31)."""
    with pytrace_cffi.trace(c_calls=False) as t:
        _recurse(100)
    t.export(str(tmp_path / "t.folded"))
    name = f"test_flame_outputs.py({_recurse.__code__.co_firstlineno}): _recurse"
    lines = parse_folded((tmp_path / "t.folded").read_text(encoding="utf-8"))
    deepest = max(lines, key=lambda stack: stack.count(";"))
    frames = deepest.split(";")
    assert frames[-101:] == [name] * 101 and frames[-102] != name, deepest
