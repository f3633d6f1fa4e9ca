"""Every thread is traced: running at start, started later, named, nested."""
import threading

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
