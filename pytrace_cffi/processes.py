"""Following child processes, and joining their traces onto one timeline.

``start(follow_children=True, output=DIR)`` (and ``run``, by default) makes DIR a
*trace directory*: every process of the job traces into its own spilled saved
trace ``DIR/proc-<pid>/`` with the parent's options.

- A child made by ``os.fork()`` (multiprocessing "fork", DataLoader workers)
  drops the copy of the parent's events it inherits and traces afresh from the
  fork on, its frames at that moment seeded as ``start()`` seeds them.
- A new Python interpreter (multiprocessing "spawn"/"forkserver", ``subprocess`` /
  ``os.exec*`` / ``os.posix_spawn`` of Python, torchrun ranks) finds the
  ``PYTRACE_CFFI_FOLLOW`` environment variable (JSON: DIR and the options) and
  this package's ``_boot`` directory first on ``PYTHONPATH``; the
  ``sitecustomize`` there runs any other ``sitecustomize`` it shadows, then starts
  tracing before ``__main__`` runs. A failure prints one line and leaves the
  program untraced.
- Each following process notes the Python children it launches (subprocess,
  posix_spawn, exec, multiprocessing "spawn" with pid and name) in
  ``DIR/launched.jsonl``, and those it cannot follow, with why, in
  ``DIR/unfollowed.jsonl``; ``unfollowed(DIR)`` lists the latter and every launch
  that left no process directory (it ended before its bootstrap ran).
- Every process spills each full chunk of events at once (``max_events`` sets
  the chunk size: an eighth of it), after appending the names of new keys to
  ``keys.jsonl``; ``process.json`` is written at start. A process that ends
  normally, by ``os._exit`` (multiprocessing's way) or by SIGTERM (when the
  program has no handler of its own) writes its full trace; one killed by SIGKILL
  is recovered from those files, losing at most one chunk per thread.

``join(inputs, output)`` writes every process onto one timeline, labelled
(``rank N``, ``DataLoader worker N``, multiprocessing's process name, or the
program name), on CLOCK_MONOTONIC (one host; other hosts through their realtime
anchors), in the format output's name picks: Chrome JSON with a pid lane per
process, .pftrace with a process track per process, .html with lanes grouped by
process, or a saved directory of them all (``joined_trace`` gives that Trace of
several processes, streamed from the processes' own traces). It never waits for a
process: one still running is joined as far as its files go and reported as such.
"""
import atexit
import collections
import contextlib
import json
import os
import signal
import sys
import threading
import warnings
from collections import namedtuple

from . import _clock, _progress, formats
from ._core import ffi, lib
from ._names import name_for_source, path_prefixes, program_name
from ._progress import counted
from ._tracer import USE_MONITORING, Session, check
from .readers.safe_read import read_bounded
from .errors import TraceError, TraceFormatError, TraceWarning
from .trace import codes_below, forget_startup_frames, hide_alone, hide_launcher_frames

ENV = "PYTRACE_CFFI_FOLLOW"
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")
DEFAULT_MAX_EVENTS = 1 << 20
PROCESS_FILE = "process.json"
KEYS_FILE = "keys.jsonl"
JOB_FILE = "job.json"
UNFOLLOWED_FILE = "unfollowed.jsonl"
LAUNCHED_FILE = "launched.jsonl"
FINISH_FILE = "finish.json"         # `run`'s finish, handed to an exec'd image
RUN_DONE_FILE = "run_finished.json"  # `run` has written OUT: its processes stop recording
NOT_PYTHON = "not a Python interpreter"
STARTING_AT_FINISH = ("it is running, but was still starting up when its run finished: it is "
                      "not traced")

ProcessResult = namedtuple("ProcessResult", "pid label state calls directory note")
ProcessResult.__doc__ = """One process of a joined trace directory.

state  "complete" (its trace was saved), "running" (still running at the join:
       what it had spilled is joined; nothing yet: note says where its trace
       goes), "recovered" (it died without saving: what
       it had spilled is joined) or "lost" (nothing could be read; note says why)
calls  the calls that began in its trace, as the summary counts them (a forked
       child's frames continued from its parent are shown, not counted)
"""

_real_exit = os._exit
_child_job = None          # set by the bootstrap: the process being started is a child
_armed = None              # (job dir, options): a forkserver, untraced, whose forks trace
# `run`'s pending finish in the process that owes it (pid, job dir, OUT, keep the
# job dir, write, export: see finish_run). An exec replaces that process: the new
# image takes the finish over (_hand_over_run, FINISH_FILE), or it is done before
# the exec.
_run_finish = None
_run_ended_early = False   # OUT was written (or handed over) before the program returned
_audit_installed = False
# A `run` job (ENV carries them to its processes): the pid of the process running
# `run`, and the directory beside its OUT, where the per-process traces continue
# when their own place fills up (see _KeyNames.keep_place).
_run_pid = None
_spill_beside = None


# -- which process is this -------------------------------------------------

def _command_line():
    """The full command line (sys.argv hides `-c` code): sys.orig_argv or /proc."""
    orig = getattr(sys, "orig_argv", None)
    if orig:
        return list(orig)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return list(sys.argv)


def _int_env(name):
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def process_facts(forked=False):
    """ppid, argv, host and a label for this process (see the module docstring);
    forked: made by a bare os.fork (its program name then says so)."""
    facts = {"ppid": os.getppid(), "argv": list(sys.argv), "host": _host()}
    rank = _int_env("RANK")
    if rank is not None:
        facts.update(label=f"rank {rank}", rank=rank, local_rank=_int_env("LOCAL_RANK"),
                     world_size=_int_env("WORLD_SIZE"))
        return facts
    data = sys.modules.get("torch.utils.data")
    info = None
    if data is not None:
        try:
            info = data.get_worker_info()
        except Exception:        # noqa: BLE001 - a label is never worth a failure
            info = None
    if info is not None:
        facts.update(label=f"DataLoader worker {info.id}", worker_id=info.id,
                     num_workers=info.num_workers)
        return facts
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            name = mp.current_process().name
        except Exception:        # noqa: BLE001
            name = "MainProcess"
        if name != "MainProcess":
            facts["label"] = name
            return facts
    if "--multiprocessing-fork" in sys.argv or (forked and _armed is not None):
        facts["label"] = "multiprocessing child"    # ended before its name came
        return facts
    if forked:
        name = _forking_process_name()
        if name:                                     # multiprocessing "fork", early
            facts["label"] = name
            return facts
    facts["label"] = program_name() + (" (fork)" if forked else "")
    return facts


def _forking_process_name():
    """In a child of multiprocessing's fork start method before _bootstrap names
    it: the Process object's name, from the Popen._launch frame that forked."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_launch" and os.path.basename(code.co_filename) == "popen_fork.py":
            name = getattr(frame.f_locals.get("process_obj"), "name", None)
            return name if isinstance(name, str) else None
        frame = frame.f_back
    return None


def _host():
    try:
        return os.uname().nodename
    except AttributeError:
        import socket
        return socket.gethostname()


# -- the session of a followed process --------------------------------------

def _new_process_dir(job_dir):
    """DIR/proc-<pid>, or proc-<pid>-<n> when taken (a reused pid, or exec)."""
    base = os.path.join(job_dir, f"proc-{os.getpid()}")
    path, n = base, 1
    while True:
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            n += 1
            path = f"{base}-{n}"


class _KeyNames:
    """The spill hook: appends the names of keys seen since the last spill to
    keys.jsonl, so a killed process's events can still be named; and keeps the
    spilling going (keep_place). Holds a plain (non-owning) tracer pointer: the
    tracer holds this object."""

    def __init__(self, ptr, directory, trim_paths, watcher, job_dir, chunk_bytes):
        self.ptr = ffi.cast("pt_tracer *", ptr)
        self.directory = directory
        self.job_dir = job_dir
        self.chunk_bytes = chunk_bytes      # one spill's size, at most
        self.trim_paths = trim_paths
        self.watcher = watcher
        self.keys_written = 0
        self.tags_written = 0
        self.sidecar = None                 # process.json, once written
        self.stopped_because = None         # why recording stops early (keep_place)
        self.removed = None                 # the directory removed while tracing
        self._nowhere_else = False          # a move to _spill_beside was impossible
        # Held while writing, and by stop(): a hook that let other threads run is
        # not cut short by a stop. Reentrant: a SIGTERM handler may stop from here.
        self.lock = threading.RLock()

    @property
    def path(self):
        return os.path.join(self.directory, KEYS_FILE)

    def __call__(self):
        with self.lock:
            self.keep_place()
            try:
                self._write_new()
            except OSError:
                if not self._move_elsewhere():
                    raise
                self._write_new()

    def _write_new(self):
        from .saved_format import hash_id
        from .trace import _hiding, _kind
        n_keys = lib.pt_key_count(self.ptr)
        tags = self.watcher.tags if self.watcher is not None else [None]
        if n_keys <= self.keys_written and len(tags) <= self.tags_written:
            return
        sources = []
        check(lib.pt_key_sources(self.ptr, self.keys_written, ffi.cast("void *", id(sources))),
              self.ptr, "key sources")
        prefixes = path_prefixes() if self.trim_paths else ()
        names = [name_for_source(source, prefixes) for source in sources]
        record = {"first": self.keys_written,
                  # the first record also holds the clock's start, for recover()
                  **({"start_ns": lib.pt_start_ns(self.ptr),
                      "tick0": lib.pt_start_ticks(self.ptr)} if not self.keys_written else {}),
                  "keys": [[str(hash_id(name)), _kind(source), _hiding(source)]
                           for name, source in zip(names, sources)],
                  "names": {str(hash_id(name)): name for name in names},
                  "tags_first": self.tags_written, "tags": list(tags[self.tags_written:])}
        line = (json.dumps(record) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self.keys_written += len(sources)
        self.tags_written = len(tags)

    # -- where the spill goes -------------------------------------------------
    def keep_place(self, stopped=False):
        """Before each spill (and once stopped, before the last one): once `run`
        has finished, recording stops (a process that outlives it would trace
        without bound into a directory nobody reads); a process directory
        removed while the job runs is made again, with everything the open
        files held; a place running short of room, or whose last block failed
        (pt_spill_errno), is left for _spill_beside. Never raises."""
        try:
            over = _run_over(self.job_dir)
            if over and self.stopped_because is None and not stopped:
                self._stop_soon(over)
            if not os.path.isdir(self.directory):
                if not over:
                    self._relink()
            elif lib.pt_spill_errno(self.ptr) or self._short_of_room():
                self._move_elsewhere()
        except Exception as exc:    # noqa: BLE001 - the spill goes on where it is
            _say(f"pid {os.getpid()}: keeping its trace's place failed ({exc})")

    def _stop_soon(self, reason):
        """Stops recording from another thread (never from inside the hook, which
        runs in the middle of recording): the trace is saved as at exit, with
        reason in its meta.json."""
        self.stopped_because = reason
        try:
            threading.Thread(target=finish_here, name="pytrace_cffi: stop",
                             daemon=False).start()
        except RuntimeError:        # at interpreter shutdown: the exit saves it anyway
            pass

    def _short_of_room(self):
        """Whether the file system of the process directory has less room than it
        should keep for the program (a tenth of it, at most 64 MiB) and two spills,
        while _spill_beside could take the spill."""
        if _spill_beside is None or self._nowhere_else:
            return False
        return _free_bytes(self.directory) < _reserve(self.directory) + 2 * self.chunk_bytes

    def _move_elsewhere(self):
        """Moves the spill into the job's directory beside OUT (overflow_dir), when
        that is on another file system with room for it. Returns whether it did."""
        beside = overflow_dir(self.job_dir)
        if beside is None or self._nowhere_else or _within(self.directory, beside):
            return False
        existing = beside
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        needed = lib.pt_spill_bytes(self.ptr) + _reserve(existing) + 2 * self.chunk_bytes
        if _same_device(existing, self.directory) or _free_bytes(existing) < needed:
            self._nowhere_else = True
            return False
        os.makedirs(beside, exist_ok=True)
        try:                        # its own name there: finish_run counts it once
            place = os.path.join(beside, os.path.basename(self.directory))
            os.mkdir(place)
        except FileExistsError:
            place = _new_process_dir(beside)
        return self._move_to(place)

    def _relink(self):
        """The process directory was removed (by the program) while its files were
        open: it is made again (else a new one beside OUT) with what they held."""
        removed = self.directory
        try:
            os.makedirs(self.directory)
            place = self.directory
        except OSError:
            beside = overflow_dir(self.job_dir)
            if beside is None:
                return False
            try:
                place = _new_process_dir(_made(beside))
            except OSError:
                return False
        if not self._move_to(place):
            return False
        self.removed = self.removed or removed
        return True

    def _move_to(self, place):
        """Copies the spill file into the new directory place and spills there from
        now on; process.json and keys.jsonl are written there anew, the old
        directory goes. Returns whether it worked (else place is removed)."""
        import shutil
        target = os.path.join(place, "events.bin")
        if lib.pt_spill_move(self.ptr, os.fsencode(target)) != lib.PT_OK:
            shutil.rmtree(place, ignore_errors=True)
            return False
        old, self.directory = self.directory, place
        self.keys_written = self.tags_written = 0       # all of keys.jsonl, there
        try:
            if self.sidecar is not None:
                _write_json(os.path.join(place, PROCESS_FILE), self.sidecar)
            self._write_new()
        except OSError:
            pass                    # the next spill tries the keys again
        if os.path.isdir(old) and not _within(place, old):
            shutil.rmtree(old, ignore_errors=True)
        return True


def _free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _reserve(path):
    """The room a spill leaves free on path's file system, for the program: a
    tenth of it, at most 64 MiB."""
    st = os.statvfs(path)
    return min(64 << 20, st.f_blocks * st.f_frsize // 10)


def _same_device(path, other):
    try:
        return os.stat(path).st_dev == os.stat(other).st_dev
    except OSError:             # (other removed: a new place is all the better)
        return False


def _within(path, directory):
    path, directory = os.path.abspath(path), os.path.abspath(directory)
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _made(directory):
    os.makedirs(directory, exist_ok=True)
    return directory


def overflow_dir(job_dir):
    """Where a `run` job's per-process traces continue when their own file system
    fills up ($TMPDIR, by default): beside OUT, named after the job directory;
    None outside `run`."""
    if _spill_beside is None:
        return None
    name = os.path.basename(os.path.normpath(job_dir))
    return os.path.join(_spill_beside, name + ".overflow")


def _run_over(job_dir):
    """Why this process of a `run` job should stop recording: `run` wrote OUT
    (RUN_DONE_FILE in the job directory) or ended; None while it goes on."""
    if _run_pid is None or _run_pid == os.getpid():
        return None
    if os.path.exists(os.path.join(job_dir, RUN_DONE_FILE)):
        return f"its run (pid {_run_pid}) had finished"
    if not _alive(_run_pid):
        return f"its run (pid {_run_pid}) had ended"
    return None


class FollowSession(Session):
    """A Session that traces this process into DIR/proc-<pid> and arranges for
    its children to do the same."""

    def __init__(self, options, root=True, forked=False):
        options = dict(options)
        self.forked = forked
        self.job_dir = os.path.abspath(options.pop("output"))
        if options.get("max_events") is None:
            options["max_events"] = DEFAULT_MAX_EVENTS
        self.follow_options = options
        self.root = root
        over = None if root else _run_over(self.job_dir)
        if over:
            raise ValueError(f"not tracing: {over}")
        try:
            os.makedirs(self.job_dir, exist_ok=True)
            if root:
                for name in (JOB_FILE, UNFOLLOWED_FILE, LAUNCHED_FILE, FINISH_FILE,
                             RUN_DONE_FILE):
                    if os.path.exists(os.path.join(self.job_dir, name)):
                        os.unlink(os.path.join(self.job_dir, name))
            self.process_dir = _new_process_dir(self.job_dir)
        except OSError as exc:
            raise ValueError(f"cannot use {self.job_dir!r} as the trace directory: "
                             f"{exc}") from None
        super().__init__(output=self.process_dir, **options)
        chunk_bytes = min(max(options["max_events"], 4096), 2 << 20) + 64
        self._key_names = _KeyNames(self.ptr, self.process_dir, self.trim_paths, self.watcher,
                                    self.job_dir, chunk_bytes)
        check(lib.pt_set_spill_hook(self.ptr, ffi.cast("void *", id(self._key_names))),
              self.ptr, "spill hook")
        self.process_meta = {}
        self._saved_env = None

    def start(self):
        # Everything before the hooks go live: what runs after would be recorded.
        sidecar = dict(process_facts(self.forked), pid=os.getpid(), root=self.root,
                       command=_command_line(), forked=self.forked,
                       clock_name="tsc" if _clock.USE_TSC else "monotonic",
                       python=sys.version.split()[0],
                       backend="sys.monitoring" if USE_MONITORING else "PyEval_SetProfile")
        _write_json(os.path.join(self.process_dir, PROCESS_FILE), sidecar)
        self._key_names.sidecar = sidecar
        if self.root:
            _write_json(os.path.join(self.job_dir, JOB_FILE), {"root_pid": os.getpid()})
        self._set_environment()
        try:
            _install_exit_paths(self.root)
            super().start()
        except BaseException:
            # Nothing of it stays: no environment, no wrapped exits, no directory.
            self._restore_environment()
            _restore_exit_paths()
            import shutil
            shutil.rmtree(self.process_dir, ignore_errors=True)
            if self.root:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.job_dir, JOB_FILE))
            raise

    def _set_environment(self):
        config = json.dumps({"dir": self.job_dir, "options": self.follow_options,
                             "package": os.path.dirname(os.path.dirname(BOOT_DIR)),
                             "run_pid": _run_pid, "spill_beside": _spill_beside})
        self._saved_env = (os.environ.get(ENV), os.environ.get("PYTHONPATH"))
        os.environ[ENV] = config
        paths = (self._saved_env[1] or "").split(os.pathsep)
        if BOOT_DIR not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([BOOT_DIR] + [p for p in paths if p])

    def _restore_environment(self):
        if self._saved_env is None:
            return
        for name, value in zip((ENV, "PYTHONPATH"), self._saved_env):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env = None

    def stop(self):
        try:
            with self._key_names.lock:
                super().stop()
        finally:
            self._restore_environment()
        facts = process_facts(self.forked)   # labels known only now (e.g. worker ids)
        self.process_meta = dict(facts, job_dir=self.job_dir, root=self.root)
        if self._key_names.stopped_because:
            self.process_meta["stopped_early"] = (
                f"recording stopped at a spill: {self._key_names.stopped_because}")

    def result(self):
        try:
            with self._key_names.lock:      # its place, as at each spill
                self._key_names.keep_place(stopped=True)
                self.output = self.process_dir = self._key_names.directory
            if self._key_names.removed:
                from .spill import note_spill_problem
                note_spill_problem(self, f"the process directory {self._key_names.removed!r} "
                                         "was removed while tracing: its trace was saved "
                                         f"again, whole, in {self.output!r}")
            return super().result()
        finally:
            # Only now: a SIGTERM while the trace was being written waited for it.
            _restore_exit_paths()
            forget_startup_frames()         # the trace written has taken its rules

    def abandon_in_forked_child(self):
        super().abandon_in_forked_child()
        self._saved_env = None        # the child keeps following: its environment stays


def _write_json(path, data):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


# -- children: fork, bootstrap, exits ---------------------------------------

def continue_in_forked_child(session):
    """In a child forked while following: a fresh session for this process with
    the parent's options (the inherited one was abandoned). Returns it started."""
    if _run_over(session.job_dir):
        return None                 # the run is over: this child is not traced
    forget_startup_frames()         # its frames at the fork are the program's
    options = dict(session.follow_options, output=session.job_dir)
    return _start_child_session(options)


def _start_child_session(options):
    import pytrace_cffi
    _install_exit_paths(root=False)        # first: a SIGTERM now still exits as it would
    child = FollowSession(options, root=False, forked=True)
    pytrace_cffi._session = child
    try:
        child.start()
    except BaseException:
        pytrace_cffi._session = None
        raise
    return child


def _armed_after_fork():
    """A forkserver's fork: start tracing the new child."""
    import pytrace_cffi
    try:
        if _armed is None or pytrace_cffi._session is not None or _run_over(_armed[0]):
            return
        pytrace_cffi._lock = threading.Lock()
        _start_child_session(dict(_armed[1], output=_armed[0]))
    except Exception as exc:     # noqa: BLE001 - never break the child
        _say(f"not tracing forked pid {os.getpid()}: {exc}")
    finally:
        release_sigterm()


_sigterm = threading.local()     # .held: hold_sigterm_for_fork blocked it in this thread


def hold_sigterm_for_fork():
    """Before a fork while following (or in an armed forkserver): SIGTERM blocked
    in the forking thread, so the child gets a SIGTERM sent at once (Pool.terminate
    of a worker that ran no task) only when its after-fork hook has made its
    directory, process.json and SIGTERM handler: it saves its trace, never goes
    missing. The parent releases it as fork returns, the child at the end of its
    hook (release_sigterm); a pending SIGTERM is delivered then."""
    import pytrace_cffi
    if _armed is None and not isinstance(pytrace_cffi._session, FollowSession):
        return
    with contextlib.suppress(ValueError, OSError):
        _sigterm.held = signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK,
                                                                     {signal.SIGTERM})


def release_sigterm():
    """Undoes hold_sigterm_for_fork in this thread (SIGTERM stays blocked if it
    was before)."""
    if getattr(_sigterm, "held", False):
        _sigterm.held = False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


if hasattr(signal, "pthread_sigmask"):
    os.register_at_fork(before=hold_sigterm_for_fork, after_in_parent=release_sigterm)


_UNTRACED_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.semaphore_tracker",
                     "pytrace_cffi")


def _untraced_helper(command):
    """Whether a command line (a string) is one of multiprocessing's helpers, or
    pytrace_cffi itself, which the bootstrap leaves untraced (the forkserver is
    armed instead: the children it forks are traced)."""
    return ("from multiprocessing.forkserver import main" in command
            or any(f"-m {name}" in command or f"from {name} import" in command
                   for name in _UNTRACED_HELPERS))


def start_from_environment():
    """The bootstrap's work: trace this new interpreter if PYTRACE_CFFI_FOLLOW
    says so. Never raises: a failure prints one line, the program runs untraced."""
    global _child_job, _armed
    config = os.environ.get(ENV)
    if not config:
        return
    job_dir = None
    try:
        config = json.loads(config)
        job_dir, options = config["dir"], dict(config["options"])
        _join_run(config)
        command = " ".join(_command_line())
        if "from multiprocessing.forkserver import main" in command:
            # The server lives as long as the job; the children it forks are traced.
            _armed = (job_dir, options)
            os.register_at_fork(after_in_child=_armed_after_fork)
            return
        finish = _handed_over(job_dir)
        if finish is not None:
            # This image replaced (exec) the process running `run`: it owes the finish.
            _owe_run_finish(job_dir, finish)
        if _untraced_helper(command) or _run_over(job_dir):
            return                    # (a run over: started as it ended, not traced)
        import pytrace_cffi
        _child_job = job_dir
        # Tracing starts inside site's import of our sitecustomize: the frames below
        # (site's, importlib's) and what they run until they return are the
        # interpreter's start-up, not the program's (see hide_launcher_frames).
        hide_launcher_frames(codes_below(sys._getframe(1)), with_callees=True)
        pytrace_cffi.start(follow_children=True, output=job_dir, **options)
    except Exception as exc:     # noqa: BLE001 - never break the child
        reason = f"{exc.__class__.__name__}: {exc}"
        _say(f"not tracing pid {os.getpid()} ({reason})")
        if job_dir is not None:       # the parent's `run` reports it too
            _note_unfollowed(job_dir, {"pid": os.getppid(), "command": _command_line(),
                                       "child_pid": os.getpid(),
                                       "reason": f"its tracing failed to start ({reason})"})


def _join_run(config):
    """Takes the `run` facts of PYTRACE_CFFI_FOLLOW's config (see _run_pid)."""
    global _run_pid, _spill_beside
    run_pid, beside = config.get("run_pid"), config.get("spill_beside")
    _run_pid = run_pid if isinstance(run_pid, int) and not isinstance(run_pid, bool) else None
    _spill_beside = beside if isinstance(beside, str) and os.path.isabs(beside) else None


def _owe_run_finish(job_dir, finish):
    """Makes this process finish `run` at exit (its trace saved first), as the
    process it replaced would have after the program."""
    global _run_finish

    def write(trace, path):
        from .__main__ import _write_or_fall_back
        return _write_or_fall_back(trace, path)

    def export(source, path):
        from .__main__ import export
        return export(source, path)

    _run_finish = (os.getpid(), job_dir, str(finish["output"]), bool(finish.get("keep")),
                   write, export)
    atexit.register(_finish_owed_run)


def _finish_owed_run():
    """When this process owes `run`'s finish (an exec'd image's atexit, or os._exit):
    saves its trace, then writes OUT from the job. Never raises."""
    global _run_finish
    owed, _run_finish = _run_finish, None
    if owed is None or owed[0] != os.getpid():
        return
    finish_here()
    _finish_now(owed)


def _finish_now(owed):
    """finish_run for an owed finish (see _run_finish). Never raises: it runs as
    the process ends (atexit, os._exit, SIGTERM, an exec's audit hook)."""
    _, job_dir, output, keep, write, export = owed
    try:
        finish_run(job_dir, output, write, export, keep=keep)
    except Exception as exc:     # noqa: BLE001 - the program's exit goes on
        _say(f"cannot write the job's trace to {output!r} ({exc.__class__.__name__}: "
             f"{exc}); the per-process traces are in {job_dir}")


def _hand_over_run(followed):
    """At an exec of the process owing `run`'s finish (its trace saved already):
    when the new image will be followed, DIR/finish.json hands the finish over
    (the image keeps the pid, which the file names; the environment cannot carry
    it: os.execve has read its env before the audit hook runs); otherwise (not
    Python, or its environment drops PYTRACE_CFFI_FOLLOW) the job is finished
    here, before this image is gone."""
    global _run_finish, _run_ended_early
    owed, _run_finish = _run_finish, None
    _run_ended_early = True
    pid, job_dir, output, keep = owed[:4]
    if followed:
        try:
            _write_json(os.path.join(job_dir, FINISH_FILE),
                        {"pid": pid, "output": output, "keep": keep})
            # Runs only if this image survives: the exec failed, nobody claimed it.
            atexit.register(_finish_unclaimed, owed)
            return
        except OSError:
            pass
    _finish_now(owed)


def _finish_unclaimed(owed):
    """atexit after an exec that failed (ENOEXEC, ...) past its hand-over: the
    finish is still this process's; OUT holds what was traced before the exec."""
    if _handed_over(owed[1]) is not None:
        _finish_now(owed)


def _handed_over(job_dir):
    """The finish DIR/finish.json hands this process (the image an exec of the
    process running `run` started), taken out of the directory; or None."""
    path = os.path.join(job_dir, FINISH_FILE)
    try:
        finish = _read_json_file(path)
    except (OSError, TraceFormatError):
        return None
    if not isinstance(finish, dict) or finish.get("pid") != os.getpid() or \
            not isinstance(finish.get("output"), str):
        return None
    with contextlib.suppress(OSError):
        os.unlink(path)
    return finish


def _say(text):
    try:
        print(f"pytrace_cffi: {text}", file=sys.stderr)
    except Exception:            # noqa: BLE001
        pass


_finishing = False
_terminate_after = False     # SIGTERM came while finish_here was saving


def finish_here():
    """Stops a followed session of this process and saves it (os._exit, SIGTERM,
    exec, interpreter exit). Never raises."""
    global _finishing
    import pytrace_cffi
    session = pytrace_cffi._session
    if _finishing or not isinstance(session, FollowSession):
        return
    _finishing = True
    try:
        pytrace_cffi.stop()
    except TraceError as exc:    # a failed spill: what it held is saved
        _say(f"pid {os.getpid()}: {exc}")
    except Exception as exc:     # noqa: BLE001 - the program's exit goes on
        _say(f"pid {os.getpid()}: saving its trace failed ({exc.__class__.__name__}: {exc})")
    finally:
        _finishing = False
    if _terminate_after:
        _die_of_sigterm()


def _exit_saving(code):
    """os._exit while following: saves this process's trace first (and writes
    `run`'s OUT when this process owes it)."""
    finish_here()
    _finish_owed_run()
    _real_exit(code)


def _on_sigterm(signum, frame):
    global _terminate_after
    if _finishing:                   # saving already (e.g. at exit): die once it is saved
        _terminate_after = True
        return
    finish_here()
    _finish_owed_run()
    _die_of_sigterm()


def _die_of_sigterm():
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _install_exit_paths(root):
    """os._exit and exec save the trace first; a child with no SIGTERM handler of
    its own saves it on SIGTERM, then dies of it as it would have."""
    global _audit_installed
    os._exit = _exit_saving
    _watch_spawn()
    if not _audit_installed:
        sys.addaudithook(_audit)
        atexit.register(finish_here)
        _audit_installed = True
    if not root:
        _handle_sigterm()


def _handle_sigterm():
    """SIGTERM saves the trace (and writes `run`'s OUT when owed) before the
    process dies of it, unless the program has a handler of its own."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            # (again in a forked child: it inherits the handler, not the timer)
            lib.pt_sigterm_guard(1)     # see pt_signals.c: a SIGTERM is never missed
    except (ValueError, OSError):
        pass


def _restore_exit_paths():
    if os._exit is _exit_saving:
        os._exit = _real_exit
    if _util_finder in sys.meta_path:
        sys.meta_path.remove(_util_finder)
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            lib.pt_sigterm_guard(0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError):
        pass


_popen = threading.local()


def _audit(event, args):
    """Audit hook (installed once): saves the trace before os.exec replaces the
    process, and notes children that will not be followed."""
    if event not in ("os.exec", "subprocess.Popen", "os.posix_spawn", "os.spawn"):
        return
    import pytrace_cffi
    session = pytrace_cffi._session
    if not isinstance(session, FollowSession):
        return
    try:
        executable, argv, env = args[0], args[1], args[-1]
        if event == "os.exec":
            if not _can_exec(executable):
                return              # the attempt fails (os.execvp tries each PATH entry)
            inherited = (os.environ.get(ENV), os.environ.get("PYTHONPATH"))
            _note_launch(session.job_dir, "exec", executable, argv, env, os.getpid())
            finish_here()
            if env is None:          # the new image inherits os.environ: it follows too
                for name, value in zip((ENV, "PYTHONPATH"), inherited):
                    if value is not None:
                        os.environ[name] = value
            if _run_finish is not None and _run_finish[0] == os.getpid():
                _hand_over_run(_unfollowable(executable, argv, env) is None)
            return
        if event == "subprocess.Popen":
            _popen.argv = list(argv or ())
        elif getattr(_popen, "argv", None) == list(argv or ()):
            _popen.argv = None      # the same launch: Popen uses posix_spawn (3.13)
            return
        how = {"subprocess.Popen": "subprocess", "os.posix_spawn": "posix_spawn"}.get(
            event, "os.spawn")
        _note_launch(session.job_dir, how, executable, argv, env, None)
    except Exception:            # noqa: BLE001 - an audit hook must never fail the call
        pass


def _can_exec(path):
    """Whether an exec of path can replace the process. os.execvp and friends try
    each PATH entry in turn, raising an audit event for each: the attempts that
    fail must leave tracing on, or the rest of the program would go untraced."""
    if isinstance(path, int):       # fexecve: an open file
        return True
    try:
        return os.access(path, os.X_OK) and not os.path.isdir(path)
    except (TypeError, ValueError):
        return True                 # let the exec itself say what is wrong


def _note_launch(job_dir, how, executable, argv, env, pid, name=None):
    """Notes a program this process launches (or execs): a Python child that will
    be followed goes to launched.jsonl (with its pid when known), for
    unfollowed() to find those that left no trace; one that will not, to
    unfollowed.jsonl with the reason; a program that does not exist, nowhere (no
    process starts)."""
    command = [os.fsdecode(a) for a in argv or ()]
    if not command:
        return
    program = os.fsdecode(executable) if executable else command[0]
    if _resolve(program) is None:
        return
    reason = _unfollowable(executable, argv, env)
    if reason:
        _note_unfollowed(job_dir, {"pid": os.getpid(), "command": command, "how": how,
                                   "reason": reason})
    elif not _untraced_helper(" ".join(command)):
        _append_json(os.path.join(job_dir, LAUNCHED_FILE), dict(
            {"pid": os.getpid(), "command": command, "how": how, "child_pid": pid},
            **({"name": name} if name else {})))


# multiprocessing "spawn" starts its children through util.spawnv_passfds, which
# raises no audit event: it is wrapped, once multiprocessing.util is imported, so
# that the child's pid and command are noted (_note_launch) as it starts.
_real_spawnv_passfds = None


def _spawnv_passfds(path, args, passfds):
    # Left out of traces alone (trace.hide_alone): the program's call of
    # spawnv_passfds is recorded as if it were not wrapped.
    pid = _real_spawnv_passfds(path, args, passfds)
    _noted_spawn(path, args, pid)
    return pid


def _noted_spawn(path, args, pid):
    try:
        import pytrace_cffi
        session = pytrace_cffi._session
        if isinstance(session, FollowSession):
            _note_launch(session.job_dir, "spawn", path, args, None, pid,
                         name=_launching_process_name())
    except Exception:            # noqa: BLE001 - never fail the program's launch
        pass


def _launching_process_name():
    """The name of the multiprocessing Process being launched (from the frame of
    its Popen's _launch), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_launch":
            name = getattr(frame.f_locals.get("process_obj"), "name", None)
            return name if isinstance(name, str) else None
        frame = frame.f_back
    return None


def _wrap_spawnv(util):
    global _real_spawnv_passfds
    real = getattr(util, "spawnv_passfds", None)
    if real is None or real is _spawnv_passfds:
        return
    _real_spawnv_passfds = real
    util.spawnv_passfds = _spawnv_passfds


class _UtilLoader:
    """The loader of multiprocessing.util while it is imported: runs the real
    one, then wraps spawnv_passfds. The module keeps the real loader."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # Left out of traces alone: the module's code is recorded as without it.
        module.__loader__ = self.loader
        module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _wrap_spawnv(module)


class _UtilFinder:
    """On sys.meta_path, just before PathFinder (so the import machinery calls
    the finders it calls without it), while this process follows its children:
    finds multiprocessing.util through PathFinder, with _UtilLoader."""

    def find_spec(self, name, path=None, target=None):
        # Left out of traces alone: for other modules it calls nothing.
        if name != "multiprocessing.util":
            return None
        spec = _next_finder(self).find_spec(name, path, target)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _UtilLoader(spec.loader)
        return spec


def _next_finder(finder):
    from importlib.machinery import PathFinder
    try:
        following = sys.meta_path[sys.meta_path.index(finder) + 1:]
    except ValueError:
        following = []
    return next((f for f in following if f is PathFinder), PathFinder)


_util_finder = _UtilFinder()
hide_alone(_spawnv_passfds.__code__)
hide_alone(_UtilLoader.exec_module.__code__)
hide_alone(_UtilFinder.find_spec.__code__)


def _watch_spawn():
    """Arranges for multiprocessing's spawned children to be noted (see above)."""
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        _wrap_spawnv(util)
        return
    if _util_finder in sys.meta_path:
        return
    from importlib.machinery import PathFinder
    position = next((i for i, f in enumerate(sys.meta_path) if f is PathFinder),
                    len(sys.meta_path))
    sys.meta_path.insert(position, _util_finder)


def _append_json(path, record):
    """Appends record as one JSON line (one write: lines of several processes do
    not interleave). Never raises."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))
        finally:
            os.close(fd)
    except OSError:
        pass


def _note_unfollowed(job_dir, record):
    """Appends a child that is not traced to DIR/unfollowed.jsonl. Never raises."""
    _append_json(os.path.join(job_dir, UNFOLLOWED_FILE), record)


def _unfollowable(executable, argv, env):
    """Why a launched program will not be traced, or None if it should be."""
    argv = [os.fsdecode(a) for a in argv or ()]
    if not argv:
        return None
    program = os.fsdecode(executable) if executable else argv[0]
    if not _is_python(program):
        return NOT_PYTHON
    flags = [a for a in argv[1:] if a.startswith("-") and not a.startswith("--")]
    for flag in flags:
        if flag in ("-c", "-m") or flag.startswith(("-W", "-X", "-c", "-m")):
            break                      # their values are no interpreter options
        if set(flag[1:]) & set("ISE"):
            return f"started with {flag} (no site / PYTHONPATH: the bootstrap cannot load)"
    if env is not None:
        get = env.get if hasattr(env, "get") else dict(env).get
        value = get(ENV) if isinstance(next(iter(env), ""), str) else get(ENV.encode())
        if not value:
            return "its environment was replaced without PYTRACE_CFFI_FOLLOW"
    return None


def _resolve(program):
    """The file a launch of program runs (searched on PATH when it has no
    directory), or None when there is none: then no process starts."""
    import shutil
    if os.sep in program:
        return program if os.path.isfile(program) else None
    return shutil.which(program) or (program if os.path.isfile(program) else None)


def _is_python(program):
    """Whether program is a Python interpreter (by its name, or sys.executable), a
    script run by one (#! naming python), or a launcher named python* (pyenv's
    shims are shell scripts that exec Python)."""
    path = _resolve(program) or program
    if os.path.basename(program).startswith("python") or (
            os.path.realpath(path) == os.path.realpath(sys.executable)):
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


# -- reading a trace directory ---------------------------------------------

def process_directories(inputs):
    """The per-process directories of inputs: trace directories (their proc-*),
    saved traces, or single process directories."""
    if isinstance(inputs, (str, bytes, os.PathLike)):
        inputs = [inputs]
    found = []
    for path in inputs:
        path = os.fsdecode(path)
        if not os.path.isdir(path):
            raise TraceFormatError(f"{path!r} is not a directory")
        if os.path.islink(path):
            path = os.path.realpath(path)   # named by the user: a link inside one is not
        if _is_process_dir(path):
            found.append(path)
            continue
        # A proc-* link is listed, to be refused by read_process in words: it may
        # lead out of the job's directory.
        subdirs = sorted(os.path.join(path, d) for d in os.listdir(path)
                         if d.startswith("proc-") and (os.path.isdir(os.path.join(path, d))
                                                       or os.path.islink(os.path.join(path, d))))
        if not subdirs:
            raise TraceFormatError(f"{path!r} holds no process traces (no proc-* directory, "
                                   "no meta.json)")
        found.extend(subdirs)
    return found


def _is_process_dir(path):
    return any(os.path.lexists(os.path.join(path, f)) for f in ("meta.json", PROCESS_FILE))


def _read_json_file(path):
    """The JSON value of one of our small files in a job's directory (a regular file,
    not through a link, bounded: see _safe_read); FileNotFoundError when missing,
    TraceFormatError when it cannot be read or is not JSON."""
    data = read_bounded(path)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from None


def _process_facts(directory):
    """(process.json's facts, or {}; what is wrong with it, or None when it is
    fine or missing)."""
    path = os.path.join(directory, PROCESS_FILE)
    try:
        facts = _read_json_file(path)
    except FileNotFoundError:
        return {}, None
    except TraceFormatError as exc:
        return {}, str(exc)
    if not isinstance(facts, dict):
        return {}, f"{path}: not an object"
    return facts, None


def _pid_of_name(directory):
    """The pid a process directory's name gives (proc-<pid>, proc-<pid>-<n>), or None."""
    name = os.path.basename(os.path.normpath(directory))
    number = name[len("proc-"):].split("-")[0]
    return int(number) if name.startswith("proc-") and number.isdigit() else None


def _is_pid(value):
    return type(value) is int and 0 < value < 1 << 32


def _alive(pid):
    if not _is_pid(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:        # a zombie (our own child, not yet waited for) has exited
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def read_process(directory):
    """(Trace or None, facts dict, state, note) for one process directory."""
    from .readers.saved import load
    if os.path.islink(directory):
        raise TraceFormatError(f"{directory}: a symbolic link, not followed (it may lead out "
                               "of the job's directory)")
    facts, damaged = _process_facts(directory)
    if os.path.lexists(os.path.join(directory, "meta.json")):
        trace = load(directory)
        meta = _read_json_file(os.path.join(directory, "meta.json"))
        for name in ("pid", "ppid", "argv", "host", "label", "rank", "local_rank",
                     "world_size", "root", "worker_id", "num_workers"):
            if name in meta:
                facts[name] = meta[name]
        return trace, facts, "complete", ""
    pid = facts.get("pid")
    if not _is_pid(pid):
        if _pid_of_name(directory) is not None:
            facts["pid"] = _pid_of_name(directory)
        if damaged:
            return None, facts, "lost", f"no meta.json, and {damaged}"
        return None, facts, "lost", ("ended before it recorded anything (no meta.json, no "
                                     "process.json)")
    state = "running" if _alive(pid) else "recovered"
    try:
        trace, damage = _recover(directory, facts)
    except _NothingSpilled as exc:
        if state == "running":
            return None, facts, "running", (f"still running, nothing spilled yet: its trace "
                                            f"goes to {directory}")
        return None, facts, "lost", str(exc)
    except TraceFormatError as exc:
        return None, facts, "lost", str(exc)
    note = ("still running: joined as far as it has spilled" if state == "running" else
            "ended without saving (killed?): joined as far as it had spilled")
    return trace, facts, state, "; ".join([note] + damage)


def recover(directory, facts=None):
    """The Trace of a process directory that has no meta.json (its process was
    killed, or is still running), from process.json, keys.jsonl and events.bin's
    complete blocks. Nothing in the directory is changed. A damaged keys.jsonl
    costs the names (or the clock's start) it held, not the calls: read_process's
    note says what was damaged."""
    if facts is None:
        facts = _process_facts(directory)[0]
    return _recover(directory, facts)[0]


MAX_THREADS = 1 << 16       # a block for a thread index beyond: events.bin is damaged


class _NothingSpilled(TraceFormatError):
    """A process directory whose events.bin holds no block yet."""


def _recover(directory, facts):
    """(recover's Trace, phrases saying what was damaged and what it cost)."""
    from .readers.saved import HeldFile as _HeldFile, load_parts as _load_parts
    from .saved_format import EVENTS_HEADER, FORMAT_NAME, FORMAT_VERSION
    facts = dict(facts)
    if not _is_pid(facts.get("pid")):
        raise TraceFormatError(f"{directory}: process.json lacks pid")
    if facts.get("clock_name") not in ("tsc", "monotonic"):
        raise TraceFormatError(f"{directory}: process.json lacks clock_name")
    records, damage = _key_records(os.path.join(directory, KEYS_FILE))
    path = os.path.join(directory, "events.bin")
    if not os.path.lexists(path):
        raise _NothingSpilled(f"{path}: nothing was spilled (no such file)")
    events_file = _HeldFile(path)
    if events_file.size < EVENTS_HEADER.size:
        raise _NothingSpilled(f"{path}: nothing was spilled")
    blocks = _spilled_blocks(events_file, damage)
    start = next((r for r in records if r.get("first") == 0 and "start_ns" in r), None)
    if start is not None:
        tick0, start_ns = start["tick0"], start["start_ns"]
    elif blocks.threads:
        tick0 = blocks.first_base
        start_ns, how = _estimated_start(facts, tick0)
        damage.append(f"the clock's start was lost with {KEYS_FILE}'s first line: {how}")
    else:
        raise _NothingSpilled(f"{directory}: nothing was spilled yet")
    end_ticks = max(tick0, blocks.end_ticks if blocks.threads else tick0)
    keys, names, tags, unnamed = _recovered_keys(records, blocks.max_key, blocks.max_tag)
    if unnamed:
        damage.append(f"{unnamed} function{'s' if unnamed > 1 else ''} unnamed (no name in "
                      f"{KEYS_FILE})")
    # A region's args are known only at stop: a recovered region keeps its name.
    annotation_args = [{} for _ in range(blocks.max_args + 1)]
    ns_per_tick = _clock.ns_per_tick() if facts["clock_name"] == "tsc" else 1.0
    stop_ns = start_ns + int(float(end_ticks - tick0) * ns_per_tick)
    # OS thread ids are known only at stop: lanes 1, 2, ... stand in for them.
    thread_list = [{"index": i, "native_id": i + 1, "ident": i + 1, "name": f"thread {i}",
                    "n_events": blocks.threads.get(i, 0), "dropped": 0}
                   for i in range(max(blocks.threads, default=-1) + 1)]
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "pid": facts["pid"],
            "python": facts.get("python", "?"), "backend": facts.get("backend", "?"),
            "clock": facts["clock_name"], "start_ns": start_ns, "stop_ns": stop_ns,
            "dropped_events": 0, "keys": keys,
            "marks": [], "threads": thread_list, "tags": tags,
            "annotation_args": annotation_args,
            "events": {"file": "events.bin", "tick0": tick0, "ns0": start_ns,
                       "ns_per_tick": float(ns_per_tick), "stop_ticks": end_ticks,
                       "min_duration_ns": 0, "length": blocks.length}}
    return _load_parts(directory, meta, names, {"modules": [], "optimizer_steps": []}), damage


class _Blocks:
    """What events.bin's complete blocks hold: events per thread index, the
    earliest block's base and the latest clock, the highest key, tag and
    annotation args index the events name, and the length read."""

    def __init__(self):
        self.threads, self.first_base, self.end_ticks = {}, None, None
        self.max_key = self.max_tag = 0
        self.max_args = -1
        self.length = 0


def _spilled_blocks(events_file, damage):
    """_Blocks of events_file, read a piece at a time up to its last complete block
    (a running or killed process's last one may be cut), or up to a block that is
    damaged (said in damage)."""
    from .readers.saved import BLOCK_READ_EVENTS
    from .saved_format import EVENT_BLOCK, EVENT_RECORD_SIZE, EVENTS_HEADER
    path = events_file.path
    blocks = _Blocks()
    offset = EVENTS_HEADER.size
    needed = ffi.new("uint64_t[3]")         # keys, tags, annotation args
    piece = ffi.new("pt_event[]", BLOCK_READ_EVENTS)
    while events_file.size - offset >= EVENT_BLOCK.size:
        index, reserved, count, base = EVENT_BLOCK.unpack(events_file.read(offset,
                                                                           EVENT_BLOCK.size))
        body = offset + EVENT_BLOCK.size
        if index >= MAX_THREADS or reserved or not count:     # (never written empty)
            damage.append(f"{path} is damaged at byte {offset}: the "
                          f"{events_file.size - offset} bytes from there are left out")
            break
        if count > (events_file.size - body) // EVENT_RECORD_SIZE:
            break
        ticks = base
        for first in range(0, count, BLOCK_READ_EVENTS):
            n = min(BLOCK_READ_EVENTS, count - first)
            size = n * EVENT_RECORD_SIZE
            if events_file.read_into(body + first * EVENT_RECORD_SIZE,
                                     ffi.buffer(piece, size)) != size:
                raise TraceFormatError(f"{path}: changed while it was read")
            ticks += lib.pt_events_ticks(piece, n)
            lib.pt_events_extent(piece, n, needed)
        if index not in blocks.threads:
            blocks.first_base = base if blocks.first_base is None else min(blocks.first_base,
                                                                           base)
        blocks.end_ticks = ticks if blocks.end_ticks is None else max(blocks.end_ticks, ticks)
        blocks.threads[index] = blocks.threads.get(index, 0) + count
        offset = body + count * EVENT_RECORD_SIZE
    blocks.max_key, blocks.max_tag = max(0, needed[0] - 1), max(0, needed[1] - 1)
    blocks.max_args = needed[2] - 1
    blocks.length = offset
    return blocks


def _estimated_start(facts, tick0):
    """(CLOCK_MONOTONIC ns at tick0, how that was found) for a process whose
    clock start was lost: the same clock (monotonic ticks are its ns), or this
    host's TSC read now (the same host and boot: the TSC is invariant)."""
    if facts["clock_name"] == "monotonic":
        return tick0, "its times are kept (CLOCK_MONOTONIC)"
    if _clock.USE_TSC and facts.get("host") in (None, _host()):
        ticks, ns = _clock.reading()
        return (ns - int(float(ticks - tick0) * _clock.ns_per_tick()),
                "its times are mapped through this host's TSC now, exact unless it rebooted "
                "since")
    return 0, "its times could not be placed (another host's TSC): they count from 0"


def _key_records(path):
    """(the well-formed records of a process's keys.jsonl, phrases for the lines
    that are not, each left out)."""
    from ._torch import TAG_KINDS
    from .saved_format import INT64, KINDS, hash_id
    records = []
    numbered, damage = _read_jsonl(path)
    name = os.path.basename(path)
    for number, record in numbered:
        problem = _key_record_problem(record, KINDS, TAG_KINDS, INT64)
        if problem:
            damage.append(f"{name} line {number} has {problem}")
            continue
        names = {hid: text for hid, text in record["names"].items()
                 if str(hash_id(text)) == hid}
        if len(names) < len(record["names"]):
            damage.append(f"{name} line {number}: {len(record['names']) - len(names)} "
                          "names do not match their hash ids")
        records.append(dict(record, names=names))
    return records, damage


def _key_record_problem(record, kinds, tag_kinds, int64):
    """What is wrong with a keys.jsonl record (see _KeyNames), or None."""
    def integer(value, low=0, high=int64[1]):
        return type(value) is int and low <= value <= high
    if not integer(record.get("first")) or not integer(record.get("tags_first", 0)):
        return "a bad first or tags_first"
    keys, names, tags = record.get("keys"), record.get("names"), record.get("tags", [])
    if not isinstance(keys, list) or not all(
            isinstance(k, list) and len(k) == 3 and isinstance(k[0], str) and k[1] in kinds
            and integer(k[2], 0, lib.PT_HIDE_STARTUP) for k in keys):
        return "bad keys"
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        return "bad names"
    if not isinstance(tags, list) or not all(
            (t is None and record.get("tags_first", 0) + i == 0)     # index 0: no tag
            or isinstance(t, dict) and isinstance(t.get("name"), str)
            and t.get("kind") in tag_kinds
            and (t.get("kind") != "module" or integer(t.get("module_id"), *int64))
            for i, t in enumerate(tags)):
        return "bad tags"
    if ("start_ns" in record or "tick0" in record) and not (
            record["first"] == 0 and integer(record.get("start_ns"), *int64)
            and integer(record.get("tick0"), *int64)):
        return "bad start_ns or tick0"
    return None


def _recovered_keys(records, max_key, max_tag):
    """(meta.json's keys, hashes.json's names, the tags, how many keys the events
    use have no name) from keys.jsonl's records, each key and tag placed at its own
    index (a damaged line costs its own names only)."""
    from .saved_format import hash_id
    by_key, names, by_tag = {}, {}, {}
    for record in records:
        for offset, entry in enumerate(record["keys"]):
            by_key.setdefault(record["first"] + offset, entry)
        names.update(record["names"])
        for offset, tag in enumerate(record.get("tags", [])):
            by_tag.setdefault(record.get("tags_first", 0) + offset, tag)
    keys, unnamed = [], 0
    for key in range(max(max(by_key, default=0), max_key) + 1):
        hid, kind, hide = by_key.get(key, [None, "python", 0])
        if hid not in names:
            name = "<unknown>" if key == 0 else f"<unnamed key {key}>"
            unnamed += key != 0 and key <= max_key
            hid = str(hash_id(name))
            names[hid] = name
        keys.append([hid, kind, {}, hide])
    tags = [None] + [by_tag.get(t) or {"kind": "module", "name": f"<unnamed tag {t}>",
                                       "module_id": t}
                     for t in range(1, max(max(by_tag, default=0), max_tag) + 1)]
    return keys, names, tags, unnamed


def status(inputs):
    """ProcessResult per process of inputs, without writing anything."""
    return [result for result, _ in _read_all(inputs)]


def _read_all(inputs):
    from .render.summary import calls_begun
    out = []
    for directory in process_directories(inputs):
        try:
            trace, facts, state, note = read_process(directory)
        except TraceFormatError as exc:
            trace, facts, state, note = None, {"pid": _pid_of_name(directory)}, "lost", str(exc)
        pid = facts.get("pid")
        if trace is not None:
            pid = trace.pid
        label = facts.get("label") or f"pid {pid}"
        calls = calls_begun(trace) if trace is not None else 0
        out.append((ProcessResult(pid, label, state, calls, directory, note),
                    (trace, facts)))
    return out


def unfollowed(job_dir):
    """The children a job launched that were not followed: dicts with pid (the
    launcher), command, reason, and how ("subprocess", "posix_spawn", "exec",
    "spawn": multiprocessing's; when known) and child_pid (when known). Those are
    the children noted as they were launched (not Python, started with -I/-E/-S,
    given an environment without PYTRACE_CFFI_FOLLOW, their tracing failed to
    start), and the followed Python children that left no directory: ended before
    their bootstrap ran (a spawned Pool worker terminated while Python started).
    A damaged line of either file is one more dict, with "damaged" saying which
    line and what is wrong (pid None, command [])."""
    noted, damaged = _child_records(job_dir, UNFOLLOWED_FILE)
    launches, more = _child_records(job_dir, LAUNCHED_FILE)
    return (noted + _left_no_trace(job_dir, noted, launches)
            + [{"pid": None, "command": [], "damaged": what,
                "reason": "a damaged line: a child noted there may be missing here"}
               for what in damaged + more])


_CHILD_FIELDS = {"pid": lambda v: v is None or _is_pid(v),
                 "child_pid": lambda v: v is None or _is_pid(v),
                 "command": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
                 "how": lambda v: isinstance(v, str), "name": lambda v: isinstance(v, str),
                 "reason": lambda v: isinstance(v, str)}


NOT_READ_WHOLE = "not every process of"       # the TraceWarning of not_read_whole


def not_read_whole(job_dir, results):
    """The TraceWarning text for a job's trace read as one (summary, export): each
    process not read whole (lost, recovered, running, or damaged: ProcessResult's
    note says what), and each damaged line of the job's launch notes; None when
    there is none."""
    lines = [f"pid {r.pid} ({r.label}): {r.state}, {r.calls} calls"
             + (f" - {r.note}" if r.note else "") + f" [{r.directory}]"
             for r in results if r.state != "complete" or r.note]
    for name in (LAUNCHED_FILE, UNFOLLOWED_FILE):
        lines += [f"{what} (a child noted there may be missing from this report)"
                  for what in _child_records(job_dir, name)[1]]
    if not lines:
        return None
    return f"{NOT_READ_WHOLE} {job_dir} was read whole:\n  " + "\n  ".join(lines)


def _child_records(job_dir, name):
    """(the records of launched.jsonl or unfollowed.jsonl whose fields have their
    types, phrases for the lines left out)."""
    numbered, damaged = _read_jsonl(os.path.join(job_dir, name))
    records = []
    for number, record in numbered:
        bad = [field for field, ok in _CHILD_FIELDS.items()
               if field in record and not ok(record[field])]
        if bad or not isinstance(record.get("command"), list):
            damaged.append(f"{name} line {number} has a bad {', '.join(bad) or 'command'}")
        else:
            records.append(record)
    return records, damaged


def _read_jsonl(path):
    """([(line number, JSON object)] of a file we append one line at a time
    (keys.jsonl, launched.jsonl, unfollowed.jsonl), [a phrase per line that is not
    one, and for a file that cannot be read]); ([], []) when there is none."""
    name = os.path.basename(path)
    try:
        data = read_bounded(path)
    except FileNotFoundError:
        return [], []
    except TraceFormatError as exc:
        return [], [str(exc)]
    found, damaged = [], []
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            # the last line without its newline: its writer ended as it wrote it
            what = ("cut short" if number == len(lines) else
                    "nested too deeply" if isinstance(exc, RecursionError) else "not JSON")
            damaged.append(f"{name} line {number} is {what}")
            continue
        if isinstance(record, dict):
            found.append((number, record))
        else:
            damaged.append(f"{name} line {number} is not an object")
    return found, damaged


def _left_no_trace(job_dir, noted, launches):
    """The launches (launched.jsonl's) that no process directory (nor a failed
    bootstrap's note) answers, with the reason. A launch with a pid is answered by
    that pid's directory; one without (subprocess, posix_spawn) by an unanswered
    directory whose command is the launch's (or runs it: a #! script's
    interpreter line comes first)."""
    if not launches:
        return []
    answers = []          # (pid, command) of each process that got as far as tracing
    try:
        directories = process_directories(job_dir)
    except TraceFormatError:
        directories = []
    for directory in directories:
        facts = _process_facts(directory)[0] if not os.path.islink(directory) else {}
        if facts.get("root") or facts.get("forked"):
            continue                      # not launched: the job's own, or forked
        pid = facts.get("pid")
        if not isinstance(pid, int):
            pid = _pid_of_name(directory)
        answers.append([pid, facts.get("command")])
    answers += [[r.get("child_pid"), r.get("command")] for r in noted if r.get("child_pid")]
    missing = []
    for launch in sorted(launches, key=lambda r: r.get("child_pid") is None):
        child = launch.get("child_pid")
        for answer in answers:
            if (answer[0] == child if child is not None and launch.get("how") != "exec"
                    else _runs(answer[1], launch.get("command"))
                    and (child is None or answer[0] == child)):
                answers.remove(answer)
                break
        else:
            missing.append(launch)
    out = []
    running = None
    for launch in missing:
        child = launch.get("child_pid")
        if child is None and running is None:
            running = list(_descendant_commands().values())
        if child is not None and launch.get("how") != "exec" and _alive(child):
            reason = "it left no trace yet (still starting up, or stopped before tracing)"
        elif child is None and any(_runs(command, launch.get("command")) for command in running):
            reason = STARTING_AT_FINISH
        else:
            reason = ("it left no trace: it ended before its bootstrap could start "
                      "tracing (terminated or killed while Python started up?)")
        out.append(dict(launch, reason=reason))
    return out


def _descendant_commands():
    """{pid: argv} of the live processes descending from this one: a child whose
    launch noted no pid (subprocess) is found among them by its command line
    (Linux /proc; {} elsewhere)."""
    parents = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        try:
            with open(f"/proc/{int(name)}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] != b"Z":
                parents[int(name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    mine, newest = set(), {os.getpid()}
    while newest:
        newest = {pid for pid, ppid in parents.items() if ppid in newest} - mine
        mine |= newest
    commands = {}
    for pid in mine:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                commands[pid] = [os.fsdecode(a) for a in f.read().split(b"\0")[:-1]]
        except OSError:
            continue
    return commands


def _runs(command, launched):
    """Whether a process's command line is that of launched (argv lists): the same;
    or, launched through a #! script or a launcher (pyenv's shims), another
    program's path first (the interpreter's; for a #! script its interpreter line
    comes before the script's path) but the same arguments after it."""
    if not isinstance(command, list) or not isinstance(launched, list) or not launched:
        return False
    if command == launched:
        return True
    n = len(launched)
    if len(command) < n:
        return False
    if n > 1:
        return command[len(command) - n + 1:] == launched[1:]
    return os.path.basename(command[-1]) == os.path.basename(launched[0])


def _sort_key(item):
    result, (trace, facts) = item
    if facts.get("root"):
        group = 0
    elif isinstance(facts.get("rank"), int):
        group = 1
    else:
        group = 2
    return (group, facts.get("rank") or 0, trace.start_ns if trace else 0, result.pid or 0)


def join(inputs, output):
    """Writes the processes of inputs (trace directories, process directories or
    saved traces) onto one timeline at output, in the format its name picks:
    Chrome JSON (.json, .json.gz) with a pid lane per process, named by its label,
    ordered root first, then ranks, then the rest by start; .pftrace with a
    process track per process (threads under it, in that order); .html with the
    lanes grouped by process; any other name: a saved-trace directory holding
    every process (docs/FORMAT.md), which pytrace_cffi.load reads back as a Trace
    of several processes. Times on the first process's CLOCK_MONOTONIC (other
    hosts' mapped through their realtime anchors). Returns a ProcessResult per
    process."""
    trace, results = joined_trace(inputs)
    write_any(trace, os.fspath(output))
    return results


def write_any(trace, path):
    """Writes trace to path in the format its name picks (as `export` does)."""
    formats.write(trace, path)


def joined_trace(inputs):
    """(Trace, [ProcessResult]): the processes of inputs as one Trace of several
    processes (Trace.processes: pid -> label and facts, in lane order; each
    thread's pid), times aligned as join aligns them. It streams from the
    processes' own traces (no temporary file, no slice table: see _JoinedStreams)."""
    items, traced = _traced(inputs)
    return _joined(traced, _host_shifts(traced)), [r for r, _ in items]


def _traced(inputs):
    """(every (ProcessResult, (trace, facts)) in lane order, the (result, trace,
    facts) of those that could be read)."""
    items = sorted(_read_all(inputs), key=_sort_key)
    traced = [(r, t, f) for r, (t, f) in items if t is not None]
    if not traced:
        raise TraceFormatError("no process in " + ", ".join(map(str, [inputs]))
                               + " could be read")
    return items, traced


LANE_STEP = 1 << 22       # above any Linux pid or tid (pid_max is at most 2**22)


def _lane_ids(traced):
    """Per process: (its lane pid, {OS tid: lane tid}). A joined trace keys
    processes, lanes and Chrome/Perfetto pids by pid, and marks find their thread by
    tid, so every process needs its own pid and every thread its own tid across
    the join. The OS ids are kept where they are unique; a process sharing its pid
    with an earlier one (another host's, often the same small pid in containers;
    a pid reused, or the image after an exec) gets pid + k * LANE_STEP, as do its
    threads' tids that an earlier process used. Processes.os_pid keeps the OS pid."""
    pids, tids, out = set(), set(), []

    def unused(number, used):
        lane = number
        while lane in used:
            lane += LANE_STEP
        used.add(lane)
        return lane

    for _, trace, _ in traced:
        lane_pid = unused(trace.pid, pids)
        own = {thread.native_id for thread in trace.threads if thread.native_id}
        own.update(mark.thread for mark in trace.marks)
        out.append((lane_pid, {tid: unused(tid, tids) for tid in sorted(own)}))
    return out


def _joined(traced, shifts):
    """The Trace of several processes: threads in lane order (numbered across
    processes, each with its process's lane pid and tid: see _lane_ids), one key
    per (name, kind, args) over all processes, every time moved by its
    process's host shift; its calls streamed from the processes' traces."""
    from .trace import Mark, Trace
    names, kinds, key_args, key_of = [], [], {}, {}

    def union_key(name, kind, args):
        identity = (name, kind, json.dumps(args, sort_keys=True) if args else "")
        key = key_of.get(identity)
        if key is None:
            key = key_of[identity] = len(names)
            names.append(name)
            kinds.append(kind)
            if args:
                key_args[key] = dict(args)
        return key

    threads, parts, stats, marks, processes = [], [], [], [], {}
    for (result, trace, facts), shift, (lane_pid, lane_tid) in zip(traced, shifts,
                                                                     _lane_ids(traced)):
        key_map = ffi.new("uint32_t[]", [
            union_key(name, kind, trace.key_args.get(key))
            for key, (name, kind) in enumerate(zip(trace.names, trace.key_kinds))] or [0])
        processes[lane_pid] = {"label": result.label, "state": result.state,
                               "host": facts.get("host"), "ppid": facts.get("ppid"),
                               "argv": facts.get("argv")}
        if lane_pid != trace.pid:
            processes[lane_pid]["os_pid"] = trace.pid
        for thread, n, open_at_stop, depth in trace.thread_counts():
            threads.append(thread._replace(index=len(threads), pid=lane_pid,
                                           native_id=lane_tid.get(thread.native_id,
                                                                  thread.native_id)))
            parts.append((trace, thread.index, key_map, len(trace.names), shift))
            stats.append((n, open_at_stop, depth))
        marks.extend(Mark(m.kind, m.ns + shift, lane_tid.get(m.thread, m.thread), m.name,
                          m.args) for m in trace.marks)
    root = traced[0][1]
    streams = _JoinedStreams(parts, stats)
    joined = Trace(names=names, key_kinds=kinds, key_args=key_args, threads=threads,
                   slices=None, streams=streams, build_slices=streams.table,
                   start_ns=min(t.start_ns + shift for (_, t, _), shift in zip(traced, shifts)),
                   stop_ns=max(t.stop_ns + shift for (_, t, _), shift in zip(traced, shifts)),
                   pid=root.pid, python_version=root.python_version, backend=root.backend,
                   clock=root.clock, params={"modules": [], "optimizer_steps": []},
                   marks=marks, dropped_events=sum(t.dropped_events for _, t, _ in traced),
                   realtime_anchor=root.realtime_anchor)
    joined.processes = processes
    return joined


class _JoinedStreams:
    """The streams of a joined trace (see trace.Trace and render/walk.py): per
    joined thread, its process's batches (from that trace's own walk, or its
    slice table) remapped in C (pt_remap_slices) onto the union keys and the
    shifted clock, REMAP_BATCH slices at a time into a scratch buffer; each
    batch valid until the next is asked for. No records: a .pftrace encodes
    the slice batches."""

    REMAP_BATCH = 1 << 16

    def __init__(self, parts, stats):
        self.parts = parts          # per thread: (trace, its index there, key map, keys, shift)
        self.stats = stats          # per thread: (calls, open at stop, deepest depth)

    def slices(self, index):
        from .render.chrome import thread_batches
        trace, local, key_map, n_map, shift = self.parts[index]
        scratch = None
        for slices, n, first in thread_batches(trace, local):
            if scratch is None:
                scratch = ffi.new("pt_slice[]", min(self.REMAP_BATCH, max(1, n)))
                capacity = len(scratch)
            elif n > capacity and capacity < self.REMAP_BATCH:
                scratch = ffi.new("pt_slice[]", min(self.REMAP_BATCH, n))
                capacity = len(scratch)
            for at in range(0, n, capacity):
                count = min(capacity, n - at)
                if lib.pt_remap_slices(slices + at, count, key_map, n_map, shift,
                                       scratch) != lib.PT_OK:
                    raise TraceFormatError(
                        f"pid {trace.pid}, thread {local}: a call names a function its "
                        f"trace does not know, or its time overflows when shifted by "
                        f"{shift} ns")
                yield scratch, count, first + at

    def table(self):
        """The slice table (Trace.thread_slices): every batch copied in."""
        from .render.walk import table_from_streams
        return table_from_streams(self)


def _realtime_offset(trace):
    """CLOCK_REALTIME minus CLOCK_MONOTONIC on the trace's host, from its start
    anchor, or None when the trace has none."""
    anchor = (getattr(trace, "realtime_anchor", None) or {}).get("start")
    if not anchor:
        return None
    return anchor["realtime_ns"] - anchor["monotonic_ns"]


def _host_shifts(traced):
    """Per process, the ns added to its CLOCK_MONOTONIC times to put them on the
    first process's host clock. Processes on one host share CLOCK_MONOTONIC (0);
    another host's are mapped through CLOCK_REALTIME with each trace's realtime
    anchor, as good as the hosts' clocks agree (NTP: typically well under a ms).
    Without anchors they stay unshifted, and a TraceWarning says so."""
    hosts = sorted({f.get("host") for _, _, f in traced if f.get("host")})
    reference_host = traced[0][2].get("host")
    reference = _realtime_offset(traced[0][1])
    shifts, unaligned = [], set()
    for _, trace, facts in traced:
        host = facts.get("host")
        offset = _realtime_offset(trace)
        if host == reference_host or len(hosts) < 2:
            shifts.append(0)
        elif offset is None or reference is None:
            shifts.append(0)
            unaligned.add(host)
        else:
            shifts.append(offset - reference)
    if len(hosts) > 1:
        import warnings
        from .errors import TraceWarning
        detail = (f"lanes of {', '.join(sorted(map(str, unaligned)))} are not aligned "
                  "(no realtime anchor)" if unaligned else
                  "lanes are aligned through CLOCK_REALTIME, as closely as the hosts' "
                  "clocks agree")
        warnings.warn(f"the processes ran on {len(hosts)} hosts ({', '.join(hosts)}): "
                      f"CLOCK_MONOTONIC differs between hosts; {detail}", TraceWarning,
                      stacklevel=3)
    return shifts


# -- `run` ------------------------------------------------------------------

def job_dir_for(path, keep_in=None):
    """A new directory for `run -o path`'s per-process traces: keep_in (the
    user's --processes-dir, made if missing), else one in the temporary directory
    (not beside path: the program may remove the place it writes to)."""
    if keep_in is not None:
        os.makedirs(keep_in, exist_ok=True)
        return os.path.abspath(keep_in)
    import tempfile
    name = os.path.basename(path.rstrip("/" + os.sep)) or "trace"
    return tempfile.mkdtemp(prefix=f"pytrace_cffi-{name}-", suffix=".processes")


def make_run_windows(output, options, write, export, keep_in=None):
    """`run`'s tracing windows, following children (see _windows.Windows); write
    and export as for finish_run; keep_in: --processes-dir, or None."""
    from ._windows import Windows, numbered, stopped

    class FollowWindows(Windows):
        def guard_ending(self):
            """Done by the follow session: _exit_saving and _audit write OUT from
            the job, or hand its finish over to an exec'd image (_run_finish)."""

        def finish(self):
            if not _run_ended_early:     # else written, or handed over, at an exec
                super().finish()

        def open(self, noop=False):
            global _run_finish, _run_pid, _spill_beside
            from . import _has_session, start
            if noop:                    # a schedule's warmup: nothing kept, none followed
                self._job = None
                return super().open(noop=True)
            with self._lock:
                if _has_session():
                    return
                number = self._count + 1
                path = numbered(self._output, number) if self._numbered else self._output
                keep = (numbered(keep_in, number, formats.DIRECTORY)
                        if self._numbered and keep_in is not None
                        else keep_in)
                self._job = job_dir_for(path, keep)
                _run_finish = (os.getpid(), self._job, path, keep_in is not None, write,
                               export)
                _run_pid = os.getpid()
                _spill_beside = os.path.dirname(os.path.abspath(path.rstrip(os.sep)))
                _handle_sigterm()        # (the session's end takes it away again)
            # Last statement: what this frame runs once the hooks are live is recorded.
            start(follow_children=True, output=self._job, **self._options)

        def close(self, save=True):
            from . import _has_session
            global _run_finish
            with self._lock:
                if not _has_session():
                    return
                _run_finish = None
                _, interrupted = stopped()
                if not save or self._job is None:      # a schedule's warmup
                    if self._job is not None and keep_in is None:
                        import shutil
                        shutil.rmtree(self._job, ignore_errors=True)
                    return
                self._count += 1
                path = numbered(self._output, self._count) if self._numbered else self._output
                if not finish_run(self._job, path, write, export, keep=keep_in is not None,
                                  interrupted=interrupted):
                    self.lost = True

    return FollowWindows(output, options, write)


def finish_run(job_dir, path, write, export, keep=False, interrupted=False):
    """After `run`: OUT written and one line per process traced and per child not
    followed. One process (the program's own, nothing followed): written as
    without following, by write(trace, path), which returns the path written
    (perhaps a fallback) or None. Several: the whole job, joined by join() for
    .json/.json.gz, else by export(job_dir, path) (what `export DIR -o OUT` does:
    .html, .pftrace or a saved directory). Writing is said in a line when it
    starts and one when it ends (size, time).

    First RUN_DONE_FILE goes into job_dir: a process of the job that outlives the
    run stops recording at its next spill. The per-process traces are in job_dir
    and, when its file system filled up, in overflow_dir(job_dir) beside OUT.
    They are removed afterwards, unless keep (the user's --processes-dir), OUT
    could not be written (a Ctrl-C while writing, or interrupted: one came while
    this process's trace was saved), or a process is still running or could not
    be read: then they stay, their place is printed, and without OUT the command
    that writes it. Never changes the exit code: returns whether OUT was written."""
    _write_json_quietly(os.path.join(job_dir, RUN_DONE_FILE), {"pid": os.getpid()})
    removed = not os.path.exists(os.path.join(job_dir, JOB_FILE))
    places = _job_places(job_dir)
    results, written = [], None
    try:
        if interrupted:
            raise KeyboardInterrupt
        if places:
            inputs = _process_inputs(places)
            results = status(inputs)
            written = _write_job(results, inputs, path, write, export)
    except KeyboardInterrupt:
        interrupted = True
    except (OSError, TraceFormatError) as exc:
        _say(f"cannot read the per-process traces of the job: {exc}")
    skipped = unfollowed(job_dir)
    # A child still starting up finds RUN_DONE_FILE (and so stays untraced) only
    # while job_dir is there.
    unsettled = any(r.state in ("running", "lost") for r in results) or any(
        child.get("reason") == STARTING_AT_FINISH for child in skipped)
    show_dirs = keep or not written or unsettled
    for r in results if len(results) > 1 else ():
        _say(f"  pid {r.pid} ({r.label}): {_state_text(r)}"
             + (f" [{r.directory}]" if show_dirs else ""))
    for line in unfollowed_lines(skipped):
        _say(f"  {line}")
    if removed:
        _say(f"{job_dir} was removed while the program ran: the traces of the processes "
             "that had ended by then are lost, with its notes of the children not followed"
             + ("; the running ones were saved again" if places else ""))
    shown = " and ".join(places) or job_dir
    if not places:
        _say(f"no process of the job left a trace in {job_dir}")
    elif interrupted:
        _say(f"interrupted while writing {path}: the per-process traces stay in {shown} "
             f"(finish it with: {_progress.finish_command(places, path)})")
    elif not written:
        _say(f"the per-process traces stay in {shown} (write them later with: "
             f"{_progress.finish_command(places, path)})")
    elif keep or unsettled:
        _say(f"the per-process traces stay in {shown}")
    else:
        import shutil
        for place in {job_dir, *places}:
            shutil.rmtree(place, ignore_errors=True)
    return bool(written)


def _write_job(results, inputs, path, write, export):
    """finish_run's writing of OUT (see there). Returns the path written, or None."""
    from .readers.saved import load
    root = [r for r in results if r.state == "complete" and _is_root(r.directory)]
    started = _progress.announce_writing(path)
    if len(results) == 1 and root:
        trace = load(root[0].directory)
        written = write(trace, path)
        if written:
            _say(f"{counted(len(trace), 'call')} on {counted(len(trace.threads), 'thread')}"
                 f" -> {written}{_progress.written_note(written, started)}")
        return written
    try:
        if formats.is_chrome_json(path):
            join(inputs, path)
        else:
            with warnings.catch_warnings():     # finish_run's lines say it
                warnings.filterwarnings("ignore", NOT_READ_WHOLE, TraceWarning)
                export(inputs, path)
    except (OSError, ValueError, TraceFormatError) as exc:
        _say(f"cannot write the job's trace to {path!r}: {exc}")
        return None
    _say(f"{counted(len(results), 'process')}, "
         f"{counted(sum(r.calls for r in results), 'call')} -> {path}"
         f"{_progress.written_note(path, started)}")
    return path


def _state_text(result):
    """A process's state in finish_run's lines: one that outlives the run stops
    recording at its next spill; this process, running to the reader, stopped."""
    text = f"{result.state}, {counted(result.calls, 'call')}" + (
        f" - {result.note}" if result.note else "")
    if result.state == "running" and result.pid == os.getpid():
        return (f"stopped, {counted(result.calls, 'call')} - its trace could not be completed (a full "
                "disk?): read as far as it was spilled")
    if result.state == "running":
        text += "; it outlives the run: it stops recording at its next spill"
    return text


def _job_places(job_dir):
    """The directories holding the job's per-process traces: job_dir, and the
    overflow beside OUT when a process moved there (see _KeyNames; made for a move
    that failed, it is removed empty)."""
    places = []
    for place in (job_dir, overflow_dir(job_dir)):
        try:
            if place and any(name.startswith("proc-") for name in os.listdir(place)):
                places.append(place)
            elif place and place != job_dir:
                os.rmdir(place)
        except OSError:
            pass
    return places


def _process_inputs(places):
    """What status and join read for the job: its directory when it is the one
    place, else the process directories of all (one moved beside OUT counts once)."""
    if len(places) == 1:
        return places[0]
    found = {}
    for place in places:            # the overflow last: its copy is the one moved
        for directory in process_directories(place):
            found[os.path.basename(directory)] = directory
    return sorted(found.values())


def _write_json_quietly(path, data):
    with contextlib.suppress(OSError):
        _write_json(path, data)


def unfollowed_lines(skipped):
    """The lines `run` prints for the children not followed (see unfollowed): one
    per Python child, with why; programs that are not Python (compilers, shells,
    tools: a job may start hundreds) together in one, counted by name."""
    lines, others = [], collections.Counter()
    for child in skipped:
        if child.get("damaged"):
            lines.append(f"{child['damaged']} (a child noted there may be missing here)")
            continue
        command = [str(a) for a in child.get("command") or ()]
        if child.get("reason") == NOT_PYTHON:
            others[os.path.basename(command[0]) if command else "?"] += 1
            continue
        how = ", ".join(filter(None, [child.get("name"), child.get("how"),
                                      child.get("child_pid") and f"pid {child['child_pid']}"]))
        shown = " ".join(command)
        shown = shown if len(shown) <= 100 else shown[:97] + "..."
        lines.append(f"not followed: {shown!r}{f' ({how})' if how else ''} "
                     f"started by pid {child.get('pid')}: {child.get('reason')}")
    if others:
        lines.append(f"not followed (not Python): {sum(others.values())} "
                     f"program{'s' if sum(others.values()) > 1 else ''}: "
                     + ", ".join(name + (f" x{n}" if n > 1 else "")
                                 for name, n in sorted(others.items())))
    return lines


def _is_root(directory):
    return bool(_process_facts(directory)[0].get("root"))
