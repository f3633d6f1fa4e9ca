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


async def renames_itself():
    await asyncio.sleep(0)
    asyncio.current_task().set_name("renamed")
    await asyncio.sleep(0)


async def a_task_renamed_after_its_first_step(kept):
    task = asyncio.create_task(renames_itself(), name="first")
    kept.append(task)
    await task


def test_a_task_renamed_after_its_first_step_names_its_lane_by_its_last_name():
    """The task steps once as "first", then renames itself: its lane (one lane, the
    task still there at stop) is "task renamed" (a lane kept the name of the task's
    first step, and no test renamed a task) (#31)."""
    kept = []
    pytrace_cffi.start(log_async=True)
    asyncio.run(a_task_renamed_after_its_first_step(kept))
    trace = pytrace_cffi.stop()
    roots = roots_by_thread(trace)
    assert [name for name in roots["task renamed"] if name == "renames_itself"] == \
        ["renames_itself"] * 3
    assert "task first" not in roots
    assert kept[0].get_name() == "renamed"


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


# Many tasks (#34 item 3): the program counts the tasks it ran (asyncio.run's main
# one, those it gathers, and asyncio.run's own at its end through the task
# factory), each of which steps on a lane of its own.
MANY_TASKS = 300
MANY_TASKS_PROGRAM = f"""
import asyncio

created = 1             # asyncio.run's main task, made before the factory is set

def counting_factory(loop, coro, **kwargs):
    global created
    created += 1
    return asyncio.Task(coro, loop=loop, **kwargs)

def add(a, b):
    return a + b

async def worker(n):
    for _ in range(3):
        add(n, 1)
        await asyncio.sleep(0)

async def main():
    asyncio.get_running_loop().set_task_factory(counting_factory)
    await asyncio.gather(*[asyncio.create_task(worker(i)) for i in range({MANY_TASKS})])

asyncio.run(main())
print("TASKS", created)
"""


def test_task_lanes_are_counted_apart_from_threads(tmp_path):
    """run's last line and summary's header say the lanes as what they are."""
    program = tmp_path / "prog.py"
    program.write_text(MANY_TASKS_PROGRAM)
    out = tmp_path / "t.pftrace"
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--log-async",
                           "-o", str(out), str(program)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    tasks = int(proc.stdout.split("TASKS ")[1])
    assert tasks > MANY_TASKS
    lanes = f" calls on 1 thread and {tasks} async task lanes -> "
    assert lanes in proc.stderr, proc.stderr
    summary = subprocess.run([sys.executable, "-m", "pytrace_cffi", "summary", str(out)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr
    assert f" calls on 1 thread and {tasks} async task lanes, " in summary.stdout.splitlines()[0]
    export = subprocess.run([sys.executable, "-m", "pytrace_cffi", "export", str(out), "-o",
                             str(tmp_path / "t.html")], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    assert lanes.rstrip("-> ") in export.stderr


def test_a_pftrace_of_many_lanes_is_exported_inflating_each_packet_a_few_times(
        tmp_path, monkeypatch):
    """A .pftrace's compressed packets each hold many small lanes: reading a lane
    again (each export reads every thread twice, the page's survey and its calls)
    must not inflate its packet from the start each time (an HTML page of a
    thousand tasks took 11 s). Counted in inflated bytes: a whole pass inflates
    the file once."""
    from pytrace_cffi.formats import read
    from pytrace_cffi.readers import pftrace_packets
    from pytrace_cffi.render.summary import calls_begun
    from pytrace_cffi.render.html import write_html
    namespace = {}
    exec(MANY_TASKS_PROGRAM.rsplit("\nasyncio.run(", 1)[0], namespace)     # its definitions
    pytrace_cffi.start(log_async=True)
    try:
        asyncio.run(namespace["main"]())
    finally:
        trace = pytrace_cffi.stop()
    assert sum(t.name.startswith("task ") for t in trace.threads) > MANY_TASKS
    trace.export_perfetto(tmp_path / "t.pftrace")
    inflated = [0]
    take = pftrace_packets._Inflated._take

    def counted_take(self, block):
        inflated[0] += len(block)
        return take(self, block)

    monkeypatch.setattr(pftrace_packets._Inflated, "_take", counted_take)
    back = read(tmp_path / "t.pftrace")
    once = inflated[0]
    assert once > 0
    inflated[0] = 0
    write_html(back, tmp_path / "t.html")
    # two reads of every thread, each two passes (durations, then calls)
    assert inflated[0] <= 4 * once + 4 * pftrace_packets.BLOCK_BYTES, (inflated[0], once)
    inflated[0] = 0
    assert calls_begun(back) == calls_begun(trace)
    assert inflated[0] == 0                 # counted while the page read every call


# A process where asyncio is first imported while tracing, or only after it.
LEAVES_NOTHING = """
import sys
import pytrace_cffi
from pytrace_cffi import _tasks
assert "asyncio" not in sys.modules
before = list(sys.meta_path)
pytrace_cffi.start(log_async=True)
if sys.argv[1] == "during":
    import asyncio
pytrace_cffi.stop()
print("meta_path as before:", sys.meta_path == before)
import asyncio, asyncio.events, importlib.util
spec = asyncio.events.__spec__          # a second copy through its loader, not tracing
copy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(copy)
print("Handle._run ours:", any(events.Handle.__dict__["_run"] is _tasks.run_task_step
                               for events in (asyncio.events, copy)))
"""


@pytest.mark.parametrize("imported", ["during", "after"])
def test_after_stop_nothing_of_ours_stays_in_the_import_system_or_asyncio(tmp_path, imported):
    """log_async waits for the program's import of asyncio.events with a finder on
    sys.meta_path: once tracing stops the finder is gone (asyncio never imported),
    and a later load of asyncio.events (here a copy made through the loader the
    finder wrapped) keeps asyncio's own Handle._run (#31: a finder left behind and
    a Handle._run replaced after stop passed every test)."""
    proc = subprocess.run([sys.executable, "-c", LEAVES_NOTHING, imported], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "meta_path as before: True\nHandle._run ours: False\n", proc.stdout
