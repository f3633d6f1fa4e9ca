"""Tracing windows for `run`: the whole run, or windows opened and closed by a
signal (each signal toggles; each window gets its own numbered file), or one
window bounded by --delay and --duration."""
import os
import shutil
import signal
import sys
import tempfile
import threading

from . import _has_session, start, stop


def numbered(path, number):
    """out.json -> out.1.json, out.json.gz -> out.1.json.gz (.html and .pftrace
    alike), dir -> dir.1"""
    for suffix in (".json.gz", ".json", ".html", ".pftrace"):
        if path.endswith(suffix):
            return f"{path[:-len(suffix)]}.{number}{suffix}"
    return f"{path.rstrip(os.sep)}.{number}"


def signal_number(name):
    """"USR2", "SIGUSR2" or "12" -> the signal's number; ValueError otherwise."""
    text = name.upper()
    if text.isdigit():
        return int(text)
    found = getattr(signal, text if text.startswith("SIG") else "SIG" + text, None)
    if not isinstance(found, int):
        raise ValueError(f"unknown signal {name!r}")
    return int(found)


class Windows:
    """write(trace, path) writes a window's trace and returns the path it went to
    (another one when path failed), or None when it was lost (then .lost).

    With spill (options carry max_events), each window spills every event to a
    temporary directory beside the output instead of dropping the oldest, and the
    window's trace is read back from it when written; the directory goes once the
    trace is written, and stays (and is named) when writing failed."""

    def __init__(self, output, options, write, spill=False):
        self._output = output
        self._options = options
        self._write = write
        self._spill = spill
        self._spill_dir = None
        self.lost = False
        self._lock = threading.RLock()
        self._numbered = False
        self._count = 0
        self._timers = []

    # -- ways to drive it ----------------------------------------------------
    def whole_run(self):
        self.open()

    def on_signal(self, signum):
        self._numbered = True
        signal.signal(signum, lambda *_: self.toggle())

    def after(self, delay, duration):
        """One window: opens after `delay` seconds, closes `duration` later."""
        if delay:
            self._timer(delay, self.open)
        else:
            self.open()
        if duration:
            self._timer(delay + duration, self.close)

    def _timer(self, seconds, action):
        timer = threading.Timer(seconds, action)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    # -- windows -------------------------------------------------------------
    def open(self):
        with self._lock:
            if _has_session():
                return
            options = self._options
            if self._spill:
                beside = os.path.dirname(os.path.abspath(self._output.rstrip(os.sep)))
                self._spill_dir = tempfile.mkdtemp(prefix=".pytrace_cffi-spill-", dir=beside)
                options = dict(options, output=self._spill_dir)
        # Last statement: what this frame runs once the hooks are live is recorded.
        start(**options)

    def close(self):
        with self._lock:
            if not _has_session():
                return
            result = stop()
            spill_dir, self._spill_dir = self._spill_dir, None
            if spill_dir is not None:
                result = result.load()
            self._count += 1
            path = numbered(self._output, self._count) if self._numbered else self._output
            written = self._write(result, path)
            if written is None:
                self.lost = True
                if spill_dir is not None:
                    print(f"pytrace_cffi: the spilled events stay in {spill_dir!r} "
                          "(pytrace_cffi.load() or `export` read them)", file=sys.stderr)
                return
            if spill_dir is not None:
                shutil.rmtree(spill_dir, ignore_errors=True)
            print(f"pytrace_cffi: {len(result)} calls on {len(result.threads)} threads "
                  f"-> {written}", file=sys.stderr)

    def toggle(self):
        if _has_session():
            self.close()
        else:
            self.open()

    def finish(self):
        """At the program's end: closes an open window; says if none was traced."""
        for timer in self._timers:
            timer.cancel()
        self.close()
        if self._count == 0:
            print("pytrace_cffi: no window was traced (no signal came, or the program "
                  "ended before --delay)", file=sys.stderr)
