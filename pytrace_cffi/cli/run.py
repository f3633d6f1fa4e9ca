"""`run`'s output, from the program's start to OUT: one Run, made once per run
from its RunPlan (cli/arguments.py: OUT and its format, decided there once,
and the options), owns the tracing windows (the whole
run, or windows opened and closed by a signal, each signal toggling and each
window getting its own numbered file, or one window bounded by --delay and
--duration; the steps a --schedule picks: see steps.py), the job of each
window when children are followed (its per-process traces in a directory of
their own, joined into the window's OUT when it closes: each such window is
start(output=OUT, follow_children=True), whose session owns its job from start
to OUT), the guard that writes OUT when the process ends another way
(follow/exits.py), and the writing of the windows it records itself."""
import contextlib
import os
import signal
import sys
import threading

from .. import start
from .._files import new_directory
from .._running import has_session as _has_session, stop_holding
from .._core import lib
from .._own_threads import own_thread_begin
from .._progress import (announce_writing, counted, finish_command, suggest_smaller,
                         written_note)
from ..follow import exits
from .. import formats
from ..model.trace import StoredTrace


@contextlib.contextmanager
def interrupts_held():
    """Holds SIGINT off for the block (main thread), so that a trace is never
    left half-saved: yields a list that gets an entry for each Ctrl-C meanwhile,
    which the caller handles once the block is done."""
    came = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: came.append(True))
    except ValueError:               # not the main thread: signals go to that one
        yield came
        return
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, previous)


def stopped():
    """(stop()'s trace, whether a Ctrl-C came as it was saved), with SIGINT held
    off meanwhile (not while start(output=OUT)'s OUT is written: see
    _running.stop_holding). A TraceError (a failed spill, a spill directory
    removed) is said in one line, and its trace, saved as far as it went,
    returned all the same."""
    result, interrupted, failure = stop_holding(interrupts_held)
    if failure is not None:
        print(f"pytrace_cffi: {failure}", file=sys.stderr)
    return result, interrupted


class _OwnTimer(threading.Timer):
    """A threading.Timer that no trace records: it says it is ours (pt_own.c)
    before anything else, and registered is set once it has."""

    def __init__(self, *args):
        super().__init__(*args)
        self.registered = threading.Event()

    def run(self):
        own_thread_begin()
        self.registered.set()
        try:
            super().run()
        finally:
            lib.pt_own_thread_end()


class Run(exits.OwedOutput):
    """`run`'s output, as plan (cli/arguments.RunPlan) decided it. write(trace,
    path) writes a window's trace of this process and returns the path it went
    to (another one when path failed), or None when it was lost (then .lost).

    follow: each window is start(output=its OUT, follow_children=True,
    processes_dir=keep_in: --processes-dir, or None): a job whose session owns
    it from start to OUT (its per-process traces in a new directory, joined into
    OUT by the window's stop(), or by os._exit, SIGTERM or an exec'd image when
    the process ends another way). A .pftrace window without following is
    start(output=OUT) too (encoded as the program runs).

    With spill (options carry max_events; not with follow), each window spills
    every event to a temporary directory beside the output instead of dropping
    the oldest, and the window's trace is read back from it when written; the
    directory goes once the trace is written, and stays (and is named) when
    writing failed."""

    def __init__(self, plan, write=formats.write_or_fall_back):
        options = plan.options
        self._output = plan.output
        self._format = plan.format
        # A .pftrace window that keeps every event (no --max-events, no flight
        # recorder) is encoded while the program runs, as with children followed:
        # start(output=OUT), whose stop() writes OUT.
        self._encoded_as_it_runs = (self._format.live and not options.get("max_events")
                                    and not options.get("flight_recorder")
                                    and os.environ.get("PYTRACE_CFFI_LIVE", "1") != "0")
        self._options = options
        self._write = write
        self._spill = plan.spill
        self._spill_dir = None
        self._follow = plan.follow
        self._keep_in = plan.keep_in
        self.lost = False
        self._lock = threading.RLock()
        self._numbered = False
        self._count = 0
        self._timers = []
        # A window being closed and written, and whether a signal handled meanwhile
        # (its handler runs inside the writer) owes a window once it is written.
        self._closing = False
        self._open_after_close = False

    # -- ways to drive it ----------------------------------------------------
    def guard_ending(self):
        """os._exit, SIGTERM or an exec of this process writes the open window
        first (pay(), until finish()); following, each window's session owes its
        OUT instead (a finish.RunFinish)."""
        if not self._follow:
            exits.guard_window(self)

    def unpaid(self):
        return f"its window's trace is lost ({self._output} is not written)"

    def pay(self):
        """The open window written, as the process ends without returning to
        `run` (exits.OwedOutput). Never raises."""
        try:
            self.finish()
        except Exception as exc:     # noqa: BLE001 - the program's exit goes on
            print(f"pytrace_cffi: writing the trace failed ({exc.__class__.__name__}: {exc})",
                  file=sys.stderr)

    def whole_run(self):
        self.open()

    def on_signal(self, signum):
        self._numbered = True
        signal.signal(signum, lambda *_: self.toggle())

    def number_windows(self, numbered):
        """Whether each window goes to a numbered file (a repeating schedule)."""
        self._numbered = numbered

    def after(self, delay, duration):
        """One window: opens after `delay` seconds, closes `duration` later."""
        if duration:                    # first: a thread born in a window would be seen
            self._timer(delay + duration, self.close)
        if delay:
            self._timer(delay, self.open)
        else:
            self.open()

    def _timer(self, seconds, action):
        timer = _OwnTimer(seconds, action)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()
        timer.registered.wait()

    def _window_names(self, number):
        """(window number's OUT, where its per-process traces stay when children
        are followed): OUT and --processes-dir DIR, or OUT.<n> and DIR.<n> with
        numbered windows; True for DIR when none was given (a temporary
        directory, also when OUT names a directory: a saved trace, not the
        job's directory)."""
        keep_in = True if self._keep_in is None else self._keep_in
        if not self._numbered:
            return self._output, keep_in
        return (formats.numbered(self._output, number, self._format),
                keep_in if keep_in is True else formats.numbered(keep_in, number,
                                                                 formats.DIRECTORY))

    def _window_path(self, number):
        return self._window_names(number)[0]

    # -- windows -------------------------------------------------------------
    def open(self, noop=False):
        with self._lock:
            if _has_session():
                return
            options = self._options
            if noop:                    # a schedule's warmup: hooks on, nothing kept
                options = dict(options, noop=True, max_events=None)
            elif self._follow:
                output, processes_dir = self._window_names(self._count + 1)
                options = dict(options, follow_children=True, output=output,
                               processes_dir=processes_dir)
            elif self._spill:
                beside = os.path.dirname(os.path.abspath(self._output.rstrip(os.sep)))
                self._spill_dir = new_directory(".pytrace_cffi-spill-", where=beside)
                options = dict(options, output=self._spill_dir)
            elif self._encoded_as_it_runs:
                options = dict(options, output=self._window_path(self._count + 1))
        try:
            # Last statement: what this frame runs once the hooks are live is recorded.
            start(**options)
        except ValueError as exc:       # (a later window's DIR.<n> holding files)
            self._count += 1            # (its number is not taken again)
            print(f"pytrace_cffi: window {self._count} is not traced: {exc}",
                  file=sys.stderr)

    def close(self, save=True):
        self._closing = True
        try:
            with exits.sigterm_waits():     # OUT written whole, then a SIGTERM ends us
                self._close(save)
        finally:
            self._closing = False

    def _close(self, save):
        with self._lock:
            if not _has_session():
                return
            result, interrupted = stopped()
            if not save:                # a schedule's warmup
                return
            if isinstance(result, StoredTrace) and result.path is not None:
                # start(output=OUT) wrote it (and said so)
                self._count += 1
                self.lost = self.lost or not result.written
                return
            spill_dir, self._spill_dir = self._spill_dir, None
            if (spill_dir is not None and isinstance(result, StoredTrace)
                    and result.directory is not None):
                spill_dir = result.directory    # (made elsewhere when it was removed)
            self._count += 1
            path = self._window_path(self._count)
            try:
                if interrupted:
                    raise KeyboardInterrupt
                started = announce_writing(path)
                if spill_dir is not None:
                    result = result.load()
                written = self._write(result, path)
            except KeyboardInterrupt:
                self.lost = True
                _keep_interrupted(result, path, spill_dir)
                return
            if written is None:
                self.lost = True
                if spill_dir is not None:
                    print(f"pytrace_cffi: the spilled events stay in {spill_dir!r} "
                          f"(write them later with: {finish_command([spill_dir], path)})",
                          file=sys.stderr)
                else:
                    print("pytrace_cffi: the trace is lost", file=sys.stderr)
                return
            if spill_dir is not None:
                import shutil
                shutil.rmtree(spill_dir, ignore_errors=True)
            from ..render.summary import calls_begun     # as summary counts them
            from ..model.trace import threads_text
            print(f"pytrace_cffi: {counted(calls_begun(result), 'call')} on "
                  f"{threads_text(result.threads)} "
                  f"-> {written}{written_note(written, started)}", file=sys.stderr)
            suggest_smaller(written)

    def toggle(self):
        if self._closing:
            # Signalled while the last window is written: a window opened now would
            # trace the writer (its encoder threads, its calls). It opens once written.
            self._open_after_close = not self._open_after_close
            return
        if _has_session():
            self.close()
            if self._open_after_close:
                self._open_after_close = False
                self.open()             # last: what runs once the hooks are live is recorded
        else:
            self.open()

    def finish(self):
        """At the program's end: closes an open window; says if none was traced.
        Following, OUT may be written (or handed over, at an exec) already."""
        if self._follow and exits.run_ended_early():
            return
        exits.unguard_window(self)
        for timer in self._timers:
            timer.cancel()
        self.close()
        if self._count == 0:
            print("pytrace_cffi: no window was traced (no signal came, the program "
                  "ended before --delay, or it took fewer steps than --schedule waits)",
                  file=sys.stderr)


def _keep_interrupted(result, path, spill_dir):
    """A Ctrl-C while a window's trace was written: OUT is not written (nor left
    half written); the trace stays where it is (a spill directory), or is saved
    to a directory first (Ctrl-C held meanwhile), and the line says where and the
    command that finishes it."""
    said = f"pytrace_cffi: interrupted while writing {path}: "
    if spill_dir is not None:
        print(f"{said}the trace stays in {spill_dir} (finish it with: "
              f"{finish_command([spill_dir], path)})", file=sys.stderr)
        return
    name = f"pytrace_cffi-{os.getpid()}-interrupted"
    import tempfile
    for where in (tempfile.gettempdir(), os.getcwd()):
        kept = os.path.join(where, name)
        if os.path.exists(kept):
            continue
        print(f"{said}saving the trace to {kept} first (Ctrl-C waits for it)",
              file=sys.stderr)
        try:
            with interrupts_held():         # (a Ctrl-C meanwhile is let go)
                result.save(kept)
        except (OSError, KeyboardInterrupt):
            import shutil
            shutil.rmtree(kept, ignore_errors=True)
            continue
        print(f"pytrace_cffi: the trace is in {kept} (finish it with: "
              f"{finish_command([kept], path)})", file=sys.stderr)
        return
    print(f"{said}the trace is lost (no place took it)", file=sys.stderr)


