"""The target's side of `python -m pytrace_cffi attach PID` (cli/attach.py): the
script that sys.remote_exec runs in the target's main thread calls begin(), which
starts tracing there as `run -o OUT` would (start(output=OUT, ...): every thread,
their names, torch awareness, the flight recorder), and a thread of ours that ends
it after --duration seconds or on `attach PID --stop` (a request file), or at the
target's exit, whichever comes first.

The attacher and the target talk through files in the attach directory (one per
target pid, the attacher's, mode 0700; see cli/attach.py):
  request-<token>.json   the attacher's: options, output, duration
  cancel-<token>         the attacher gave up waiting: do not start
  status-<token>.json    ours: {"state": "tracing" | "refused" | "failed" | "written", ...}
  session.json           ours while tracing: {"token": ...}, for `attach PID --stop`
  stop                   `attach PID --stop`'s request
Nothing of ours goes to the target's stdout or stderr: what stop() says in lines
on stderr is caught (from our thread only) and handed to the attacher in the
status file, which prints it.
"""
import json
import os
import sys
import threading
import time

POLL_SECONDS = 0.05
_lock = threading.Lock()
_current = None         # the attached session's _Attached, while it traces


def begin(directory, token, script_code):
    """Starts tracing as the attacher asked (its request file), or says why not in
    the status file. Never raises: the target goes on as it was."""
    status = os.path.join(directory, f"status-{token}.json")
    try:
        why = _begin(directory, token, script_code)
    except BaseException as exc:        # noqa: B902 - said to the attacher, never raised
        _write_json(status, {"state": "failed", "why": f"{type(exc).__name__}: {exc}"})
        return
    if why:
        _write_json(status, {"state": "refused", "why": why})


def _begin(directory, token, script_code):
    global _current
    request = _read_json(os.path.join(directory, f"request-{token}.json"))
    if os.path.exists(os.path.join(directory, f"cancel-{token}")):
        # the attacher gave up waiting, and left its files for us: nobody reads a status
        for name in (f"cancel-{token}", f"request-{token}.json", f"attach-{token}.py"):
            _remove(os.path.join(directory, name))
        try:
            os.rmdir(directory)
        except OSError:
            pass
        return None
    from . import _running, start
    from ._hiding import hide_launcher_frames, hide_with_callees
    with _lock:
        if _running.session is not None or _current is not None:
            # run while tracing: the script's call is left out with what it ran
            hide_with_callees(script_code)
            return ("this process is already being traced by pytrace_cffi (an earlier "
                    "attach, or start() called by the program); stop that first")
        attached = _Attached(directory, token, request)
        _remove(os.path.join(directory, "stop"))        # a request left from before
        # The attach script's frame, with what it runs until it returns: begin()'s
        # own work once the hooks are live (its status file, the watcher's go).
        hide_launcher_frames([script_code], with_callees=True)
        attached.watch()        # its thread is ours before tracing starts: left out
        if request["options"].get("flight_recorder"):
            from .flight import recorder        # its lines go to the attacher, at the end
            recorder.say_to = attached.notes.append
        try:
            start(**dict(request["options"], output=request["output"]))
        except BaseException:
            attached.ended = True
            attached.go.set()
            raise
        _current = attached
    _write_json(os.path.join(directory, "session.json"), {"token": token, "pid": os.getpid()})
    _write_json(attached.status, {"state": "tracing", "since": time.time()})
    attached.go.set()
    return None


class _Attached:
    def __init__(self, directory, token, request):
        self.directory = directory
        self.status = os.path.join(directory, f"status-{token}.json")
        self.output = request["output"]
        duration = request.get("duration")
        self.deadline = None if duration is None else time.monotonic() + float(duration)
        self.ended = False
        self.notes = []         # the flight recorder's lines meanwhile
        self.registered, self.go = threading.Event(), threading.Event()

    def watch(self):
        thread = threading.Thread(target=self._watch, name="pytrace_cffi attach",
                                  daemon=True)
        thread.start()
        self.registered.wait()
        _at_exit_once()

    def _watch(self):
        from ._own_threads import own_thread_begin
        own_thread_begin()      # OS-named pytrace_cffi, no signal, left out of the trace
        self.registered.set()
        self.go.wait()
        stop_file = os.path.join(self.directory, "stop")
        while not self.ended:
            if os.path.exists(stop_file):
                _remove(stop_file)
                self.end("stopped by `attach --stop`")
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                self.end("--duration reached")
            else:
                time.sleep(POLL_SECONDS)

    def end(self, why):
        """Stops tracing, writes OUT, says so in the status file (once)."""
        global _current
        with _lock:
            if self.ended:
                return
            self.ended = True
            _current = None
        from . import _running, stop
        from .model.trace import StoredTrace
        lines, facts = [], {"state": "written", "why": why, "output": self.output}
        if _running.session is None:
            facts.update(state="failed", why="the program stopped pytrace_cffi's session "
                                             "itself (pytrace_cffi.stop()): nothing written")
        else:
            with _CaughtStderr(lines):
                try:
                    result = stop()
                    if isinstance(result, StoredTrace) and not result.written:
                        facts["state"] = "failed"
                except BaseException as exc:     # noqa: B902 - said to the attacher
                    facts.update(state="failed", why=f"{why}; {type(exc).__name__}: {exc}")
        if self.notes:
            from .flight import recorder
            recorder.say_to = None
        facts["lines"] = self.notes + "".join(lines).splitlines()
        _remove(os.path.join(self.directory, "session.json"))
        _write_json(self.status, facts)


_exit_hooked = False


def _at_exit_once():
    """The target's exit ends the attached session first (registered after the
    package's own _stop_at_exit, so run before it: nothing is printed)."""
    global _exit_hooked
    if not _exit_hooked:
        import atexit
        atexit.register(_at_exit)
        _exit_hooked = True


def _at_exit():
    attached = _current
    if attached is not None:
        attached.end("the process exited")


def _forked_child():
    """A fork's child is not the attached process: its session is dropped at the
    fork (pytrace_cffi's own fork hook), and its exit must not answer for the parent."""
    global _current, _lock
    _current, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


class _CaughtStderr:
    """sys.stderr for the calling thread only goes into lines while inside: the
    target's other threads still write to its own stderr."""

    def __init__(self, lines):
        self.lines = lines

    def __enter__(self):
        self.original = sys.stderr
        sys.stderr = _ThreadSplit(self.original, threading.get_ident(), self.lines)
        return self

    def __exit__(self, *exc_info):
        if isinstance(sys.stderr, _ThreadSplit):        # (unless the program replaced it)
            sys.stderr = self.original
        return False


class _ThreadSplit:
    def __init__(self, original, ident, lines):
        self._original, self._ident, self._lines = original, ident, lines

    def write(self, text):
        if threading.get_ident() == self._ident:
            self._lines.append(str(text))
            return len(text)
        return self._original.write(text)

    def flush(self):
        if threading.get_ident() != self._ident and self._original is not None:
            self._original.flush()

    def __getattr__(self, name):
        return getattr(self._original, name)


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _write_json(path, facts):
    """path becomes facts as JSON, whole (written beside it, renamed over it)."""
    from ._files import replaced_atomically
    with replaced_atomically(path, lambda tmp: open(tmp, "w", encoding="utf-8")) as f:
        json.dump(facts, f)


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass
