"""Steps and stragglers (render/steps.py): `summary --steps` and the HTML page's
Steps table, on a real job of three ranks traced by `run`, where rank 1 spends
its step 2 in straggle(); the windowed self time (pt_summarizer_feed_windows)
against a Python oracle over the trace's Calls; and each rule that ends steps.
Expected values come from the test program (which rank, which step, which
function), never from the code under test."""
import json
import re
import subprocess
import sys
import textwrap

import pytest

import pytrace_cffi
from pytrace_cffi.follow.jobs import read_process
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render.steps import find_steps, format_steps, steps_table
from pytrace_cffi.render.summary import Summarizer
from pytrace_cffi.model.walk import batches

from test_children_run import embedded, run_cli
from test_torch_stand_in import run_workload

STEPS, RANKS, SLOW_RANK, SLOW_STEP = 4, 3, 1, 2
JOB = f"""
import os, subprocess, sys
import pytrace_cffi

def work():
    x = 0
    for i in range(200_000):
        x += i
    return x

def straggle():         # a loop without calls: its time is its own self time
    x = 0
    for i in range(4_000_000):
        x += i
    return x

def train(rank):
    for step in range(1, {STEPS} + 1):
        work()
        if rank == {SLOW_RANK} and step == {SLOW_STEP}:
            straggle()
        pytrace_cffi.step()

if len(sys.argv) > 1:
    train(int(sys.argv[1]))
else:
    children = [subprocess.Popen([sys.executable, __file__, str(rank)],
                                 env=dict(os.environ, RANK=str(rank)))
                for rank in range({RANKS})]
    assert [child.wait() for child in children] == [0] * {RANKS}
"""
STRAGGLE = "prog.py({}): straggle".format(
    1 + textwrap.dedent(JOB).splitlines().index("def straggle():         # a loop without "
                                                "calls: its time is its own self time"))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The job's directory and its trace (out.json: the root process and ranks 0-2;
    processes/: the per-process traces)."""
    where = tmp_path_factory.mktemp("steps_job")
    run_cli(where, JOB, "-o", where / "out.json", "--processes-dir", where / "processes")
    return where, read_trace(str(where / "out.json"))


def test_the_slow_rank_is_slowest_at_its_slow_step_and_straggle_differs_most(job):
    _, trace = job
    table = steps_table(trace)
    # the root process (not a rank) has no column
    assert [(c.rank, c.rule) for c in table.columns] == [(r, "marks") for r in range(RANKS)]
    assert [row.step for row in table.rows] == list(range(1, STEPS + 1))
    slow = table.rows[SLOW_STEP - 1]
    assert slow.slowest == SLOW_RANK
    others = [d for rank, d in enumerate(slow.durations) if rank != SLOW_RANK]
    assert slow.durations[SLOW_RANK] > 2 * max(others)
    assert slow.median in set(range(RANKS)) - {SLOW_RANK}
    assert table.compared == STEPS
    first = table.differences[0]
    assert first.name == STRAGGLE and first.median_ns == 0
    # straggle's time is most of the slow step's excess over the median's
    assert first.slowest_ns > 0.5 * (slow.durations[SLOW_RANK] - slow.durations[slow.median])


def test_each_rank_has_a_step_per_step_call_on_its_main_thread(job):
    _, trace = job
    found = {steps.rank: steps for steps in find_steps(trace)}
    assert sorted(found) == list(range(RANKS))
    for steps in found.values():
        assert trace.threads[steps.thread].name == "MainThread"
        assert len(steps.windows) == STEPS
        # steps follow each other: each begins where the one before ended
        assert all(a[1] == b[0] for a, b in zip(steps.windows, steps.windows[1:]))
        marks = sorted(m.ns for m in trace.marks if m.name == "pytrace_cffi.step"
                       and m.thread == trace.threads[steps.thread].native_id)
        assert [end for _, end in steps.windows] == marks


def test_summary_steps_from_the_command_line(job):
    where, _ = job
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "summary",
                           str(where / "out.json"), "--steps", "--limit", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index("steps of 3 ranks, ending at step() calls (ms):")
    assert lines[at + 1].split() == ["step", "rank", "0", "rank", "1", "rank", "2",
                                     "slowest", "median"]
    step_two = lines[at + 3 + SLOW_STEP - 1].split()
    assert step_two[0] == str(SLOW_STEP) and step_two[4:6] == ["rank", str(SLOW_RANK)]
    header = next(i for i in range(at, len(lines))
                  if lines[i].split() == ["difference", "slowest", "median", "function"])
    first = lines[header + 2].split()
    assert first[0].startswith("+") and first[-2:] == STRAGGLE.split()


def test_the_page_holds_the_steps_table(job):
    where, _ = job
    out = where / "out.html"
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "export",
                           str(where / "out.json"), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    steps = embedded(out.read_text(encoding="utf-8"), "pt-meta")["steps"]
    assert steps["columns"] == ["rank 0", "rank 1", "rank 2"]
    assert steps["rule"] == "step() calls" and steps["compared"] == STEPS
    assert [row[0] for row in steps["rows"]] == list(range(1, STEPS + 1))
    assert steps["rows"][SLOW_STEP - 1][2] == SLOW_RANK
    name, slowest_ns, median_ns = steps["differences"][0]
    assert name == STRAGGLE and slowest_ns > median_ns == 0


def test_steps_of_a_dump_directory(job):
    """A DUMPDIR as the flight recorder writes one (proc-<pid>/: a saved trace and a
    dump.json), here made of the job's per-process traces, reads as a job."""
    where, _ = job
    dumps = where / "dumps" / "20260101-000000-SIGUSR1"
    for process_dir in sorted((where / "processes").glob("proc-*")):
        trace, facts, _, _ = read_process(str(process_dir))
        trace.save(str(dumps / process_dir.name))
        (dumps / process_dir.name / "dump.json").write_text(json.dumps({
            "version": 1, "reason": "SIGUSR1", "pid": trace.pid, "label": facts["label"],
            "rank": facts.get("rank"), "monotonic_ns": trace.stop_ns, "threads": []}))
    table = steps_table(read_trace(str(dumps)))
    assert [c.rank for c in table.columns] == list(range(RANKS))
    assert table.rows[SLOW_STEP - 1].slowest == SLOW_RANK
    assert table.differences[0].name == STRAGGLE


def _clipped_self_oracle(trace, thread_index, windows):
    """Per window, name -> self time within it: each call's time in the window
    less its direct callees' time in it, from the trace's Calls."""
    tid = trace.threads[thread_index].native_id
    calls = [c for c in trace if c.thread == tid]
    by_id = {c.id: c for c in calls}
    tables = [{} for _ in windows]
    for call in calls:
        for table, (low, high) in zip(tables, windows):
            inside = max(0, min(call.end_ns, high) - max(call.start_ns, low))
            if not inside:
                continue
            table[call.name] = table.get(call.name, 0) + inside
            if call.parent is not None:
                parent = by_id[call.parent].name
                table[parent] = table.get(parent, 0) - inside
    return [{name: ns for name, ns in table.items() if ns} for table in tables]


def test_windowed_self_time_matches_an_oracle_over_the_calls(job):
    _, trace = job
    steps = next(s for s in find_steps(trace) if s.rank == SLOW_RANK)
    # the steps, and windows cutting through calls: each its own group
    start, end = steps.windows[0][0], steps.windows[-1][1]
    cuts = [start + (end - start) * k // 7 for k in range(8)]
    for windows in (steps.windows, list(zip(cuts, cuts[1:]))):
        summarizer = Summarizer(trace.names)
        n = summarizer.n_names
        from pytrace_cffi._core import ffi
        table = ffi.new("int64_t[]", n * len(windows))
        bounds = ffi.new("int64_t[]", [ns for window in windows for ns in window])
        groups = ffi.new("uint32_t[]", list(range(len(windows))))
        for slices, count, first in batches(trace, steps.thread):
            summarizer.add_windows(trace.threads[steps.thread], slices, count, first,
                                   bounds, groups, len(windows), table)
        summarizer.end_thread()
        ours = [{summarizer.unique_names[i]: table[g * n + i] for i in range(n)
                 if table[g * n + i]} for g in range(len(windows))]
        assert ours == _clipped_self_oracle(trace, steps.thread, windows)


def test_a_trace_of_one_process_has_one_column_and_no_comparison():
    with pytrace_cffi.trace() as t:
        for _ in range(3):
            sorted(range(1000))
            pytrace_cffi.step()
    table = steps_table(t.trace)
    assert len(table.columns) == 1 and len(table.rows) == 3 and table.compared == 0
    assert table.differences == []
    text = format_steps(table).splitlines()
    assert text[0] == "steps of 1 process, ending at step() calls (ms):"
    assert [line.split()[0] for line in text[3:]] == ["1", "2", "3"]
    assert "median" not in "\n".join(text)


def test_no_steps_is_said():
    with pytrace_cffi.trace() as t:
        sorted(range(10))
    assert steps_table(t.trace) is None
    assert format_steps(None).startswith("steps: none found")


def test_profiler_step_regions_end_steps_unless_step_is_called():
    def loop(call_step):
        with pytrace_cffi.trace() as t:
            sorted(range(10))                     # before the first region
            for i in range(3):
                with pytrace_cffi.record_function(f"ProfilerStep#{i + 5}"):
                    sorted(range(1000))
                    if call_step:
                        pytrace_cffi.step()
        return t.trace

    trace = loop(call_step=False)
    [steps] = find_steps(trace)
    regions = sorted((c.start_ns, c.end_ns) for c in trace
                     if re.fullmatch(r"ProfilerStep#\d+", c.name))
    assert steps.rule == "profiler" and len(regions) == 3
    assert steps.windows == [(regions[0][0], regions[0][1]), (regions[0][1], regions[1][1]),
                             (regions[1][1], regions[2][1])]
    [steps] = find_steps(loop(call_step=True))
    assert steps.rule == "marks" and len(steps.windows) == 3


def test_optimizer_steps_end_steps_of_the_first_class_seen(tmp_path):
    """The stand-in torch's two optimizers (SGD, then Adam) step twice: two steps,
    each ending with SGD's step."""
    calls, _, _ = run_workload(tmp_path)
    trace = read_trace(str(tmp_path / "trace.json"))
    [steps] = find_steps(trace)
    sgd_ends = sorted(c["end_ns"] for c in calls if c["name"] == "Optimizer.step#SGD.step")
    assert steps.rule == "optimizer" and len(sgd_ends) == 2
    assert [end for _, end in steps.windows] == sgd_ends
    first_call = min(c["start_ns"] for c in calls
                     if c["thread"] == trace.threads[steps.thread].native_id)
    assert steps.windows[0][0] == first_call
    assert format_steps(steps_table(trace)).splitlines()[0] == (
        "steps of 1 process, ending at optimizer steps (ms):")


def test_summary_without_steps_prints_no_steps(tmp_path):
    with pytrace_cffi.trace() as t:
        pytrace_cffi.step()
    t.trace.export_chrome_trace(str(tmp_path / "t.json"))
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "summary",
                           str(tmp_path / "t.json")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "steps of" not in proc.stdout
    assert "steps: none" not in proc.stdout
    data = json.loads((tmp_path / "t.json").read_text())
    assert [e["name"] for e in data["traceEvents"] if e.get("ph") == "i"] == \
        ["pytrace_cffi.step"]
