"""Tracing windows for `run`: the whole run, or windows opened and closed by a
signal (each signal toggles; each window gets its own numbered file), or one
window bounded by --delay and --duration, or the steps a --schedule picks."""
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading

from . import _has_session, start, stop
from ._core import lib
from ._progress import announce_writing, counted, finish_command, written_note
from .errors import TraceError
from .formats import numbered
from .schedule import Action, ScheduledTracing, schedule


def signal_number(name):
    """"USR2", "SIGUSR2" or "12" -> the signal's number; ValueError otherwise."""
    text = name.upper()
    if text.isdigit():
        return int(text)
    found = getattr(signal, text if text.startswith("SIG") else "SIG" + text, None)
    if not isinstance(found, int):
        raise ValueError(f"unknown signal {name!r}")
    return int(found)


# The run whose open window is written before the process ends without
# returning to `run` (os._exit) or becomes another program (exec): (pid, Windows).
# A follow run does this in processes.py (its exec'd image can finish the job).
_ending_guard = None
_real_exit = os._exit
_audit_installed = False


def _exit_writing(code):
    """os._exit during a run: the open window is written first."""
    _write_before_ending()
    _real_exit(code)


def _audit(event, args):
    if event == "os.exec" and _ending_guard is not None:
        from .processes import _can_exec
        try:
            if _can_exec(args[0]):
                _write_before_ending()
        except Exception:            # noqa: BLE001 - an audit hook must never fail the call
            pass


def _write_before_ending():
    global _ending_guard
    guard, _ending_guard = _ending_guard, None
    if guard is None or guard[0] != os.getpid():
        return
    try:
        guard[1].finish()
    except Exception as exc:         # noqa: BLE001 - the program's exit goes on
        print(f"pytrace_cffi: writing the trace failed ({exc.__class__.__name__}: {exc})",
              file=sys.stderr)


def _on_sigterm(signum, frame):
    """SIGTERM during a run (the program has no handler of its own): the open
    window is written, then the process dies of the signal as it would have."""
    from .processes import _die_of_sigterm
    _write_before_ending()
    _die_of_sigterm()


def _guard_ending(windows):
    """Until windows.finish(): os._exit, an exec or SIGTERM of this process writes
    its open window first."""
    global _ending_guard, _audit_installed
    _ending_guard = (os.getpid(), windows)
    os._exit = _exit_writing
    if not _audit_installed:
        sys.addaudithook(_audit)
        # A forked child owes nothing, and its SIGTERM must stay the default: a
        # Python handler would not run while it waits in C (Pool.terminate()).
        os.register_at_fork(after_in_child=_unguard_ending)
        _audit_installed = True
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass


def _unguard_ending():
    global _ending_guard
    _ending_guard = None
    if os._exit is _exit_writing:
        os._exit = _real_exit
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):
            pass


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
    """(stop()'s trace, whether a Ctrl-C came meanwhile), with SIGINT held off.
    A TraceError (a failed spill, a spill directory removed) is said in one
    line, and its trace, saved as far as it went, returned all the same."""
    with interrupts_held() as came:
        try:
            return stop(), bool(came)
        except TraceError as exc:
            print(f"pytrace_cffi: {exc}", file=sys.stderr)
            return exc.trace, bool(came)
class _OwnTimer(threading.Timer):
    """A threading.Timer that no trace records: it says it is ours (pt_own.c)
    before anything else, and registered is set once it has."""

    def __init__(self, *args):
        super().__init__(*args)
        self.registered = threading.Event()

    def run(self):
        lib.pt_own_thread_begin()       # when 16 are ours already it is traced
        self.registered.set()
        try:
            super().run()
        finally:
            lib.pt_own_thread_end()


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
        # A window being closed and written, and whether a signal handled meanwhile
        # (its handler runs inside the writer) owes a window once it is written.
        self._closing = False
        self._open_after_close = False

    # -- ways to drive it ----------------------------------------------------
    def guard_ending(self):
        """os._exit or an exec of this process writes the open window first (until
        finish())."""
        _guard_ending(self)

    def whole_run(self):
        self.open()

    def on_signal(self, signum):
        self._numbered = True
        signal.signal(signum, lambda *_: self.toggle())

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

    # -- windows -------------------------------------------------------------
    def open(self, noop=False):
        with self._lock:
            if _has_session():
                return
            options = self._options
            if noop:                    # a schedule's warmup: hooks on, nothing kept
                options = dict(options, noop=True, max_events=None)
            elif self._spill:
                beside = os.path.dirname(os.path.abspath(self._output.rstrip(os.sep)))
                self._spill_dir = tempfile.mkdtemp(prefix=".pytrace_cffi-spill-", dir=beside)
                options = dict(options, output=self._spill_dir)
        # Last statement: what this frame runs once the hooks are live is recorded.
        start(**options)

    def close(self, save=True):
        self._closing = True
        try:
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
            spill_dir, self._spill_dir = self._spill_dir, None
            if spill_dir is not None:       # (made elsewhere when it was removed)
                spill_dir = getattr(result, "directory", spill_dir)
            self._count += 1
            path = numbered(self._output, self._count) if self._numbered else self._output
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
                shutil.rmtree(spill_dir, ignore_errors=True)
            print(f"pytrace_cffi: {counted(len(result), 'call')} on "
                  f"{counted(len(result.threads), 'thread')} "
                  f"-> {written}{written_note(written, started)}", file=sys.stderr)

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
        """At the program's end: closes an open window; says if none was traced."""
        _unguard_ending()
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
            shutil.rmtree(kept, ignore_errors=True)
            continue
        print(f"pytrace_cffi: the trace is in {kept} (finish it with: "
              f"{finish_command([kept], path)})", file=sys.stderr)
        return
    print(f"{said}the trace is lost (no place took it)", file=sys.stderr)


def parse_schedule(text):
    """"wait,warmup,active[,repeat]" -> schedule() keywords; repeat is 1 when
    left out (one window), 0 repeats forever. ValueError otherwise."""
    parts = text.split(",")
    if len(parts) not in (3, 4) or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--schedule takes wait,warmup,active[,repeat] (integers), "
                         f"not {text!r}")
    numbers = [int(p) for p in parts] + ([1] if len(parts) == 3 else [])
    wait, warmup, active, repeat = numbers
    if active < 1:
        raise ValueError("--schedule: active must be at least 1")
    return {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}


class ScheduledWindows(ScheduledTracing):
    """run --schedule: the schedule() of trace(schedule=...) driving Windows, one
    step at a time. A step ends at each pytrace_cffi.step() the program calls,
    and at the end of each training step of torch's optimizers (OptimizerSteps).

    Both come from the program's own code, between its calls, never from inside
    our hooks: stopping or starting there is what signal windows already do. The
    watcher's tag callback, which also sees optimizer steps, runs inside the C
    hook (between recording a call and returning to the interpreter, with the
    tracer and the thread's buffer in use) and only while a window records, not
    while the schedule waits: it is no place to switch windows."""

    def __init__(self, schedule_kwargs, windows):
        windows._numbered = schedule_kwargs["repeat"] != 1
        super().__init__(schedule(**schedule_kwargs), None, self._open, None, {})
        self._windows = windows
        self._busy = False

    def _open(self, noop=False):
        self._windows.open(noop=noop)

    def _leave(self, save):
        self._action = Action.NONE
        self._windows.close(save=save)

    def step(self):
        if self._busy:          # a step taken by code a window switch runs
            return
        self._busy = True
        try:
            super().step()
        finally:
            self._busy = False


class OptimizerSteps:
    """Calls on_step() at the end of each training step of torch's optimizers,
    through torch's own global optimizer post-hook, registered once
    torch.optim.optimizer is loaded (found by a finder on sys.meta_path that
    wraps that one module's loader: torch is never imported here). With several
    optimizers, a training step ends when every optimizer seen has stepped once
    more (the first step ends with the first optimizer's).

    A program that marks its own steps with pytrace_cffi.step() is followed
    instead (program_step): as torch.profiler counts only prof.step(), its
    steps alone count from its first call, so a loop that calls both is not
    counted twice."""

    MODULE = "torch.optim.optimizer"

    def __init__(self, on_step):
        self._on_step = on_step
        self._counts = {}           # id(optimizer) -> steps
        self._held = []             # optimizers seen: their ids never alias
        self._done = 0
        self._program_steps = False
        self.handle = None
        self._finder = None

    def program_step(self):
        """pytrace_cffi.step() was called: from now on the program's calls alone
        end steps. Its first call ends a step the optimizers already ended (the
        last one they counted), so it is not counted again."""
        if not self._program_steps:
            self._program_steps = True
            self.uninstall()
            if self._done:
                return
        self._on_step()

    def install(self):
        module = sys.modules.get(self.MODULE)
        if module is not None and hasattr(module, "register_optimizer_step_post_hook"):
            self._register(module)
            return
        self._finder = _LoadedHook(self.MODULE, self._register)
        sys.meta_path.insert(0, self._finder)

    def uninstall(self):
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        if self.handle is not None:
            self.handle.remove()
            self.handle = None

    def _register(self, module):
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        register = getattr(module, "register_optimizer_step_post_hook", None)
        if register is None:
            print("pytrace_cffi: this torch has no register_optimizer_step_post_hook: "
                  "--schedule counts only pytrace_cffi.step() calls", file=sys.stderr)
            return
        self.handle = register(self._post_hook)

    def _post_hook(self, optimizer, args, kwargs):
        if self._program_steps:
            return
        key = id(optimizer)
        if key not in self._counts:
            self._held.append(optimizer)
            self._counts[key] = 0
        self._counts[key] += 1
        done = min(self._counts.values())
        if done > self._done:
            self._done = done
            self._on_step()


class _LoadedHook:
    """A sys.meta_path finder that finds nothing itself: for one module name it
    asks the finders after it, and has the spec's loader call loaded(module) once
    the module has run."""

    def __init__(self, name, loaded):
        self._name = name
        self._loaded = loaded
        self._finding = False

    def find_spec(self, name, path=None, target=None):
        if name != self._name or self._finding:
            return None
        self._finding = True
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._finding = False
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        loaded = self._loaded

        def exec_then_register(module):
            exec_module(module)
            loaded(module)
        try:
            if exec_module is None:
                raise TypeError
            loader.exec_module = exec_then_register
        except (AttributeError, TypeError):
            print(f"pytrace_cffi: cannot follow the loading of {name} (its loader is "
                  f"{type(loader).__name__}): --schedule counts only pytrace_cffi.step() "
                  "calls", file=sys.stderr)
            return None
        return spec
