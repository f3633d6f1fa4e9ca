"""Memory counters (memory_interval_ms), sampled by a thread of ours that the
trace leaves out. Expected values come from independent readings (VmRSS in
/proc/self/status, tracemalloc, the stand-in torch's CUDA allocations)."""
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc

import pytest

import pytrace_cffi
from pytrace_cffi import _memory
from pytrace_cffi._core import lib

HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "torch_stand_in")

def counter_samples(trace, name):
    return [(mark.ns, mark.args[name]) for mark in trace.marks
            if mark.kind == "C" and mark.name == name]


def vm_rss_bytes():
    """VmRSS from /proc/self/status, in bytes (independent of statm's pages)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS is read on Linux")
def test_rss_is_sampled_at_the_interval_from_start_to_stop():
    low = vm_rss_bytes()
    pytrace_cffi.start(memory_interval_ms=10)
    time.sleep(0.1)                 # idle: the first sample comes at once
    block = bytearray(64 << 20)
    block[::4096] = b"x" * len(block[::4096])          # touched: resident
    time.sleep(0.2)
    high = vm_rss_bytes()
    trace = pytrace_cffi.stop()
    del block
    samples = counter_samples(trace, _memory.RSS)
    times = [ns for ns, _ in samples]
    assert times == sorted(times) and len(samples) >= 5
    assert times[0] - trace.start_ns < 80e6 and trace.stop_ns - times[-1] < 80e6
    values = [value for _, value in samples]
    assert all(value % os.sysconf("SC_PAGE_SIZE") == 0 for value in values)
    assert low - (8 << 20) <= min(values) and max(values) >= high - (8 << 20)
    assert max(values) - min(values) >= 48 << 20
    # the sampler's thread is left out: its lane, its calls
    assert [t.name for t in trace.threads] == [threading.current_thread().name]
    assert not any("pytrace_cffi/_memory.py" in call.name for call in trace)
    assert {mark.thread for mark in trace.marks} == {threading.get_native_id()}
    assert not [t for t in threading.enumerate() if t.name == "pytrace_cffi memory"]


def _last_call_before_stop():
    return None


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS is read on Linux")
def test_stop_takes_a_last_sample_however_long_the_interval():
    """An interval of 10 minutes: one sample when tracing begins, one at stop() -
    after the program's last call - and none between (a stop without its last
    sample left a trace's last reading an interval before its end; the 10 ms test
    above cannot tell) (#31)."""
    pytrace_cffi.start(memory_interval_ms=600_000)
    time.sleep(0.05)
    _last_call_before_stop()
    trace = pytrace_cffi.stop()
    samples = counter_samples(trace, _memory.RSS)
    (last_call,) = [call for call in trace if call.name.endswith(": _last_call_before_stop")]
    assert len(samples) == 2, samples
    assert last_call.end_ns <= samples[-1][0] <= trace.stop_ns


def test_tracemalloc_only_when_the_program_traces_memory():
    pytrace_cffi.start(memory_interval_ms=5)
    time.sleep(0.03)
    untraced = pytrace_cffi.stop()
    assert counter_samples(untraced, _memory.TRACEMALLOC) == []
    tracemalloc.start()
    try:
        pytrace_cffi.start(memory_interval_ms=5)
        kept = [bytes(1000) for _ in range(2000)]
        time.sleep(0.03)
        trace = pytrace_cffi.stop()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    values = [value for _, value in counter_samples(trace, _memory.TRACEMALLOC)]
    assert len(values) >= 2 and max(values) <= peak
    assert max(values) >= len(kept) * 1000
    assert counter_samples(trace, _memory.CUDA_ALLOCATED) == []    # no torch here


def test_a_counter_from_a_thread_of_ours_is_not_kept_by_counter():
    """Why the sampler records through counter_sample: counter() keeps a sample on
    the calling thread's lane, and a thread of ours registered before start has none."""
    registered, go, done = threading.Event(), threading.Event(), threading.Event()

    def ours():
        lib.pt_own_thread_begin()
        registered.set()
        go.wait()
        pytrace_cffi.counter("from ours", 1)
        lib.pt_own_thread_end()
        done.set()

    thread = threading.Thread(target=ours)
    thread.start()
    registered.wait()
    pytrace_cffi.start()
    pytrace_cffi.counter("from the program", 1)
    go.set()
    done.wait()
    trace = pytrace_cffi.stop()
    thread.join()
    assert [mark.name for mark in trace.marks] == ["from the program"]


def test_cuda_memory_is_sampled_when_torch_initialized_cuda(tmp_path):
    """Through the stand-in torch (tests/torch_stand_in/torch/cuda.py)."""
    program = textwrap.dedent("""
        import json, sys, time
        import torch
        import pytrace_cffi
        assert torch.__file__.startswith(sys.argv[1])
        pytrace_cffi.start(memory_interval_ms=5)
        time.sleep(0.03)                # CUDA not initialized: no counter
        torch.cuda._allocate(123456)
        time.sleep(0.03)
        trace = pytrace_cffi.stop()
        print(json.dumps([m.args for m in trace.marks if m.name == "CUDA allocated (bytes)"]))
    """)
    # the pytrace_cffi these tests import (installed, in CI), not the source tree
    installed = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([STAND_IN, installed]))
    proc = subprocess.run([sys.executable, "-c", program, STAND_IN], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    samples = json.loads(proc.stdout)
    assert len(samples) >= 2
    assert samples == [{"CUDA allocated (bytes)": 123456}] * len(samples)


def test_counters_show_as_counter_events(tmp_path):
    pytrace_cffi.start(memory_interval_ms=5)
    time.sleep(0.02)
    trace = pytrace_cffi.stop()
    trace.export_chrome_trace(str(tmp_path / "t.json"))
    with open(tmp_path / "t.json", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    rss = [e for e in events if e.get("name") == _memory.RSS]
    assert rss and all(e["ph"] == "C" and set(e["args"]) == {_memory.RSS} for e in rss)


@pytest.mark.parametrize("value, error", [(0, ValueError), (0.05, ValueError),
                                          ("10", TypeError), (True, TypeError)])
def test_memory_interval_is_checked(value, error):
    with pytest.raises(error, match="memory_interval_ms"):
        pytrace_cffi.start(memory_interval_ms=value)
    assert not pytrace_cffi.is_tracing()


def test_real_torch_on_the_cpu_gives_no_cuda_counter(tmp_path):
    """torch imported without CUDA in use (the CPU build here): no CUDA counter,
    and asking did not initialize CUDA."""
    pytest.importorskip("torch")
    program = textwrap.dedent("""
        import json, time
        import torch
        import pytrace_cffi
        pytrace_cffi.start(memory_interval_ms=5)
        x = torch.ones(1000) * 2
        time.sleep(0.03)
        trace = pytrace_cffi.stop()
        print(json.dumps([sorted({m.name for m in trace.marks}), torch.cuda.is_initialized()]))
    """)
    proc = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    names, initialized = json.loads(proc.stdout)
    assert "RSS (bytes)" in names and _memory.CUDA_ALLOCATED not in names
    assert initialized is False
