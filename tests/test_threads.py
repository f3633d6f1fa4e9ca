"""Every thread is traced: running at start, started later, named, nested."""
import gc
import sys
import threading

import pytest

import pytrace_cffi

from helpers import assert_nested, trimmed


def spin(n):
    return sum(len(str(i)) for i in range(n))


def wait_then_work(started, go, n):
    started.set()
    go.wait()
    for _ in range(n):
        spin(10)


def test_thread_running_before_start_is_traced_and_seeded():
    started, go = threading.Event(), threading.Event()
    early = threading.Thread(target=wait_then_work, args=(started, go, 7), name="early-bird")
    early.start()
    started.wait()
    pytrace_cffi.start()
    go.set()
    early.join()
    trace = pytrace_cffi.stop()

    thread = next(t for t in trace.threads if t.name == "early-bird")
    assert thread.native_id == early.native_id
    calls = [c for c in trace if c.thread == thread.native_id]
    names = [c.name.rsplit(": ", 1)[-1] for c in calls]
    assert names.count("spin") == 7
    # The frames that were running at start are seeded from start time.
    seeded = next(c for c in calls if c.name.endswith(": wait_then_work"))
    assert seeded.start_ns == trace.start_ns
    spins = [c for c in calls if c.name.endswith(": spin")]
    assert all(s.parent == seeded.id for s in spins)
    assert_nested(trace)


def test_threads_started_after_start_are_traced_with_names():
    with pytrace_cffi.trace() as traced:
        workers = [threading.Thread(target=spin, args=(20 + k,), name=f"late-{k}")
                   for k in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        workers[0].name = "renamed-late-0"
    trace = traced.trace
    by_name = {t.name: t for t in trace.threads}
    assert {"renamed-late-0", "late-1", "late-2", "MainThread"} <= set(by_name)
    for k, worker in enumerate(workers):
        thread = by_name[worker.name]
        assert thread.native_id == worker.native_id
        spins = [c for c in trace if c.thread == thread.native_id and c.name.endswith(": spin")]
        assert len(spins) == 1
        by_id = {c.id: c for c in trace}
        lens = [c for c in trace if c.name == "builtins.len" and c.thread == thread.native_id
                and c.parent is not None and by_id[c.parent].name.startswith(trimmed(__file__))]
        assert len(lens) == 20 + k
    assert_nested(trace)


def test_each_thread_gets_its_own_calls():
    barrier = threading.Barrier(4)

    def work(k):
        barrier.wait()
        for _ in range(50 * (k + 1)):
            spin(3)

    with pytrace_cffi.trace() as traced:
        threads = [threading.Thread(target=work, args=(k,), name=f"w{k}") for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    trace = traced.trace
    for k, t in enumerate(threads):
        tid = next(info.native_id for info in trace.threads if info.name == f"w{k}")
        assert tid == t.native_id
        count = sum(1 for c in trace if c.thread == tid and c.name.endswith(": spin"))
        assert count == 50 * (k + 1)
    assert_nested(trace)


class _SlowMro(type):
    """A metaclass whose __mro__ runs Python code: naming a built-in bound to an
    instance of its class asks for the type's __mro__ (pt_keys.c)."""
    hold = None         # called (inside the hook) when set

    def __getattribute__(cls, name):
        if name == "__mro__" and _SlowMro.hold is not None:
            _SlowMro.hold()
        return super().__getattribute__(name)


class _Slow(metaclass=_SlowMro):
    pass


def _fresh_function(name):
    """A function whose code object no trace has seen (a new key)."""
    namespace = {}
    exec(f"def {name}():\n    return 1\n", namespace)
    return namespace[name]


@pytest.mark.parametrize("where", ["filter", "classify", "tag", "naming"])
def test_trace_dropped_while_a_hook_runs_python_code(monkeypatch, where):
    """A hook that runs Python code (an include filter on a new code object, the
    torch watcher classifying one or tagging a call, the naming of a new built-in) lets other
    threads run: one may stop tracing and drop the trace while the hook waits.
    The tracer is freed only once that hook is done with it (the sanitized build,
    tests/run_asan.sh, reported the hook resuming on freed memory)."""
    inside, release = threading.Event(), threading.Event()

    def hold():
        inside.set()
        release.wait(10)

    options = {}
    if where == "filter":
        from pytrace_cffi import _tracer
        make = _tracer.make_code_filter

        def make_slow(include, exclude):
            skip = make(include, exclude)

            def slow_skip(code):
                if code.co_name == "slow_target":
                    hold()
                return skip(code)
            return slow_skip
        monkeypatch.setattr(_tracer, "make_code_filter", make_slow)
        options["include"] = "*"
        call = _fresh_function("slow_target")
    elif where == "classify":
        from pytrace_cffi import _torch
        classify = _torch.TorchWatcher.classify

        def slow_classify(self, code):
            if code.co_name == "_wrapped_call_impl":
                hold()
            return classify(self, code)
        monkeypatch.setattr(_torch.TorchWatcher, "classify", slow_classify)
        call = _fresh_function("_wrapped_call_impl")      # a name the watcher asks about
    elif where == "tag":
        from pytrace_cffi import _torch

        def slow_tag(self, frame):
            hold()
            return 1            # a tag: the hook would append it, were tracing on
        monkeypatch.setattr(_torch.TorchWatcher, "classify",
                            lambda self, code: int(code.co_name == "_wrapped_call_impl"))
        monkeypatch.setattr(_torch.TorchWatcher, "tag", slow_tag)
        call = _fresh_function("_wrapped_call_impl")      # its calls are tagged
    else:
        monkeypatch.setattr(_SlowMro, "hold", staticmethod(hold))
        call = _Slow().__sizeof__               # a built-in bound to an instance

    def worker():
        call()

    pytrace_cffi.start(**options)
    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert inside.wait(10), "the hook never ran the Python code"
        trace = pytrace_cffi.stop()
        del trace
        gc.collect()
    finally:
        release.set()
        thread.join(10)
    assert not thread.is_alive()
    # tracing works on afterwards
    monkeypatch.undo()
    _SlowMro.hold = None
    with pytrace_cffi.trace() as traced:
        call()
    assert len(traced.trace) >= 1


AUDITED_START_STOP = """
import sys, threading
import pytrace_cffi

callers = []


def audit(event, args):
    # Python code in an audit hook (a followed process has one): where does it run?
    if event == "sys.setprofile":
        frame = sys._getframe(1)
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        callers.append(names)


sys.addaudithook(audit)
done = threading.Event()


def busy():
    while not done.is_set():
        sum([1, 2, 3])


threads = [threading.Thread(target=busy) for _ in range(3)]
for thread in threads:
    thread.start()
for _ in range(200):
    pytrace_cffi.start()
    sum([4])
    pytrace_cffi.stop()
done.set()
for thread in threads:
    thread.join()
print(sum(1 for names in callers if "busy" in names), len(callers))
"""


def test_audit_hooks_run_in_the_thread_that_starts_and_stops(run_python):
    """Installing and removing the hook of every thread raises sys.setprofile's
    audit event: a Python audit hook (a followed process installs one) ran on
    the frame stack of the thread whose hook was set, suspended mid-frame, and
    corrupted it (start() crashed). It runs in the calling thread now."""
    proc = run_python(AUDITED_START_STOP, timeout=300)
    on_other_threads, events = map(int, proc.stdout.split())
    assert on_other_threads == 0
    if sys.version_info < (3, 12):
        assert events >= 200 * 2 * 4        # each start and stop: main + 3 threads


def test_the_thread_that_called_start_keeps_its_name_when_its_ident_is_reused():
    """start() in a thread that then ends, stop() in a later thread, which gets
    the same ident: each keeps its own name (the starting one was named after the
    stopping one, by ident, its calls under the wrong name)."""
    box = {}

    def starter():
        pytrace_cffi.start()
        sorted(range(10))

    def stopper():
        box["trace"] = pytrace_cffi.stop()

    first = threading.Thread(target=starter, name="starter")
    first.start()
    first.join()
    second = threading.Thread(target=stopper, name="stopper")
    second.start()
    second.join()
    names = [thread.name for thread in box["trace"].threads]
    assert names[0] == "starter" and names[-1] == "stopper", names
    sorts = [call for call in box["trace"] if call.name.endswith("sorted")]
    assert [box["trace"].threads[0].native_id] == [call.thread for call in sorts]
