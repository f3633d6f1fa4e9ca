"""The one set of exit guards: what is saved before this process ends.

A process can end without returning to whoever would save its trace: by
os._exit (multiprocessing's way), by an exec (another program replaces it), by
SIGTERM (when the program has no handler of its own), or at interpreter exit.
One os._exit wrapper, one audit hook, one SIGTERM handler and one atexit
handler, whose state is one object (_ExitState), pay what the process owes on
its way out, in one order (pay_owed):

- a followed process's trace is saved (finish_here; install_exit_paths, by
  session.FollowSession);
- then the run's output this process owes (owe(): an OwedOutput) is written:
  `run`'s open window without following (cli.run.Run, guard_window), or a
  job's OUT (finish.RunFinish: start(output=OUT), so each window of `run -o
  OUT`, and an exec'd image that took it over). At an exec it is written, or
  handed to the new image when that will be followed.

The audit hook also notes the children a followed process launches (launches.py).
"""
import atexit
import contextlib
import os
import signal
import sys
import threading
import time

from .. import _running
from .._core import ffi, lib
from ..errors import TraceError
from .identity import ENV, _say, following
from .launches import _note_launch, _unfollowable, _util_finder, _watch_spawn

_real_exit = os._exit


class _ExitState:
    """What this process's exit guards hold: one instance, _state (a signal
    handler, an audit hook and os._exit reach it, so it is the process's)."""

    def __init__(self):
        self.audit_installed = False
        self.saved_at_exit = False      # atexit runs finish_here (registered once)
        self.window_fork_hook = False   # a forked child drops the window guard (once)
        self.exit_paths = False         # install_exit_paths is in force (until restore_exit_paths)
        # The run's output this process owes on its way out (an OwedOutput, see
        # owe()), and the one an exec took (written, or handed to the new image):
        # the exec failed or a SIGTERM came first, so it is still this process's.
        self.owed = None
        self.paid_at_exec = None
        self.finishing = False
        self.saves = 0                  # how many saves (of a trace, of OUT) are under way
        self.terminate_after = False    # a SIGTERM came while saving: the process dies of it after
        self.dying = False              # a SIGTERM ends the process (_end_by_sigterm, once)
        self.writing_out = False        # `run`'s OUT (or start()'s output) is being written here
        self.said_waiting = False
        # popped by whoever serves a SIGTERM: the main thread's handler or, when
        # that cannot run, the flight recorder's thread (sigterm_off_main)
        self.sigterm_token = [True]
        # each thread's last subprocess.Popen launch (its posix_spawn is the same one)
        self.popen = threading.local()


_state = _ExitState()
SIGTERM_MAIN_S = 0.25        # the main thread's time to run its handler first
_LOAD_UNLOCKED = sys.modules["_frozen_importlib"]._load_unlocked.__code__   # runs a module


# -- the guards ---------------------------------------------------------------

class OwedOutput:
    """A run's output this process owes on its way out (owe()): its owner would
    have written it had the process returned to it. pay() writes it as the
    process ends (os._exit, SIGTERM, an exec'd image's exit); before_exec(
    followed) as an exec replaces the image (followed: the new image will be
    traced, and can take it over); unclaimed() after an exec that did not
    replace the process (it failed, or a SIGTERM came first). None raises.
    pid: the process that owes it (a forked child owes nothing)."""

    pid = None

    def pay(self):
        raise NotImplementedError

    def unpaid(self):
        """What is lost, and where the rest is, when the process ends without
        paying (a SIGTERM while it is stuck in C: _arm_sigterm_relay)."""
        raise NotImplementedError

    def before_exec(self, followed):
        self.pay()

    def unclaimed(self):
        pass


def _exit_saving(code):
    """os._exit while guarded: what the process owes is paid first (pay_owed)."""
    pay_owed()                       # (a SIGTERM meanwhile ends the process after)
    _real_exit(code)


def _on_sigterm(signum, frame):
    """SIGTERM while guarded (the program has no handler of its own): saved as at
    os._exit, then the process dies of the signal as it would have. One that
    comes while anything is being saved (this handler's own work, stop(), OUT
    being written; the relay sends it again every 200 ms) waits for the save."""
    lib.pt_sigterm_heard()           # (the relay's patience: the main thread runs Python)
    _state.terminate_after = True
    if _state.saves:
        if _state.writing_out and not _state.said_waiting:
            _state.said_waiting = True
            _say("SIGTERM: the process ends once the trace is written")
        return
    if not _take_sigterm():
        return                       # the flight recorder's thread serves it
    with saving():                   # its end does the rest (_end_by_sigterm)
        _set_aside_half_imports(frame)
        lib.pt_sigterm_guard(0)      # the relay's job is done: its timer stops
        recorder = running_recorder()
        if recorder is not None:
            recorder.on_sigterm()


def _set_aside_half_imports(frame):
    """The modules the signal landed in the import of (frame: where the handler
    was called, and its callers) leave sys.modules: the save imports what it
    needs afresh, where it would find json or collections half made ("partially
    initialized module", the trace lost). The process ends after the save, so
    nothing puts them back; another thread importing one waits for this one's lock."""
    while frame is not None:
        if frame.f_code is _LOAD_UNLOCKED:
            name = getattr(frame.f_locals.get("spec"), "name", None)
            module = sys.modules.get(name) if isinstance(name, str) else None
            if getattr(getattr(module, "__spec__", None), "_initializing", False):
                sys.modules.pop(name, None)
        frame = frame.f_back


def _take_sigterm():
    """Whether the caller is the one to serve the SIGTERM (list.pop is atomic:
    no lock a signal handler could wait on)."""
    try:
        return _state.sigterm_token.pop()
    except IndexError:
        return False


def sigterm_off_main(recorder):
    """The flight recorder's thread, told of a SIGTERM by its C thread (the relay
    of pt_signals.c), serves it when the main thread cannot: waiting in C with the
    GIL released (a ctypes call, a gloo wait), it never runs the Python handler.
    The main thread's handler gets SIGTERM_MAIN_S first; else the recorder dumps
    and the process dies of SIGTERM as it would have, unless a save is under way
    (its end does that). The trace of this process is not saved here: the dump
    holds its ring."""
    deadline = time.monotonic() + SIGTERM_MAIN_S
    while not _state.terminate_after and time.monotonic() < deadline:
        time.sleep(0.02)
    if _state.terminate_after or signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        return                       # the main thread's (or the program's) handler has it
    if not _take_sigterm():
        return
    lib.pt_sigterm_guard(0)          # (its timer's signals would cut C calls short)
    recorder.on_sigterm()
    if _state.saves:                      # a save under way ends the process at its end
        _state.terminate_after = True
        return
    lib.pt_flight_wait(2_000_000_000)   # its clone (a process of its own) finishes first
    lib.pt_sigterm_say_last_words()     # what is not written, and where the rest is
    die_of_sigterm()


class saving:
    """A save under way (reentrant): a SIGTERM meanwhile (see _on_sigterm) waits
    until the outermost one ends, then the process dies of it."""

    def __enter__(self):
        _state.saves += 1
        if _state.saves == 1:
            lib.pt_sigterm_hold(1)   # the relay waits for the save, however long
        return self

    def __exit__(self, *exc):
        _state.saves -= 1
        if not _state.saves:
            lib.pt_sigterm_hold(0)
            if _state.terminate_after:
                _end_by_sigterm()
        return False


def _end_by_sigterm():
    """A SIGTERM (served by _on_sigterm, or one that waited for a save) ends the
    process, once what it owes is paid (pay_owed), and an output handed over to
    an exec that the signal now prevents is written here: the save that ended
    may be only the first of the way out (an exec'd image saves its trace at
    exit, then writes OUT)."""
    if not _state.dying:
        _state.dying = True
        with saving():
            lib.pt_sigterm_guard(0)
            pay_owed()
            if _state.paid_at_exec is not None:
                _state.paid_at_exec.unclaimed()
    die_of_sigterm()


@contextlib.contextmanager
def sigterm_waits():
    """A window's trace being stopped and written (`run`'s end, a window closing,
    start(output=...)'s stop()): a SIGTERM meanwhile waits until OUT is written,
    then the process dies of it, instead of losing OUT half written (unless the
    program has a SIGTERM handler of its own, or this is not the main thread)."""
    installed = False
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
                installed = True
        except (ValueError, OSError):
            pass
    outer, _state.writing_out = _state.writing_out, True
    try:
        with saving():
            yield
    finally:
        _state.writing_out = outer
        if (installed or not _state.exit_paths) and _state.owed is None and not _state.saves:
            _restore_default_sigterm()


def _arm_sigterm_relay():
    """pt_signals.c's relay: a SIGTERM is never missed; one whose handler cannot
    run (the main thread stuck in C) ends the process unsaved 2 s later, and
    these words (what is lost, where the rest is) are its last."""
    words = (f"pytrace_cffi: pid {os.getpid()}: SIGTERM came while the main thread was in C "
             "code that does not return: the process ends as it would untraced, its trace "
             "not saved")
    session = _running.session
    if session is not None and session.flight is not None:
        words += " (its flight recorder's dump holds its ring)"
    elif following(session):
        words += f" (only what it spilled stays, in {session.process_dir})"
    owed = _state.owed
    if owed is not None:
        words += f"; {owed.unpaid()}"
    data = (words + "\n").encode("utf-8", "replace")[-1000:]
    lib.pt_sigterm_last_words(data, len(data))
    lib.pt_sigterm_guard(1)


def _restore_default_sigterm():
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            lib.pt_sigterm_guard(0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError):
        pass


def die_of_sigterm():
    """The process dies of SIGTERM as it would have untraced (from any thread:
    pt_signals.c sets the default action, unblocks it here and sends it)."""
    lib.pt_die_of_signal(signal.SIGTERM)


def install_uncaught_hook():
    """The flight recorder's: an uncaught exception (sys.excepthook's audit
    event, whichever hook the program has) dumps it first (_audit)."""
    _install_audit()


def running_recorder():
    """The running session's flight recorder, or None."""
    session = _running.session
    return None if session is None else session.flight


def _audit(event, args):
    """Audit hook (installed once): before os.exec replaces the process, what it
    owes is paid (_before_exec); a followed process notes its children; an
    uncaught exception dumps the flight recorder."""
    if event == "sys.excepthook":
        recorder = running_recorder()
        if recorder is not None:
            recorder.on_uncaught(*args[1:4])     # (type, value, traceback)
        return
    if event not in ("os.exec", "subprocess.Popen", "os.posix_spawn", "os.spawn"):
        return
    try:
        if event == "os.exec":
            _before_exec(args[0], args[1], args[-1])
        else:
            _note_child(event, args[0], args[1], args[-1])
    except Exception:            # noqa: BLE001 - an audit hook must never fail the call
        pass


def _before_exec(executable, argv, env):
    """os.exec is about to replace the process: a followed process's trace is
    saved (and the exec noted), then the output owed is written, or handed to
    the new image when it will be followed."""
    if not can_exec(executable):
        return                  # the attempt fails (os.execvp tries each PATH entry)
    session = _running.session
    followed = following(session)
    if followed:
        inherited = (os.environ.get(ENV), os.environ.get("PYTHONPATH"))
        with contextlib.suppress(Exception):
            _note_launch(session.job_dir, "exec", executable, argv, env, os.getpid())
    with saving():              # a SIGTERM meanwhile waits for the hand-over too
        owed = _take_owed()     # first: saving the trace does not write OUT
        if followed:
            finish_here()
            if env is None:      # the new image inherits os.environ: it follows too
                for name, value in zip((ENV, "PYTHONPATH"), inherited):
                    if value is not None:
                        os.environ[name] = value
        if owed is not None:
            try:
                new_image_followed = _unfollowable(executable, argv, env) is None
            except Exception:    # noqa: BLE001 - then it is written here
                new_image_followed = False
            owed.before_exec(new_image_followed)
            _state.paid_at_exec = owed   # (a SIGTERM instead of the exec: done here)


def _note_child(event, executable, argv, env):
    """Notes a child a followed process launches (launches.py)."""
    session = _running.session
    if not following(session):
        return
    if event == "subprocess.Popen":
        _state.popen.argv = list(argv or ())
    elif getattr(_state.popen, "argv", None) == list(argv or ()):
        _state.popen.argv = None    # the same launch: Popen uses posix_spawn (3.13)
        return
    how = {"subprocess.Popen": "subprocess", "os.posix_spawn": "posix_spawn"}.get(
        event, "os.spawn")
    _note_launch(session.job_dir, how, executable, argv, env, None)


def _install_audit():
    """A C audit hook calls _audit for the launch and exec events only: a Python
    hook would run for every audit event, "sys.setprofile" among them, and on
    3.10/3.11 let a thread starting meanwhile fail to set its profile function
    and die (pt_signals.c says how)."""
    if not _state.audit_installed:
        _state.audit_installed = lib.pt_audit_guard(ffi.cast("void *", id(_audit))) == lib.PT_OK


def can_exec(path):
    """Whether an exec of path can replace the process. os.execvp and friends try
    each PATH entry in turn, raising an audit event for each: the attempts that
    fail must leave tracing on, or the rest of the program would go untraced."""
    if isinstance(path, int):       # fexecve: an open file
        return True
    try:
        return os.access(path, os.X_OK) and not os.path.isdir(path)
    except (TypeError, ValueError):
        return True                 # let the exec itself say what is wrong


# -- `run` without following: its open window ------------------------------------

def guard_window(run):
    """Until unguard_window(): os._exit, an exec or SIGTERM of this process writes
    run's open window first (run: a cli.run.Run, an OwedOutput)."""
    owe(run)
    os._exit = _exit_saving
    _install_audit()
    if not _state.window_fork_hook:
        # A forked child owes nothing, and its SIGTERM must stay the default: a
        # Python handler would not run while it waits in C (Pool.terminate()).
        os.register_at_fork(after_in_child=unguard_window)
        _state.window_fork_hook = True
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
                _arm_sigterm_relay()        # (pt_signals.c: never missed, nor by a fork)
        except (ValueError, OSError):
            pass


def unguard_window(run=None):
    """Drops the window guard: run's (a follow run's windows are owed by their
    sessions instead), or, in a forked child, whatever was owed."""
    if run is None or _state.owed is run:
        owe(None)
    if os._exit is _exit_saving and not _state.exit_paths:
        os._exit = _real_exit
    if (threading.current_thread() is threading.main_thread() and not _state.exit_paths
            and not _state.saves):
        _restore_default_sigterm()


# -- a followed process ------------------------------------------------------------

def finish_here(at_exit=False):
    """Stops a followed session of this process and saves it (os._exit, SIGTERM,
    exec, interpreter exit). Never raises. At interpreter exit the root process's
    session is one the program's start() began and never stopped (`run` stops its
    own before): stopped as pytrace_cffi's atexit stops any such, with its line."""
    # saving() first: a SIGTERM served between `finishing` set and the save
    # begun would find the trace being saved, return, and end the process unsaved.
    with saving():
        session = _running.session
        if _state.finishing or not following(session):
            return
        _state.finishing = True
        try:
            if at_exit and session.root:
                _running.stop_at_exit()
            else:
                _running.stop_ending()
        except TraceError as exc:    # a failed spill: what it held is saved
            _say(f"pid {os.getpid()}: {exc}")
        except Exception as exc:     # noqa: BLE001 - the program's exit goes on
            _say(f"pid {os.getpid()}: saving its trace failed "
                 f"({exc.__class__.__name__}: {exc})")
        finally:
            _state.finishing = False


def install_exit_paths(root):
    """os._exit and exec save the trace first; a child with no SIGTERM handler of
    its own saves it on SIGTERM, then dies of it as it would have."""
    os._exit = _exit_saving
    _state.exit_paths = True
    _watch_spawn()
    _install_audit()
    save_at_exit()
    if not root:
        handle_sigterm()


def save_at_exit():
    """atexit saves a followed session of this process (finish_here; registered
    once): after every atexit handler registered later."""
    if not _state.saved_at_exit:
        atexit.register(finish_here, at_exit=True)
        _state.saved_at_exit = True


def handle_sigterm():
    """SIGTERM saves the trace (and writes `run`'s OUT when owed) before the
    process dies of it, unless the program has a handler of its own."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            # (again in a forked child: it inherits the handler, not the timer)
            _arm_sigterm_relay()        # see pt_signals.c: a SIGTERM is never missed
    except (ValueError, OSError):
        pass


def restore_exit_paths():
    _state.exit_paths = False
    if os._exit is _exit_saving:
        os._exit = _real_exit
    if _util_finder in sys.meta_path:
        sys.meta_path.remove(_util_finder)
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            lib.pt_sigterm_guard(0)
            if not _state.saves:         # else it waits for the save (sigterm_waits)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError):
        pass


# -- what this process owes ------------------------------------------------------

def owe(output):
    """This process owes output (an OwedOutput; None: nothing any more) on its
    way out."""
    if output is not None:
        output.pid = os.getpid()
    _state.owed = output


def take_owed(output):
    """Whether this process owed output (and owes it no more): False when an
    exec took it, it was paid already, or this is a forked child."""
    if _state.owed is not output or output.pid != os.getpid():
        return False
    _state.owed = None
    return True


def _take_owed():
    """What this process owes (no longer owed), or None."""
    owed = _state.owed
    return owed if owed is not None and take_owed(owed) else None


def run_ended_early():
    """Whether an exec took the output owed (written, or handed over) before
    the program returned."""
    return _state.paid_at_exec is not None


def pay_owed():
    """This process's way out (os._exit, SIGTERM, an exec'd image's atexit): a
    followed trace saved, then the output it owes written. Never raises."""
    with saving():       # a SIGTERM during the trace's save waits for OUT too
        owed = _take_owed()     # first: saving the trace does not write OUT
        finish_here()
        if owed is not None:
            owed.pay()
