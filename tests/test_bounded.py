"""max_events: bounded memory, with every event spilled to disk or the newest kept;
bad options fail before tracing starts."""
import os
import textwrap
import threading
import time
import warnings

import pytest

import pytrace_cffi
from pytrace_cffi import TraceWarning

from helpers import assert_nested, small_disk


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fib_calls(n):
    return 1 if n < 2 else 1 + fib_calls(n - 1) + fib_calls(n - 2)


def test_spill_keeps_every_event_and_load_gives_them_back(tmp_path):
    import threading
    out = tmp_path / "spill"
    pytrace_cffi.start(max_events=2000, output=str(out))
    fib(16)
    worker = threading.Thread(target=fib, args=(14,), name="spiller")
    worker.start()
    worker.join()
    spilled = pytrace_cffi.stop()
    assert isinstance(spilled, pytrace_cffi.SpilledTrace)
    assert spilled.dropped_events == 0 and spilled.spilled_events > 2000
    trace = pytrace_cffi.load(out)
    fibs = [c for c in trace if c.name.endswith(": fib")]
    assert len(fibs) == fib_calls(16) + fib_calls(14)
    assert "spiller" in {t.name for t in trace.threads}
    assert_nested(trace)
    json_path = tmp_path / "spilled.json"
    spilled.export_chrome_trace(str(json_path))
    assert json_path.stat().st_size > 0


def late_worker(noted):
    noted["entered"] = time.monotonic_ns()
    fib(14)
    time.sleep(0.01)
    noted["leaving"] = time.monotonic_ns()


def test_spilled_times_agree_with_the_programs_own_clock(tmp_path):
    """A thread started 50 ms into a spilled trace is where the program's own
    time.monotonic_ns() readings put it (the trace's clock): its first block's
    base, not the trace's first tick, starts its replay. Checked through both
    readers of events.bin: the streaming walk (iterating) and the slice table."""
    import threading
    out = tmp_path / "spill"
    noted = {}
    pytrace_cffi.start(max_events=2000, output=str(out))
    fib(16)                                 # the main thread spills first
    time.sleep(0.05)
    worker = threading.Thread(target=late_worker, args=(noted,), name="late")
    noted["starting"] = time.monotonic_ns()
    worker.start()
    worker.join()
    noted["joined"] = time.monotonic_ns()
    spilled = pytrace_cffi.stop()
    assert spilled.spilled_events > 2000
    trace = pytrace_cffi.load(out)
    late = [t for t in trace.threads if t.name == "late"]
    assert len(late) == 1
    late_id = late[0].native_id
    slack = 1_000_000                       # 1 ms: clock mapping, far below 50 ms
    walked = [c for c in trace if c.thread == late_id and c.name.endswith(": late_worker")]
    index = trace.threads.index(late[0])
    _, table, n = list(trace.thread_slices())[index]
    key = [k for k, name in enumerate(trace.names) if name.endswith(": late_worker")]
    tabled = [(table[i].start, table[i].end) for i in range(n) if table[i].key in key]
    assert len(walked) == 1 and len(tabled) == 1
    for start, end in [(walked[0].start_ns, walked[0].end_ns)] + tabled:
        assert noted["starting"] - slack <= start <= noted["entered"] + slack, \
            (start - noted["starting"]) / 1e6
        assert noted["leaving"] - slack <= end <= noted["joined"] + slack, \
            (end - noted["leaving"]) / 1e6
    # and its calls inside that call, on the trace's timeline after its start
    inner = [c for c in trace if c.thread == late_id and c.name.endswith(": fib")]
    assert len(inner) == fib_calls(14)
    assert min(c.start_ns for c in inner) >= noted["entered"] - slack
    assert trace.start_ns <= min(c.start_ns for c in trace)


def test_without_output_the_newest_events_are_kept_and_drops_are_reported():
    with pytest.warns(TraceWarning, match=r"dropped \d+ events \(max_events kept the newest; "
                                          r"give output= to keep them all\)"):
        with pytrace_cffi.trace(max_events=3000) as t:
            fib(17)
            marker()
    trace = t.trace
    assert trace.dropped_events > 0
    total = sum(th.n_events for th in trace.threads)
    assert total <= 3000 + 1024          # the budget plus one chunk being filled
    assert [c for c in trace if c.name.endswith(": marker")], "the newest call was dropped"
    assert_nested(trace)


def marker():
    return None


def test_dropped_counts_survive_every_round_trip(tmp_path):
    """A trace that dropped events (on one of two threads), written in each format
    that is read back and saved again from it: the same dropped counts, per thread
    too, and the saved directory loads."""
    import threading
    from pytrace_cffi.reading import read_trace
    with pytest.warns(TraceWarning, match="dropped"):
        with pytrace_cffi.trace(max_events=3000) as t:
            fib(17)
            worker = threading.Thread(target=fib, args=(5,))
            worker.start()
            worker.join()
    trace = t.trace
    expected = [(th.name, th.dropped) for th in trace.threads]
    assert trace.dropped_events == sum(n for _, n in expected) > 0
    assert len(expected) == 2 and [n for _, n in expected if n == 0], expected
    trace.export_chrome_trace(str(tmp_path / "t.json"))
    trace.export_chrome_trace(str(tmp_path / "t.json.gz"))
    trace.export_perfetto(str(tmp_path / "t.pftrace"))
    trace.save(str(tmp_path / "saved"))
    for name in ("t.json", "t.json.gz", "t.pftrace", "saved"):
        again = read_trace(str(tmp_path / name))
        assert again.dropped_events == trace.dropped_events, name
        assert [(th.name, th.dropped) for th in again.threads] == expected, name
        again.save(str(tmp_path / (name + ".saved")))
        loaded = pytrace_cffi.load(str(tmp_path / (name + ".saved")))
        assert loaded.dropped_events == trace.dropped_events, name
        assert [(th.name, th.dropped) for th in loaded.threads] == expected, name


def test_memory_stays_bounded_while_spilling(run_python, tmp_path):
    proc = run_python(textwrap.dedent(f"""
        import pytrace_cffi

        def rss_kib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        fib(20)
        pytrace_cffi.start(max_events=50_000, output={str(tmp_path / "big")!r})
        before = rss_kib()
        for _ in range(6):
            fib(22)                  # about 690k events in all
        grown = rss_kib() - before
        spilled = pytrace_cffi.stop()
        print(grown, spilled.spilled_events)
    """))
    grown, spilled = map(int, proc.stdout.split())
    assert spilled > 600_000
    # 50k events are 400 KiB; a full trace would be over 5 MiB
    assert grown < 2048, f"RSS grew {grown} KiB"
    trace = pytrace_cffi.load(tmp_path / "big")
    assert sum(1 for c in trace if c.name.endswith(": fib")) == 6 * fib_calls(22)


@pytest.mark.parametrize("options, error", [
    ({"max_events": -1}, ValueError),
    ({"max_events": 0}, ValueError),
    ({"max_events": "many"}, TypeError),
    ({"max_events": True}, TypeError),
    ({"output": "somewhere"}, ValueError),            # output needs max_events
    ({"max_events": 10, "output": 3}, TypeError),
])
def test_bad_bounds_fail_before_tracing(options, error):
    with pytest.raises(error):
        pytrace_cffi.start(**options)
    assert not pytrace_cffi.is_tracing()


def test_output_that_cannot_be_created_fails_before_tracing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match="cannot use"):
        pytrace_cffi.start(max_events=10, output=str(blocker / "sub"))
    assert not pytrace_cffi.is_tracing()
    assert not os.path.exists(blocker / "sub")


def test_damaged_spill_raises_format_error(tmp_path):
    out = tmp_path / "spill"
    pytrace_cffi.start(max_events=1000, output=str(out))
    fib(12)
    pytrace_cffi.stop()
    data = (out / "events.bin").read_bytes()
    (out / "events.bin").write_bytes(data[:-5])
    with pytest.raises(pytrace_cffi.TraceFormatError):
        pytrace_cffi.load(out)
    (out / "events.bin").write_bytes(data[:16] + b"\xff" * 24 + data[40:])
    with pytest.raises(pytrace_cffi.TraceFormatError):
        pytrace_cffi.load(out)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (out / "events.bin").write_bytes(data)
        pytrace_cffi.load(out)


def leaf(i):
    return i


def test_stop_with_a_full_spill_disk_raises_trace_error_holding_what_was_recorded(tmp_path):
    """A spill disk that fills up: recording stops there, the file keeps its whole
    blocks, and stop() raises a TraceError whose trace holds them; the JSON files
    that would make the directory a saved trace did not fit either."""
    with small_disk(tmp_path / "disk", "1m") as disk:
        pytrace_cffi.start(max_events=4096, output=str(disk / "spill"))
        for i in range(200_000):            # 400k events: 3.2 MB, the disk holds 1 MB
            leaf(i)
        marker()                            # after the disk filled: not recorded
        with pytest.raises(pytrace_cffi.TraceError, match="No space left on device") as info:
            pytrace_cffi.stop()
        trace = info.value.trace.load()
        leaves = sum(1 for c in trace if c.name.endswith(": leaf"))
        assert 20_000 < leaves < 200_000, leaves     # most of what fitted, then nothing
        assert not [c for c in trace if c.name.endswith(": marker")]
        assert trace.dropped_events <= 4096 + 512    # what memory held when it filled
        assert_nested(trace)
        del trace, info


def test_stop_with_the_spill_directory_removed_raises_trace_error_holding_every_event(tmp_path):
    import shutil
    out = tmp_path / "spill"
    pytrace_cffi.start(max_events=4096, output=str(out))
    for i in range(20_000):
        leaf(i)
    shutil.rmtree(out)                      # (the program's doing)
    for i in range(20_000):
        leaf(i)
    marker()
    with pytest.raises(pytrace_cffi.TraceError, match="removed while tracing") as info:
        pytrace_cffi.stop()
    trace = info.value.trace.load()
    assert sum(1 for c in trace if c.name.endswith(": leaf")) == 40_000
    assert [c for c in trace if c.name.endswith(": marker")]
    assert_nested(trace)
    again = pytrace_cffi.load(out)          # made again, a saved trace
    assert sum(1 for c in again if c.name.endswith(": leaf")) == 40_000



def test_a_bound_with_many_threads_keeps_most_of_its_events():
    """max_events with a dozen threads, most of them idle (a service's): what is
    kept is most of the bound, the newest of every thread. Each thread's last
    chunk took an eighth of the bound, however idle: from 8 threads on, every
    new chunk emptied all the others, and a flight recorder of 16M kept about 5%
    of it."""
    bound = 1 << 18
    stop = threading.Event()

    def idle():
        while not stop.is_set():
            time.sleep(0.005)

    def busy():
        while not stop.is_set():
            for i in range(1000):
                abs(i)

    threads = [threading.Thread(target=idle) for _ in range(11)] + [threading.Thread(target=busy)]
    pytrace_cffi.start(max_events=bound)
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    stop.set()
    for thread in threads:
        thread.join()
    with pytest.warns(TraceWarning, match="dropped"):
        trace = pytrace_cffi.stop()
    assert trace.dropped_events > bound           # (it went round)
    assert 2 * len(trace) > bound // 2, (len(trace), trace.dropped_events)
