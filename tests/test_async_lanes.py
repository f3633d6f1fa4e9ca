"""asyncio tasks on lanes of their own (log_async): each task's steps on a
thread named "task <name>", the loop's thread keeping the loop. The expected
steps are the program's: a worker that awaits twice runs in three steps."""
import asyncio
import asyncio.events
import json
import os
import subprocess
import sys
import threading
import textwrap

import pytest

import pytrace_cffi
from pytrace_cffi import _tasks

WORKER_AWAITS = 2


async def worker(n):
    for _ in range(WORKER_AWAITS):
        await asyncio.sleep(0)
    return n


async def two_named_tasks():
    alpha = asyncio.create_task(worker(1), name="alpha")
    beta = asyncio.create_task(worker(2), name="beta")
    return await asyncio.gather(alpha, beta)


def roots_by_thread(trace):
    """thread name -> the names of its top-level calls, in order."""
    names = {t.native_id: t.name for t in trace.threads}
    roots = {}
    for call in trace:
        if call.parent is None:
            roots.setdefault(names[call.thread], []).append(call.name.rsplit(": ", 1)[-1])
    return roots


def test_each_task_steps_on_its_own_lane():
    original = asyncio.events.Handle.__dict__["_run"]
    pytrace_cffi.start(log_async=True)
    assert asyncio.run(two_named_tasks()) == [1, 2]
    trace = pytrace_cffi.stop()
    assert asyncio.events.Handle.__dict__["_run"] is original
    roots = roots_by_thread(trace)
    main = threading.current_thread().name
    for lane in ("task alpha", "task beta"):
        steps = [name for name in roots[lane] if name == "worker"]
        assert len(steps) == WORKER_AWAITS + 1
        # each step is the coroutine resumed, then what Task.__step did after it
        # (scheduling the next step or the done callbacks): nothing of the loop's
        assert set(roots[lane]) <= {"worker", "call_soon"}
    assert "task two_named_tasks" not in roots         # tasks are named by get_name()
    assert any(name.startswith("task Task-") for name in roots)    # asyncio.run's main
    by_id = {call.id: call for call in trace}
    on_main = [call for call in trace if trace.threads[0].native_id == call.thread]
    assert not any(call.name.endswith(": worker") for call in on_main)
    # the loop's thread keeps the loop, each step's place a Context.run without it
    runs = [call for call in on_main if call.name.endswith("Context.run")]
    assert runs and all(by_id[call.parent].name.endswith(": _run") for call in runs)
    assert [t.name for t in trace.threads][0] == main
    assert not any("pytrace_cffi/_tasks.py" in call.name for call in trace)
    lanes = [t for t in trace.threads if t.name.startswith("task ")]
    assert len({t.native_id for t in lanes}) == len(lanes)
    assert all(t.native_id >= 1 << 30 for t in lanes)      # never an OS thread's id


def loop_calls(trace):
    """The names of what the loop's _run_once called, on the tracing thread."""
    by_id = {call.id: call for call in trace}
    main = trace.threads[0].native_id
    return {call.name for call in trace if call.thread == main and call.parent is not None
            and by_id[call.parent].name.endswith(": _run_once")}


def test_the_loops_thread_shows_what_it_showed_without_lanes():
    traces = []
    for log_async in (False, True):
        pytrace_cffi.start(log_async=log_async)
        asyncio.run(two_named_tasks())
        traces.append(pytrace_cffi.stop())
    without, with_lanes = map(loop_calls, traces)
    assert any(name.endswith(": _run") for name in without)
    assert with_lanes == without


def test_off_leaves_steps_on_the_loops_thread():
    original = asyncio.events.Handle.__dict__["_run"]
    pytrace_cffi.start()
    assert asyncio.events.Handle.__dict__["_run"] is original
    asyncio.run(two_named_tasks())
    trace = pytrace_cffi.stop()
    assert len(trace.threads) == 1
    workers = [call for call in trace if call.name.endswith(": worker")]
    assert len(workers) == 2 * (WORKER_AWAITS + 1)


def test_stop_inside_a_task_closes_its_lane_without_a_lost_hook(recwarn):
    async def main():
        pytrace_cffi.start(log_async=True)
        await asyncio.create_task(worker(0), name="inner")
        await asyncio.sleep(0)
        return pytrace_cffi.stop()

    trace = asyncio.run(main())
    assert not [w for w in recwarn if issubclass(w.category, pytrace_cffi.TraceWarning)]
    assert not trace.hook_lost
    roots = roots_by_thread(trace)
    assert roots["task inner"].count("worker") == WORKER_AWAITS + 1
    # main's first step was running when tracing started: it stays on the loop's
    # thread; its later steps, the one that stopped tracing included, on its lane
    (main_lane,) = [name for name in roots if name.startswith("task Task-")]
    assert roots[main_lane].count("main") >= 1


def test_past_the_lane_limit_tasks_stay_on_the_loops_thread(monkeypatch):
    monkeypatch.setattr(_tasks, "MAX_LANES", 2)

    async def many():
        return await asyncio.gather(*(asyncio.create_task(worker(n), name=f"w{n}")
                                      for n in range(4)))

    pytrace_cffi.start(log_async=True)
    asyncio.run(many())
    trace = pytrace_cffi.stop()
    lanes = [t.name for t in trace.threads if t.name.startswith("task ")]
    assert len(lanes) == 2
    workers = [call for call in trace if call.name.endswith(": worker")]
    assert len(workers) == 4 * (WORKER_AWAITS + 1)       # none lost


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_lanes_are_threads_in_the_files(tmp_path, suffix):
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent("""
        import asyncio

        async def worker(n):
            for _ in range(2):
                await asyncio.sleep(0)

        async def main():
            await asyncio.gather(asyncio.create_task(worker(1), name="alpha"),
                                 asyncio.create_task(worker(2), name="beta"))

        asyncio.run(main())
    """))
    out = tmp_path / f"t{suffix}"
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--log-async",
                           "-o", str(out), str(program)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    from pytrace_cffi import summary
    trace = summary.read_trace(str(out))
    names = {t.native_id: t.name for t in trace.threads}
    steps = {}
    for call in trace:
        if call.name.endswith(": worker"):
            steps.setdefault(names[call.thread], 0)
            steps[names[call.thread]] += 1
    assert steps == {"task alpha": 3, "task beta": 3}
    if suffix == ".json":
        with open(out, encoding="utf-8") as f:
            events = json.load(f)["traceEvents"]
        named = {e["tid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "thread_name"}
        assert {"task alpha", "task beta"} <= set(named.values())
        assert all(e["tid"] in named for e in events if e["ph"] == "X")
    assert os.path.getsize(out) > 0
