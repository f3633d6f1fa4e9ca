"""Never break the host program: fork, other profilers, exit while tracing,
recursion limits, memory across cycles. Risky cases run in their own process."""
import sys
import textwrap

import pytest

import pytrace_cffi
from pytrace_cffi import TracerConflictError

from helpers import assert_nested


def dedent(code):
    return textwrap.dedent(code).lstrip()


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_fork_while_tracing_child_stops_cleanly_parent_keeps_its_trace(run_python):
    proc = run_python(dedent("""
        import os, sys, threading, pytrace_cffi

        def work(n):
            return sum(len(str(i)) for i in range(n))

        def child():
            ok = not pytrace_cffi.is_tracing() and sys.getprofile() is None
            work(100)
            pytrace_cffi.start()          # the child may trace on its own
            work(10)
            t = pytrace_cffi.stop()
            ok = ok and sum(1 for c in t if c.name.endswith(": work")) == 1
            os._exit(0 if ok else 3)

        spinner = threading.Thread(target=work, args=(20000,))
        pytrace_cffi.start()
        spinner.start()
        work(50)
        pid = os.fork()
        if pid == 0:
            child()
        _, status = os.waitpid(pid, 0)
        work(60)
        spinner.join()
        t = pytrace_cffi.stop()
        works = [c for c in t if c.name.endswith(": work")]
        print("child", os.WEXITSTATUS(status), "works", len(works))
    """))
    assert proc.stdout.split() == ["child", "0", "works", "3"]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_never_writes_to_its_parents_spill_file(run_python, tmp_path):
    """Python code a forked child runs before our after-fork hook (handlers
    registered earlier, as threading's are) is not recorded by the inherited
    tracer: its spill would land in the parent's file, at the offset the two
    share, and cut the parent's trace."""
    proc = run_python(dedent(f"""
        import os

        def busy(i):
            return i

        def in_child():
            for i in range(30000):    # chunks of 512 events: many spills, were it recorded
                busy(i)

        os.register_at_fork(after_in_child=in_child)    # before ours: runs first
        import pytrace_cffi

        pytrace_cffi.start(output={str(tmp_path / "out")!r}, max_events=4096)
        for i in range(3000):
            busy(i)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        for i in range(3000):
            busy(i)
        trace = pytrace_cffi.stop()
        print(sum(1 for c in trace if c.name.endswith(": busy")), trace.dropped_events)
    """))
    assert proc.stdout.split() == ["6000", "0"], proc.stderr


def test_cprofile_running_before_start(run_python):
    """3.9-3.11: cProfile holds this thread's profile hook, start() refuses
    clearly and cProfile keeps working. 3.12+: cProfile holds PROFILER_ID, we
    claim another sys.monitoring tool id, and both record."""
    proc = run_python(dedent("""
        import cProfile, pstats, io, pytrace_cffi

        def target():
            return sum(range(10))

        profiler = cProfile.Profile()
        profiler.enable()
        try:
            pytrace_cffi.start()
            print("started")
        except pytrace_cffi.TracerConflictError as exc:
            print("conflict:", exc)
        target()
        print("tracing:", pytrace_cffi.is_tracing())
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).print_stats("target")
        print("cprofile saw target:", "target" in out.getvalue())
        if pytrace_cffi.is_tracing():
            trace = pytrace_cffi.stop()
            print("we saw target:", sum(1 for c in trace if c.name.endswith(": target")),
                  trace.hook_lost)
    """))
    assert "cprofile saw target: True" in proc.stdout
    if sys.version_info >= (3, 12):
        assert "started" in proc.stdout and "conflict:" not in proc.stdout
        assert "tracing: True" in proc.stdout
        assert "we saw target: 1 ()" in proc.stdout
        assert "TraceWarning" not in proc.stderr
    else:
        assert "conflict:" in proc.stdout and "started" not in proc.stdout
        assert "another profiler" in proc.stdout
        assert "tracing: False" in proc.stdout


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.12+: sys.monitoring tool ids")
def test_monitoring_tool_id_is_the_first_free_of_ours():
    """Tool ids 4, then 3, then PROFILER_ID as a last resort; all three taken
    is a clear conflict, and a refused start() claims nothing."""
    from pytrace_cffi._tracer import MONITORING_TOOL_IDS
    monitoring = sys.monitoring
    assert MONITORING_TOOL_IDS == (4, 3, monitoring.PROFILER_ID)
    taken = []

    def holder_of_ours():
        return [tool for tool in range(6) if monitoring.get_tool(tool) == "pytrace_cffi"]

    try:
        for others in range(len(MONITORING_TOOL_IDS)):
            with pytrace_cffi.trace() as t:
                ours = holder_of_ours()
                sum([1])
            assert ours == [MONITORING_TOOL_IDS[others]]
            assert [c for c in t.trace if c.name == "builtins.sum"]
            assert t.trace.hook_lost == ()
            assert holder_of_ours() == []
            tool = MONITORING_TOOL_IDS[others]
            monitoring.use_tool_id(tool, f"other tool {tool}")
            taken.append(tool)
        with pytest.raises(TracerConflictError, match="every sys.monitoring tool id") as caught:
            pytrace_cffi.start()
        assert "'other tool 4'" in str(caught.value) and "'other tool 2'" in str(caught.value)
        assert not pytrace_cffi.is_tracing()
        assert holder_of_ours() == []
    finally:
        for tool in taken:
            monitoring.free_tool_id(tool)


def test_sys_setprofile_hook_is_never_silently_replaced():
    seen = []

    def hook(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_name)

    def marker():
        return 1

    sys.setprofile(hook)
    try:
        if sys.version_info >= (3, 12):
            # sys.monitoring lets both run side by side
            with pytrace_cffi.trace() as t:
                marker()
            assert [c for c in t.trace if c.name.endswith(": marker")]
        else:
            with pytest.raises(TracerConflictError, match="another profiler"):
                pytrace_cffi.start()
            marker()
    finally:
        sys.setprofile(None)
    assert "marker" in seen


def test_threading_profile_hook_of_someone_else_is_a_conflict():
    import threading

    def other(frame, event, arg):
        pass

    threading.setprofile(other)
    try:
        with pytest.raises(TracerConflictError, match="threading.setprofile"):
            pytrace_cffi.start()
        assert not pytrace_cffi.is_tracing()
    finally:
        threading.setprofile(None)


def test_exit_while_tracing_with_threads_is_clean(run_python):
    proc = run_python(dedent("""
        import threading, time, pytrace_cffi

        # The threads are traced and alive at exit, but blocked rather than spinning:
        # CPython 3.10 itself can crash a daemon thread that takes the GIL while the
        # interpreter is being finalized (seen here without any tracer).
        started = threading.Barrier(4)
        never = threading.Event()

        def spin():
            for _ in range(1000):
                len("x")
            started.wait()
            never.wait()

        pytrace_cffi.start()
        for _ in range(3):
            threading.Thread(target=spin, daemon=True).start()
        started.wait()
        print("bye")
    """))
    assert proc.returncode == 0 and proc.stdout.strip() == "bye"
    assert "still tracing at exit" in proc.stderr


_ENDINGS = {"raise": ('raise RuntimeError("boom")', 1),
            "sys.exit": ("sys.exit(3)", 3),
            "forgotten": ("", 0)}


def _run_ending_while_tracing(tmp_path, options, ending):
    """A program that starts tracing with options, prints a line and ends by
    ending (no stop()), in a fresh interpreter whose TMPDIR is its own."""
    from test_children import _env_own_tmp, run_command
    (tmp_path / "prog.py").write_text(dedent(f"""
        import sys, pytrace_cffi

        def work():
            return sorted(range(1000), key=abs)

        pytrace_cffi.start({options})
        work()
        print("hello")
        {_ENDINGS[ending][0]}
    """))
    proc = run_command([sys.executable, "prog.py"], tmp_path, _env_own_tmp(tmp_path), 120)
    assert proc.returncode == _ENDINGS[ending][1], proc.stderr
    assert proc.stdout == "hello\n"
    if ending == "raise":
        assert "RuntimeError: boom" in proc.stderr
    assert list((tmp_path / "tmp").iterdir()) == [], proc.stderr   # nothing left behind
    notes = [line for line in proc.stderr.splitlines() if "still tracing at exit" in line]
    assert len(notes) == 1, proc.stderr
    return notes[0]


@pytest.mark.parametrize("options, ending, where", [
    ('output="t.pftrace"', "raise", "t.pftrace"),
    ('output="t.json"', "sys.exit", "t.json"),
    ('output="t.html"', "forgotten", "t.html"),
    ('output="t.json.gz", follow_children=True', "raise", "t.json.gz"),
    ('output="t.json", flight_recorder=True', "sys.exit", "t.json"),
    ('output="spilled", max_events=100', "raise", "spilled"),
    ('output="job", follow_children=True', "sys.exit", "job"),
])
def test_exit_while_tracing_with_an_output_writes_it_as_stop_would(tmp_path, options, ending,
                                                                   where):
    note = _run_ending_while_tracing(tmp_path, options, ending)
    assert "discarded" not in note and note.startswith("pytrace_cffi: ")
    assert note.endswith(where), note
    path = tmp_path / where
    if where.endswith(".html"):
        assert path.stat().st_size > 0
        return
    names = [call.name for call in pytrace_cffi.load(str(path))]
    assert any(name.endswith(": work") for name in names), names[:20]


@pytest.mark.parametrize("options", ["", "flight_recorder=True", "max_events=100"])
def test_exit_while_tracing_without_an_output_discards_it_and_leaves_nothing(tmp_path, options):
    note = _run_ending_while_tracing(tmp_path, options, "raise")
    assert note == "pytrace_cffi: still tracing at exit; that trace was discarded (call stop())"


def test_sys_exit_inside_traced_code_in_a_thread_pool(run_python):
    proc = run_python(dedent("""
        import concurrent.futures, pytrace_cffi
        pytrace_cffi.start()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            print(sum(pool.map(len, ["ab", "cde"] * 50)))
        t = pytrace_cffi.stop()
        raise SystemExit(len(t.threads) >= 2 and 5)
    """), check=False)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout.strip() == "250"


def recurse(n):
    return recurse(n + 1)


def test_recursion_error_keeps_traces_nested():
    with pytrace_cffi.trace() as t:
        with pytest.raises(RecursionError):
            recurse(0)
        len("after")
    calls = [c for c in t.trace if c.name.endswith(": recurse")]
    assert len(calls) > 100
    assert_nested(t.trace)
    (after,) = [c for c in t.trace if c.name == "builtins.len"]
    assert after.start_ns >= max(c.end_ns for c in calls)


def test_generator_close_and_throw_stay_nested():
    def gen():
        try:
            while True:
                yield 1
        finally:
            len("cleanup")

    with pytrace_cffi.trace() as t:
        g = gen()
        next(g)
        g.close()
        h = gen()
        next(h)
        with pytest.raises(KeyError):
            h.throw(KeyError("x"))
    assert_nested(t.trace)
    gens = [c for c in t.trace if c.name.endswith(": gen")]
    assert len(gens) == 4          # two starts, close and throw re-enter each


def test_many_short_lived_threads():
    import threading

    def tiny(i):
        return str(i)

    with pytrace_cffi.trace() as t:
        for batch in range(10):
            threads = [threading.Thread(target=tiny, args=(i,)) for i in range(10)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
    assert sum(1 for c in t.trace if c.name.endswith(": tiny")) == 100
    assert_nested(t.trace)


def test_fifty_cycles_do_not_grow_memory(run_python):
    proc = run_python(dedent("""
        import gc, pytrace_cffi

        def rss_kib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        def cycle():
            with pytrace_cffi.trace() as t:
                fib(18)
            t.trace.export_chrome_trace("/dev/null")
            del t
            gc.collect()

        for _ in range(10):
            cycle()
        before = rss_kib()
        for _ in range(50):
            cycle()
        print(rss_kib() - before)
    """))
    assert int(proc.stdout) < 4096, f"RSS grew by {proc.stdout.strip()} KiB over 50 cycles"
