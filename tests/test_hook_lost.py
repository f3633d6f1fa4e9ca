"""Another profiler taking the hook after start() (issue 11, item 4): recording
stops where the hook went, and stop() says so instead of returning a short
trace silently; is_tracing() tells the truth; nobody else's hook is removed.

3.9-3.11 hook per thread with PyEval_SetProfile, so sys.setprofile and
torch.profiler replace ours; 3.12+ use sys.monitoring, where sys.setprofile and
cProfile (PROFILER_ID) have tool ids of their own (they coexist) and only another
user of our tool id can take it."""
import sys
import threading
import warnings

import pytest

import pytrace_cffi
from pytrace_cffi import TraceWarning

MONITORING = sys.version_info >= (3, 12)
PER_THREAD_HOOK = not MONITORING
needs_profile_backend = pytest.mark.skipif(MONITORING, reason="3.9-3.11: hooks per thread")
needs_monitoring = pytest.mark.skipif(not MONITORING, reason="3.12+: sys.monitoring")


def before_takeover():
    return sum([1, 2])


def after_takeover():
    return len([3])


def bg_before():
    return sum([4])


def bg_after():
    return sum([5])


def session_open():
    """start() ran without its stop() (is_tracing() may say False by then)."""
    return pytrace_cffi._has_session()


def function_names(trace):
    return {call.name.rsplit(": ", 1)[-1] for call in trace}


def stop_quietly():
    """stop(), failing the test if it warns."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = pytrace_cffi.stop()
    lost = [w for w in caught if issubclass(w.category, TraceWarning)]
    assert not lost, [str(w.message) for w in lost]
    assert trace.hook_lost == ()
    return trace


def our_tool_id():
    """The sys.monitoring tool id the running session claimed (3.12+)."""
    (tool,) = [tool for tool in range(6) if sys.monitoring.get_tool(tool) == "pytrace_cffi"]
    return tool


def ended_by(trace, name):
    """End of the (first) call of `name`, in ms after start."""
    call = next(c for c in trace if c.name.endswith(": " + name))
    return (call.end_ns - trace.start_ns) / 1e6


class OtherProfiler:
    """A profile function standing for cProfile or any sys.setprofile user."""

    def __init__(self):
        self.events = []

    def __call__(self, frame, event, arg):
        self.events.append(event)

    def __repr__(self):
        return "<OtherProfiler>"


# -- normal use: nothing lost, nothing said -----------------------------------

def test_normal_start_stop_warns_nothing():
    done = []
    pytrace_cffi.start()
    before_takeover()
    # A thread born while tracing runs the new-thread check too.
    worker = threading.Thread(target=lambda: done.append(bg_before()), name="worker")
    worker.start()
    worker.join()
    tracing = pytrace_cffi.is_tracing()
    trace = stop_quietly()
    assert tracing and done
    assert {"before_takeover", "bg_before"} <= function_names(trace)
    assert not pytrace_cffi.is_tracing()


def test_normal_run_under_error_filter(run_python):
    # The pytest -W error::TraceWarning style check, in a fresh interpreter.
    proc = run_python(
        "import warnings, pytrace_cffi\n"
        "warnings.simplefilter('error', pytrace_cffi.TraceWarning)\n"
        "pytrace_cffi.start()\n"
        "sum(range(10))\n"
        "t = pytrace_cffi.stop()\n"
        "print(len(t) > 0, t.hook_lost)\n")
    assert proc.stdout.split() == ["True", "()"]
    assert "TraceWarning" not in proc.stderr


# -- sys.setprofile ------------------------------------------------------------

def test_sys_setprofile_after_start():
    other = OtherProfiler()
    pytrace_cffi.start()
    try:
        before_takeover()
        sys.setprofile(other)
        after_takeover()
        tracing = pytrace_cffi.is_tracing()
        if PER_THREAD_HOOK:
            with pytest.warns(TraceWarning) as caught:
                trace = pytrace_cffi.stop()
        else:
            trace = stop_quietly()
        # Whoever's hook is there now stays: ours is not there to remove.
        assert sys.getprofile() is other
    finally:
        sys.setprofile(None)
        if session_open():
            pytrace_cffi.stop()
    names = function_names(trace)
    assert "before_takeover" in names
    assert not pytrace_cffi.is_tracing()
    if not PER_THREAD_HOOK:
        # 3.12+: sys.setprofile has a sys.monitoring tool id of its own.
        assert tracing
        assert "after_takeover" in names
        assert other.events
        return
    assert not tracing
    assert "after_takeover" not in names
    assert "call" in other.events             # the other profiler got its events
    message = str(caught[0].message)
    assert "'MainThread'" in message and "<OtherProfiler>" in message
    (loss,) = trace.hook_lost
    assert loss["scope"] == "thread" and loss["thread"] == "MainThread"
    assert loss["native_id"] == threading.get_native_id()
    assert "<OtherProfiler>" in loss["taken_by"]
    # When: after the last call recorded before the takeover, before stop.
    assert ended_by(trace, "before_takeover") <= loss["after_ms"] + 0.001
    assert loss["after_ms"] <= loss["noticed_ms"] <= (trace.stop_ns - trace.start_ns) / 1e6
    assert f"after {loss['after_ms']:.3f} ms" in message
    # What: every call of the thread, and all of them began before the loss.
    assert loss["calls"] == len(trace) == len(list(trace))
    assert all((c.start_ns - trace.start_ns) / 1e6 <= loss["after_ms"] + 0.001 for c in trace)
    assert f"{loss['calls']} calls" in message


@needs_profile_backend
def test_setprofile_none_after_start_is_a_loss_too():
    pytrace_cffi.start()
    before_takeover()
    sys.setprofile(None)
    after_takeover()
    assert not pytrace_cffi.is_tracing()
    with pytest.warns(TraceWarning, match="profile hook removed"):
        trace = pytrace_cffi.stop()
    assert "after_takeover" not in function_names(trace)
    assert trace.hook_lost[0]["thread"] == "MainThread"


def test_the_profile_function_saved_and_restored_by_the_program_goes_on_tracing():
    """old = sys.getprofile(); sys.setprofile(None); ...; sys.setprofile(old): on
    3.9-3.11 old is our hook's object, restored as a Python profile function.
    Called, it puts the hook back: the calls after it are recorded (it raised
    "TypeError: 'Handle' object is not callable" in the program). After stop()
    it takes itself off. On 3.12+ sys.setprofile is not our hook."""
    pytrace_cffi.start()
    before_takeover()
    old = sys.getprofile()
    sys.setprofile(None)
    sys.setprofile(old)
    for _ in range(3):
        after_takeover()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = pytrace_cffi.stop()
    names = [call.name.rsplit(": ", 1)[-1] for call in trace]
    assert (names.count("before_takeover"), names.count("after_takeover")) == (1, 3)
    sys.setprofile(old)
    after_takeover()
    assert sys.getprofile() is None


# -- a background thread ---------------------------------------------------------

def _taker_thread(other, took, release, seen):
    bg_before()
    sys.setprofile(other)
    bg_after()
    took.set()
    release.wait(30)
    seen["hook after stop"] = sys.getprofile()
    sys.setprofile(None)


@pytest.mark.parametrize("started", ["before start", "while tracing"])
def test_background_thread_hook_replaced(started):
    other = OtherProfiler()
    took, release, go = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def body():
        go.wait(30)
        _taker_thread(other, took, release, seen)

    taker = threading.Thread(target=body, name="taker")
    if started == "before start":
        taker.start()
    pytrace_cffi.start()
    try:
        if started == "while tracing":
            taker.start()
        go.set()
        assert took.wait(30)
        before_takeover()
        tracing = pytrace_cffi.is_tracing()      # the calling thread's hook is ours
        if PER_THREAD_HOOK:
            with pytest.warns(TraceWarning, match="thread 'taker'"):
                trace = pytrace_cffi.stop()
        else:
            trace = stop_quietly()
    finally:
        release.set()
        taker.join(30)
        if session_open():
            pytrace_cffi.stop()
    assert tracing
    names = function_names(trace)
    assert {"before_takeover", "bg_before"} <= names
    if not PER_THREAD_HOOK:
        assert "bg_after" in names
        return
    assert "bg_after" not in names
    assert seen["hook after stop"] is other     # stop left that thread's hook alone
    (loss,) = trace.hook_lost
    assert loss["thread"] == "taker" and loss["native_id"] == taker.native_id
    assert ended_by(trace, "bg_before") <= loss["after_ms"] + 0.001
    taker_calls = [c for c in trace if c.thread == taker.native_id]
    assert loss["calls"] == len(taker_calls) > 0


@needs_profile_backend
def test_loss_noticed_when_a_new_thread_starts():
    """A thread that lost the hook and ended before stop() is gone from the
    interpreter by then: the check made when the next thread was attached
    is what reports it."""
    other = OtherProfiler()
    took, release = threading.Event(), threading.Event()

    def taker_body():
        bg_before()
        sys.setprofile(other)
        bg_after()
        took.set()
        release.wait(30)        # then ends: its thread state goes away with it

    pytrace_cffi.start()
    taker = threading.Thread(target=taker_body, name="short-lived taker")
    try:
        taker.start()
        assert took.wait(30)
        witness = threading.Thread(target=before_takeover, name="witness")
        witness.start()
        witness.join(30)
        release.set()
        taker.join(30)
        with pytest.warns(TraceWarning, match="thread 'short-lived taker'"):
            trace = pytrace_cffi.stop()
    finally:
        release.set()
        if session_open():
            pytrace_cffi.stop()
    assert "bg_after" not in function_names(trace)
    assert [loss["thread"] for loss in trace.hook_lost] == ["short-lived taker"]
    assert "<OtherProfiler>" in trace.hook_lost[0]["taken_by"]     # seen while it lived


@needs_profile_backend
def test_thread_that_lost_the_hook_and_ended_before_any_check():
    """Its thread state is gone by stop(), and nothing looked in between: it
    ended with calls open, which a thread that keeps our hook never does."""
    other = OtherProfiler()

    def taker_body():
        bg_before()
        sys.setprofile(other)
        bg_after()

    def quiet_body():
        bg_before()

    pytrace_cffi.start()
    try:
        taker = threading.Thread(target=taker_body, name="gone taker")
        quiet = threading.Thread(target=quiet_body, name="gone quiet")
        taker.start()
        quiet.start()
        taker.join(30)
        quiet.join(30)
        with pytest.warns(TraceWarning, match="thread 'gone taker'") as caught:
            trace = pytrace_cffi.stop()
    finally:
        if session_open():
            pytrace_cffi.stop()
    assert "gone quiet" not in str(caught[0].message)
    (loss,) = trace.hook_lost
    assert loss["thread"] == "gone taker" and loss["native_id"] == taker.native_id
    assert "ended with" in loss["taken_by"]
    assert ended_by(trace, "bg_before") <= loss["after_ms"] + 0.001
    assert "bg_after" not in function_names(trace)


@needs_profile_backend
def test_a_replaced_sys_getprofile_is_never_run_under_other_threads():
    """The check runs sys.getprofile's C function under each thread's state; a
    stand-in (a mock) could run anything there, so then nothing is checked."""
    real = sys.getprofile
    asked = []

    def stand_in():
        asked.append(threading.current_thread().name)
        return real()

    sys.getprofile = stand_in
    try:
        pytrace_cffi.start()
        worker = threading.Thread(target=bg_before, name="worker")
        worker.start()
        worker.join()
        tracing = pytrace_cffi.is_tracing()
        trace = stop_quietly()
    finally:
        sys.getprofile = real
        if session_open():
            pytrace_cffi.stop()
    assert tracing and "bg_before" in function_names(trace)
    assert asked == ["MainThread"]      # start()'s own look at this thread only


# -- threading's hook for new threads ------------------------------------------------

def test_threads_starting_while_start_stop_cycle_lose_nothing():
    """Issue 19, item 10: threads started all the time while start()/stop()
    cycle. A thread can read threading's hook while one session runs and run it
    after that one stopped or the next started, be checked between reading the
    hook and running it, or start while start() is half done: none of these is
    another profiler taking the hook (3.11 named pytrace_cffi's own thread hook
    as the taker; 3.12 said the tool's events were switched off, at a negative
    time). No warning, no loss, and no event after stop_ns (a thread attached
    while its watcher questions ran let another stop the tracer)."""
    done = threading.Event()

    def spawner():
        while not done.is_set():
            batch = [threading.Thread(target=bg_before) for _ in range(4)]
            for thread in batch:
                thread.start()
            for thread in batch:
                thread.join()

    spawners = [threading.Thread(target=spawner, name=f"spawner-{i}") for i in range(2)]
    interval = sys.getswitchinterval()
    problems = []
    for thread in spawners:
        thread.start()
    sys.setswitchinterval(1e-5)         # switch threads often: the races are short
    try:
        for cycle in range(200):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                pytrace_cffi.start()
                before_takeover()
                trace = pytrace_cffi.stop()
                calls = list(trace)
            lost = [str(w.message) for w in caught if issubclass(w.category, TraceWarning)]
            late = [c for c in calls if c.end_ns > trace.stop_ns]
            if lost or trace.hook_lost or late:
                problems.append((cycle, lost[:1], late[:1]))
    finally:
        sys.setswitchinterval(interval)
        done.set()
        for thread in spawners:
            thread.join(30)
        if session_open():
            pytrace_cffi.stop()
    assert not problems, problems[:3]



CYCLE_WITH_FOLLOW_AUDIT_HOOK = """
import sys, threading, pytrace_cffi
from pytrace_cffi.follow import exits
exits._install_audit()             # a followed process has it from its start
ran = []
done = threading.Event()

def spawner(me):
    while not done.is_set():
        batch = [threading.Thread(target=ran.append, args=(1,)) for _ in range(4)]
        for thread in batch:
            thread.start()
        for thread in batch:
            thread.join()
        started[me] += len(batch)      # one slot each: += is no atomic step

started = [0, 0]
spawners = [threading.Thread(target=spawner, args=(i,)) for i in range(2)]
for thread in spawners:
    thread.start()
sys.setswitchinterval(1e-5)
for cycle in range(400):
    pytrace_cffi.start()
    sum([1, 2])
    pytrace_cffi.stop()
done.set()
for thread in spawners:
    thread.join()
print(sum(started), len(ran))
"""


def test_follow_audit_hook_lets_threads_start_during_start_stop(run_python):
    """The followed process's audit hook (exec, launches) ran Python code for
    every audit event: on 3.10/3.11 a thread starting while start() set other
    threads' hooks failed in Thread._bootstrap_inner ("Cannot install a profile
    function while another profile function is being installed") and never ran
    its target, and stop() found damaged events. It is a C hook now that calls
    Python for launches and execs only: every thread runs."""
    proc = run_python(CYCLE_WITH_FOLLOW_AUDIT_HOOK, timeout=300)
    started, ran = map(int, proc.stdout.split())
    assert started > 0 and ran == started
    assert "profile function" not in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_threading_hook_replaced():
    def other_thread_hook(frame, event, arg):
        sys.setprofile(None)

    pytrace_cffi.start()
    try:
        threading.setprofile(other_thread_hook)
        if PER_THREAD_HOOK:
            with pytest.warns(TraceWarning, match="threads started afterwards"):
                trace = pytrace_cffi.stop()
            assert trace.hook_lost[0]["scope"] == "new threads"
        else:
            trace = stop_quietly()      # 3.12+: sys.monitoring sees new threads anyway
        hook = (threading.getprofile() if hasattr(threading, "getprofile")
                else threading._profile_hook)
        assert hook is other_thread_hook          # not put back to ours' predecessor
    finally:
        threading.setprofile(None)
        if session_open():
            pytrace_cffi.stop()


# -- sys.monitoring (3.12+) ------------------------------------------------------------

@needs_monitoring
def test_monitoring_events_off_and_tool_freed():
    monitoring = sys.monitoring
    pytrace_cffi.start()
    try:
        tool = our_tool_id()
        before_takeover()
        monitoring.set_events(tool, 0)
        monitoring.free_tool_id(tool)
        after_takeover()
        tracing = pytrace_cffi.is_tracing()
        with pytest.warns(TraceWarning, match="every thread") as caught:
            trace = pytrace_cffi.stop()
    finally:
        if session_open():
            pytrace_cffi.stop()
    assert not tracing
    names = function_names(trace)
    assert "before_takeover" in names and "after_takeover" not in names
    (loss,) = trace.hook_lost
    assert loss["scope"] == "process"
    assert "switched off" in loss["taken_by"] and "freed" in loss["taken_by"]
    assert ended_by(trace, "before_takeover") <= loss["after_ms"] + 0.001
    assert loss["calls"] == len(trace)
    assert "switched off" in str(caught[0].message)
    assert monitoring.get_tool(tool) is None


@needs_monitoring
def test_monitoring_tool_claimed_by_another():
    monitoring = sys.monitoring
    theirs = []

    def their_callback(code, offset):
        theirs.append(code.co_name)

    pytrace_cffi.start()
    tool = our_tool_id()
    try:
        before_takeover()
        monitoring.set_events(tool, 0)
        monitoring.free_tool_id(tool)
        monitoring.use_tool_id(tool, "other profiler")
        monitoring.register_callback(tool, monitoring.events.PY_START, their_callback)
        monitoring.set_events(tool, monitoring.events.PY_START)
        after_takeover()
        tracing = pytrace_cffi.is_tracing()
        with pytest.warns(TraceWarning, match="'other profiler'"):
            trace = pytrace_cffi.stop()
        # stop() left the other tool as it was, and it still works.
        assert monitoring.get_tool(tool) == "other profiler"
        assert monitoring.get_events(tool) == monitoring.events.PY_START
        theirs.clear()
        after_takeover()
        assert "after_takeover" in theirs
    finally:
        if monitoring.get_tool(tool) == "other profiler":
            monitoring.set_events(tool, 0)
            monitoring.register_callback(tool, monitoring.events.PY_START, None)
            monitoring.free_tool_id(tool)
        if session_open():
            pytrace_cffi.stop()
    assert not tracing
    assert "after_takeover" not in function_names(trace)


def free_tool_id_clears_callbacks():
    """This interpreter's answer, asked of it: does sys.monitoring.free_tool_id
    take the id's callbacks with it? (3.14 made it do so, as clear_tool_id.)"""
    monitoring = sys.monitoring
    tool = next(t for t in range(6) if monitoring.get_tool(t) is None)

    def probe(*args):
        pass
    monitoring.use_tool_id(tool, "probe")
    monitoring.register_callback(tool, monitoring.events.PY_START, probe)
    monitoring.free_tool_id(tool)
    monitoring.use_tool_id(tool, "probe")
    left = monitoring.register_callback(tool, monitoring.events.PY_START, None)
    monitoring.free_tool_id(tool)
    return left is None


@needs_monitoring
def test_monitoring_callback_replaced():
    monitoring = sys.monitoring
    calls = []
    freeing_clears = free_tool_id_clears_callbacks()

    def replacement(*args):
        calls.append(args)

    pytrace_cffi.start()
    tool = our_tool_id()
    try:
        before_takeover()
        ours = monitoring.register_callback(tool, monitoring.events.PY_START, replacement)
        after_takeover()
        tracing = pytrace_cffi.is_tracing()
        # Checking put the replacement straight back.
        found = monitoring.register_callback(tool, monitoring.events.PY_START, replacement)
        with pytest.warns(TraceWarning, match="callback for PY_START"):
            trace = pytrace_cffi.stop()
        # stop() took back only its own callbacks (where freeing its tool id does
        # not take every callback of it: 3.12, 3.13).
        left = monitoring.register_callback(tool, monitoring.events.PY_START, None)
    finally:
        if session_open():
            pytrace_cffi.stop()
    assert ours is not None and not tracing
    assert found is replacement and left is (None if freeing_clears else replacement)
    assert calls
    assert "replacement" in trace.hook_lost[0]["taken_by"]
    assert "after_takeover" not in function_names(trace)


@needs_monitoring
def test_monitoring_tool_freed_only_keeps_recording():
    """On 3.12-3.13 free_tool_id alone leaves the events on: nothing is lost,
    and stop() still switches them off (claiming the free id back to do so)."""
    monitoring = sys.monitoring
    pytrace_cffi.start()
    try:
        tool = our_tool_id()
        before_takeover()
        monitoring.free_tool_id(tool)
        after_takeover()
        tracing = pytrace_cffi.is_tracing()
        still_on = monitoring.get_events(tool)
        if not still_on:                # a Python where freeing clears the events
            with pytest.warns(TraceWarning):
                trace = pytrace_cffi.stop()
            assert not tracing
            return
        trace = stop_quietly()
    finally:
        if session_open():
            pytrace_cffi.stop()
    assert tracing
    assert {"before_takeover", "after_takeover"} <= function_names(trace)
    assert monitoring.get_tool(tool) is None
    assert monitoring.get_events(tool) == 0


# -- the CLI's windows ------------------------------------------------------------------

def test_cli_window_closes_after_hook_lost(tmp_path):
    from pytrace_cffi import formats
    from pytrace_cffi.cli.arguments import RunPlan
    from pytrace_cffi.cli.run import Run
    written = []
    out = str(tmp_path / "out.json")
    plan = RunPlan(output=out, options={}, follow=False, spill=False, keep_in=None,
                   signum=None, schedule=None, delay=0, duration=None,
                   format=formats.of(out))
    windows = Run(plan, lambda result, path: written.append((function_names(result), path)))
    windows.whole_run()
    try:
        before_takeover()
        if MONITORING:
            sys.monitoring.set_events(our_tool_id(), 0)
        else:
            sys.setprofile(None)
        with pytest.warns(TraceWarning):
            windows.finish()
    finally:
        if session_open():
            pytrace_cffi.stop()
    assert len(written) == 1 and "before_takeover" in written[0][0]
    assert not session_open()


# -- cProfile in the traced program ------------------------------------------------------

CPROFILE_PROGRAM = """\
import cProfile, pstats

def before_profiling():
    return 1

def profiled(n):
    return sum(range(n))

def after_profiling():
    return 2

before_profiling()
profiler = cProfile.Profile()
profiler.enable()
for i in range(7):
    profiled(i)
profiler.disable()
after_profiling()
pstats.Stats(profiler).sort_stats("calls").print_stats("profiled")
"""


def test_cprofile_in_the_program_under_run(tmp_path):
    """The program runs as untraced (exit 0, cProfile's stats printed). 3.12+:
    cProfile holds PROFILER_ID and we another tool id, so both record. 3.9-3.11:
    cProfile takes the thread's profile hook, our recording ends there and we warn."""
    import subprocess
    from pytrace_cffi import summary
    (tmp_path / "prog.py").write_text(CPROFILE_PROGRAM)
    out = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "-o", str(out),
                           "prog.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Another profiling tool" not in proc.stderr
    # cProfile's stats: its header, and profiled's row with its 7 calls.
    assert "function calls" in proc.stdout, proc.stdout
    (row,) = [line for line in proc.stdout.splitlines() if line.endswith("(profiled)")]
    assert row.split()[0] == "7" and "prog.py:" in row
    calls = list(summary.read_trace(str(out)))
    by_id = {call.id: call for call in calls}

    def count(name, parent=None):
        return sum(1 for call in calls if call.name.rsplit(": ", 1)[-1] == name
                   and (parent is None or call.parent is not None
                        and by_id[call.parent].name.endswith(": " + parent)))

    found = (count("before_profiling"), count("profiled"), count("builtins.sum", "profiled"),
             count("after_profiling"))
    if MONITORING:
        assert found == (1, 7, 7, 1)
        assert "TraceWarning" not in proc.stderr and "lost its hook" not in proc.stderr
    else:
        assert found == (1, 0, 0, 0)
        # the command line says it in a line of its own (cli/trace_warnings.py)
        assert "pytrace_cffi: lost its hook to other code while tracing" in proc.stderr
        assert "TraceWarning" not in proc.stderr


# -- torch.profiler (3.11 here) ------------------------------------------------------------

@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="torch runs on 3.11 here")
def test_torch_profiler_with_stack_takes_the_hook():
    torch = pytest.importorskip("torch")
    x = torch.ones(8)
    pytrace_cffi.start()
    try:
        before_takeover()
        with torch.profiler.profile(with_stack=True) as prof:
            inside = pytrace_cffi.is_tracing()
            (x * 2).sum()
            after_takeover()
        with pytest.warns(TraceWarning, match="'MainThread'") as caught:
            trace = pytrace_cffi.stop()
    finally:
        if session_open():
            pytrace_cffi.stop()
    assert not inside
    names = function_names(trace)
    assert "before_takeover" in names and "after_takeover" not in names
    loss = next(loss for loss in trace.hook_lost if loss["thread"] == "MainThread")
    assert "TraceContext" in loss["taken_by"]          # noticed while torch held it
    assert "TraceContext" in str(caught[0].message)
    assert ended_by(trace, "before_takeover") <= loss["after_ms"] + 0.001
    # The other profiler still worked: its trace has events, ops and Python calls.
    event_names = {event.name for event in prof.events()}
    assert "aten::mul" in event_names
    assert any("after_takeover" in name for name in event_names)
