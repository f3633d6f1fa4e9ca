"""Memory counters sampled while tracing (start(memory_interval_ms=...)): the
process's resident set size, torch's CUDA memory allocated, and tracemalloc's
traced size, each a counter track of bytes.

A thread of ours samples them. No trace records it (pt_own.c), so a counter it
recorded through pytrace_cffi.counter() would be dropped: counter() records on
the calling thread's lane, and this thread has none. It records through
counter_sample (c_src/pt_runtime.c) instead, on the lane of the thread that
started tracing. Each sample keeps the GIL from when the thread wakes to when it
waits again (RSS is read in C, counter_sample is a Python call, not a cffi one
that would let the GIL go): one switch of the GIL a sample.
"""
import sys
import threading

from ._core import lib
from ._own_threads import own_thread_begin
from ._runtime import counter_sample, resident_bytes

RSS = "RSS (bytes)"
CUDA_ALLOCATED = "CUDA allocated (bytes)"
TRACEMALLOC = "tracemalloc (bytes)"
POLL_S = 0.001          # until tracing runs (start() calls nothing once it does)


def cuda_allocated():
    """torch.cuda.memory_allocated() when the program imported torch and CUDA is
    initialized (asking never imports torch nor initializes CUDA); else None."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            return int(cuda.memory_allocated())
    except Exception:           # noqa: BLE001 - a broken CUDA leaves the counter out
        pass
    return None


def tracemalloc_current():
    """tracemalloc's traced size now, when the program has tracemalloc tracing."""
    tracemalloc = sys.modules.get("tracemalloc")
    if tracemalloc is not None and tracemalloc.is_tracing():
        return tracemalloc.get_traced_memory()[0]
    return None


class MemorySampler:
    """Samples the counters every interval_ms from a thread of ours, from the
    moment tracing runs (the first sample then) to end() (the last sample, before
    tracing stops). Its thread starts before tracing (prepare()), so that start()
    never seeds it, and polls until tracing runs: start() calls nothing once the
    hooks are live, as whatever it ran then would be recorded as the program's."""

    def __init__(self, interval_ms):
        self._interval_s = interval_ms / 1000
        self._registered = threading.Event()
        self._done = threading.Event()
        self._thread = None

    def prepare(self):
        self._thread = threading.Thread(target=self._run, name="pytrace_cffi memory",
                                        daemon=True)
        self._thread.start()
        self._registered.wait()

    def end(self):
        """Takes the last sample and waits for the thread (call before pt_stop)."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self):
        own_thread_begin()
        self._registered.set()
        try:
            running = False
            while True:
                running = self.sample() or running
                if self._done.wait(self._interval_s if running else POLL_S):
                    if running:
                        self.sample()
                    break
        finally:
            lib.pt_own_thread_end()

    @staticmethod
    def sample():
        """Records the counters there are; False when tracing does not run."""
        for name, value in ((RSS, resident_bytes()), (CUDA_ALLOCATED, cuda_allocated()),
                            (TRACEMALLOC, tracemalloc_current())):
            if value is not None and not counter_sample(name, value):
                return False
        return True
