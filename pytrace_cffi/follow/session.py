"""The follow session: a process traced into its own directory of a job.

FollowSession traces this process into DIR/proc-<pid>/ (a spilled saved
trace) and arranges for its children to do the same (PYTRACE_CFFI_FOLLOW and
the bootstrap directory in their environment; a forked child starts afresh:
continue_in_forked_child). Its spill hook (_KeyNames) appends the names of new
keys to keys.jsonl before each spill, so a killed process can be recovered,
and keeps the spill going when its place is removed or fills up.
"""
import contextlib
import json
import os
import signal
import sys
import threading

from .. import _clock, _running
from .._core import ffi, lib
from .._files import new_directory
from .._hiding import forget_startup_frames, key_hiding
from .._names import kind_of_source as _kind, name_for_source, path_prefixes
from .._status import check
from .._tracer import USE_MONITORING, Session
from ..model.saved_format import hash_id
from ..options import StartPlan
from ..spill import note_spill_problem
from . import exits, identity, live
from .exits import finish_here, install_exit_paths, restore_exit_paths
from .ring import describe_ring
from .identity import (BOOT_DIR, DEFAULT_MAX_EVENTS, ENV, JOB_FILE, KEYS_FILE, PROCESS_FILE,
                       _command_line, _new_process_dir, _run_over, _say, _write_json,
                       overflow_dir, overflow_dirs, process_facts)

KEYS_PER_LINE = 256          # keys.jsonl: at most so many keys named per line


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
        self.live = None                    # the LiveEncoder of run -o OUT.pftrace

    @property
    def path(self):
        return os.path.join(self.directory, KEYS_FILE)

    def __call__(self):
        with self.lock:
            self.keep_place()
            try:
                self._write_new()
            except OSError:
                # Nowhere else either: the block's write fails too and the C side
                # keeps the events in memory (recording stops); meta.json names
                # them at stop.
                if self._move_elsewhere():
                    with contextlib.suppress(OSError):
                        self._write_new()
            if self.live is not None:
                self.live.before_spill()

    def _write_new(self):
        n_keys = lib.pt_key_count(self.ptr)
        tags = self.watcher.tags if self.watcher is not None else [None]
        if n_keys <= self.keys_written and len(tags) <= self.tags_written:
            return
        sources = []
        check(lib.pt_key_sources(self.ptr, self.keys_written, ffi.cast("void *", id(sources))),
              self.ptr, "key sources")
        prefixes = path_prefixes() if self.trim_paths else ()
        names = [name_for_source(source, prefixes) for source in sources]
        # whether the filters left a key's code out (a start-up frame of such code
        # cannot hide what it runs: see key_hiding); its other flags come at stop
        flags = ffi.new("uint8_t[]", self.keys_written + len(sources))
        lib.pt_key_flags(self.ptr, flags, len(flags))
        hides = [key_hiding(source, flags[self.keys_written + i] & lib.PT_KEY_SKIPPED)
                 for i, source in enumerate(sources)]
        entries = [[str(hash_id(name)), _kind(source), hide]
                   for name, source, hide in zip(names, sources, hides)]
        lines = []
        # KEYS_PER_LINE keys a line at most: a flight recorder's dump keeps only
        # the lines naming a key its events use (pt_flight_files.c)
        for at in range(0, max(1, len(entries)), KEYS_PER_LINE):
            first = self.keys_written + at
            record = {"first": first,
                      # the first record also holds the clock's start, for recover()
                      **({"start_ns": lib.pt_start_ns(self.ptr),
                          "tick0": lib.pt_start_ticks(self.ptr)} if not first else {}),
                      "keys": entries[at:at + KEYS_PER_LINE],
                      "names": {entry[0]: name for entry, name in
                                zip(entries[at:at + KEYS_PER_LINE], names[at:])},
                      "tags_first": self.tags_written,
                      "tags": list(tags[self.tags_written:]) if not at else []}
            lines.append(json.dumps(record) + "\n")
        line = "".join(lines).encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            before = os.fstat(fd).st_size
            try:
                if os.write(fd, line) != len(line):
                    raise OSError(28, os.strerror(28))
            except OSError:
                # a line cut short would spoil the ones after it (recover reads them)
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, before)
                raise
        finally:
            os.close(fd)
        self.keys_written += len(sources)
        self.tags_written = len(tags)
        if self.live is not None:       # once written: a failed write names them again
            self.live.keys(names, [_kind(source) for source in sources], hides)

    # -- where the spill goes -------------------------------------------------
    def keep_place(self, stopped=False):
        """Before each spill (and once stopped, before the last one): once `run`
        has finished, recording stops (a process that outlives it would trace
        without bound into a directory nobody reads); a process directory
        removed while the job runs is made again, with everything the open
        files held; a place running short of room, or whose last block failed
        (pt_spill_errno), is left for overflow_dirs. Never raises."""
        try:
            over = _run_over(self.job_dir)
            if over and self.stopped_because is None and not stopped:
                self._stop_soon(over)
            if stopped:
                self._nowhere_else = False      # a last try: room may have been made
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
        while a place of overflow_dirs could take the spill."""
        if not overflow_dirs(self.job_dir) or self._nowhere_else:
            return False
        return _free_bytes(self.directory) < _reserve(self.directory) + 2 * self.chunk_bytes

    def _move_elsewhere(self):
        """Moves the spill into the job's directory beside OUT, else into the one
        in `run`'s current directory (overflow_dirs), the first on another file
        system with room for it. Returns whether it did."""
        if self._nowhere_else:
            return False
        for beside in overflow_dirs(self.job_dir):
            if not _within(self.directory, beside) and self._room_in(beside):
                return self._move_beside(beside)
        self._nowhere_else = True
        return False

    def _room_in(self, beside):
        existing = beside
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        needed = lib.pt_spill_bytes(self.ptr) + _reserve(existing) + 2 * self.chunk_bytes
        return not _same_device(existing, self.directory) and _free_bytes(existing) >= needed

    def _move_beside(self, beside):
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
        if self.live is not None:
            self.live.abandon("the process's trace moved while it ran")
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


class FollowSession(Session):
    """A Session that traces this process into a job's directory, DIR/proc-<pid>,
    and arranges for its children to do the same; it owns the run's output from
    start() to the file: the job's directory (output, a new temporary one for a
    flight recorder without output, or one of its own for output=FILE, whose
    finish writes FILE at stop(): plan.processes_dir, kept, else a temporary
    one; each of `run`'s windows that follows children is one). plan: an
    options.StartPlan; root: the job's
    first process (by default unless this one was started as a child); recorder:
    for a ring, a function that returns the flight recorder's class, handed down
    by the package's top (start(), the fork hooks, the bootstrap): the recorder
    sits on top of the session and imports it."""

    def __init__(self, plan, root=None, forked=False, recorder=None):
        options = dict(plan.options)
        self.forked = forked
        self.follows_children = plan.follow
        self.output_file = plan.output_file
        self._finish = None
        self._encoding_before = live.requested_compress()
        if plan.output_file is not None:       # FILE written from a job of its own
            # (here only: what writes a job is not every followed process's start-up:
            # its imports, tempfile's and random's, would be the program's too)
            from .finish import RunFinish, job_dir_for
            job_dir = job_dir_for(plan.output_file, plan.processes_dir)
            self._finish = RunFinish(job_dir, plan.output_file,
                                     keep=plan.processes_dir is not None, fmt=plan.format)
            self.sigterm_waits = exits.sigterm_waits   # stop() writes FILE within it
            if plan.format.live:
                live.request()
        elif plan.output is None:               # a flight recorder's, removed at stop
            job_dir = new_directory("pytrace_cffi-flight-")
            self.temporary_job = True
        else:
            job_dir = plan.output
        self.root = identity._child_job is None if root is None else root
        self.job_dir = os.path.abspath(job_dir)
        try:
            self.process_dir = identity.enter_job(self.job_dir, self.root)
            self._record(plan, options, recorder)
        except BaseException:
            self.forget_output_file()
            raise
        if self._finish is not None and self.follows_children:
            identity.run_here(plan.output_file)
            exits.owe(self._finish)     # os._exit, SIGTERM, an exec: FILE written first
            exits.handle_sigterm()

    def _record(self, plan, options, recorder):
        """The recording itself: a ring, or a spill into process_dir."""
        # the flight recorder: a ring (no spill file), keys named at each chunk
        self.ring = plan.ring
        if self.ring:
            options["max_events"] = None
        elif options["max_events"] is None:
            options["max_events"] = DEFAULT_MAX_EVENTS
        options.pop("output")               # (this process's is process_dir)
        self.follow_options = options       # (as the children get them)
        if self.ring:
            events, age_ns = self.ring
            super().__init__(output=None, **dict(options, max_events=events))
            check(lib.pt_set_note_sources(self.ptr), self.ptr, "flight recorder")
            if age_ns:
                check(lib.pt_set_max_age(self.ptr, _clock.ticks_for_ns(age_ns)), self.ptr,
                      "flight recorder")
        else:
            super().__init__(output=self.process_dir, **options)
        chunk_bytes = min(max(options["max_events"] or 0, 4096), 2 << 20) + 64
        self._key_names = _KeyNames(self.ptr, self.process_dir, self.trim_paths, self.watcher,
                                    self.job_dir, chunk_bytes)
        if not self.ring:
            # A ring has no spill: its keys are journaled by the recorder's thread
            # (and C notes each key's source for its own dumps). As its spill hook,
            # run at each chunk, cffi's calls let the GIL go and take it back at
            # once, so often that a thread waiting for it never asks for it: waits
            # of seconds with small rings (#33 item 11, benchmarks/gil_gaps.py).
            check(lib.pt_set_spill_hook(self.ptr, ffi.cast("void *", id(self._key_names))),
                  self.ptr, "spill hook")
        self.flight = None
        if self.ring:
            self.flight = recorder()(self, options["dumps_dir"], options["dump_signal"],
                                   options["watchdog"], options["dump_format"],
                                   options["dump_window"])
        if live.requested() and not self.ring:
            self._key_names.live = live.LiveEncoder(self.ptr, self.process_dir,
                                                    self.min_duration_ns)
        self.process_meta = {}
        self._saved_env = None

    def forget_output_file(self):
        """start() failed: nothing made for the output stays (a temporary job, the
        job of output=FILE)."""
        import shutil
        if self.temporary_job:
            shutil.rmtree(self.job_dir, ignore_errors=True)
        if self._finish is None:
            return
        live.request_as(self._encoding_before)
        if self.follows_children:
            exits.owe(None)
        if not self._finish.keep:
            shutil.rmtree(self._finish.job_dir, ignore_errors=True)
            return
        with contextlib.suppress(OSError):      # processes_dir: new or empty before
            for name in os.listdir(self._finish.job_dir):
                shutil.rmtree(os.path.join(self._finish.job_dir, name), ignore_errors=True)

    def write_output_file(self, result, interrupted=False, reraise=False):
        """stop()'s last step: FILE written from the job (lines on stderr say so,
        as `run` does); returns the WrittenTrace. Without FILE, result.
        interrupted (a Ctrl-C as the trace was saved: _running.stop_holding), or
        a Ctrl-C while FILE is written: not written, the job's per-process
        traces stay and a line says how to write it from them (and with reraise,
        the program's own stop(), that Ctrl-C is raised again then)."""
        if self._finish is None:
            return result
        live.request_as(self._encoding_before)
        from .written import WrittenTrace
        if self.follows_children and not exits.take_owed(self._finish):
            # handed over at an exec: the new image writes FILE (RunFinish.before_exec)
            return WrittenTrace(self.output_file, False, result.threads, result.dropped_events)
        written = self._finish.run(interrupted=interrupted, reraise=reraise)
        return WrittenTrace(self.output_file, bool(written), result.threads,
                            result.dropped_events)

    def start(self):
        # Everything before the hooks go live: what runs after would be recorded.
        sidecar = dict(process_facts(self.forked), pid=os.getpid(), root=self.root,
                       command=_command_line(), forked=self.forked,
                       clock_name="tsc" if _clock.USE_TSC else "monotonic",
                       python=sys.version.split()[0],
                       backend="sys.monitoring" if USE_MONITORING else "PyEval_SetProfile")
        if self.flight is not None:     # for `dump JOBDIR`: where and how to ask it
            sidecar["flight"] = {"dumps_dir": self.flight.dumps_dir,
                                 "signal": self.flight.signum,
                                 "requests": True,    # (DUMPS_DIR/.requests/<pid>)
                                 "dump_format": self.flight.dump_format}
        _write_json(os.path.join(self.process_dir, PROCESS_FILE), sidecar)
        self._key_names.sidecar = sidecar
        if self.root:
            _write_json(os.path.join(self.job_dir, JOB_FILE), {"root_pid": os.getpid()})
        if self.follows_children:
            self._set_environment()
        try:
            if self.follows_children:
                install_exit_paths(self.root)
            if self.flight is not None:
                self.flight.open()
            super().start()
        except BaseException:
            if self.flight is not None:
                self.flight.close()
            # Nothing of it stays: no environment, no wrapped exits, no directory.
            self._restore_environment()
            restore_exit_paths()
            import shutil
            shutil.rmtree(self.process_dir, ignore_errors=True)
            if self.root:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.job_dir, JOB_FILE))
            raise

    def _set_environment(self):
        config = json.dumps({"dir": self.job_dir, "options": self.follow_options,
                             "package": os.path.dirname(os.path.dirname(BOOT_DIR)),
                             "run_pid": identity._run_pid,
                             "spill_beside": identity._spill_beside,
                             "spill_fallback": identity._spill_fallback,
                             "live": live.requested_compress()})
        before = (os.environ.get(ENV), os.environ.get("PYTHONPATH"))
        os.environ[ENV] = config
        paths = (before[1] or "").split(os.pathsep)
        if BOOT_DIR not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([BOOT_DIR] + [p for p in paths if p])
        # (what was there, what we put there)
        self._saved_env = (before, (os.environ.get(ENV), os.environ.get("PYTHONPATH")))

    def _restore_environment(self):
        """The environment as before start(), unless the program set the variable
        meanwhile: then its value stays (less our bootstrap's PYTHONPATH entry)."""
        if self._saved_env is None:
            return
        for name, value, ours in zip((ENV, "PYTHONPATH"), *self._saved_env):
            now = os.environ.get(name)
            if now != ours:          # the program's own setting
                if name == "PYTHONPATH" and now and BOOT_DIR in now.split(os.pathsep):
                    os.environ[name] = os.pathsep.join(
                        p for p in now.split(os.pathsep) if p != BOOT_DIR)
            elif value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env = None

    def stop(self):
        if self.flight is not None:
            self.flight.close()
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

    @property
    def fixed_ns_per_tick(self):
        """The clock's slope the live encoder fixed (the trace keeps it), or None."""
        encoder = self._key_names.live
        return encoder.ns_per_tick if encoder is not None else None

    def finish_live(self, facts):
        """finish_spill's call once the last events are in events.bin."""
        if self._key_names.live is not None:
            self._key_names.live.finish(facts)

    def result(self):
        if self.ring:
            try:
                return self._ring_result()
            finally:
                restore_exit_paths()
                forget_startup_frames()
        try:
            with self._key_names.lock:      # its place, as at each spill
                self._key_names.keep_place(stopped=True)
                self.output = self.process_dir = self._key_names.directory
            if self._key_names.removed:
                note_spill_problem(self, f"the process directory {self._key_names.removed!r} "
                                         "was removed while tracing: its trace was saved "
                                         f"again, whole, in {self.output!r}")
            return super().result()
        finally:
            # Only now: a SIGTERM while the trace was being written waited for it.
            restore_exit_paths()
            forget_startup_frames()         # the trace written has taken its rules

    def _ring_result(self):
        """The flight recorder's trace (its ring, in memory), saved into the process
        directory as a followed process's trace is (the job's finish reads it)."""
        trace = super().result()
        if self.temporary_job:
            import shutil
            shutil.rmtree(self.job_dir, ignore_errors=True)
        else:
            from ..model.saved import save
            from ..model.saved_format import update_meta
            try:
                save(trace, self.process_dir)
                update_meta(self.process_dir, dict(self.process_meta,
                                                   ring=describe_ring(self.ring)))
            except OSError as exc:
                note_spill_problem(self, f"the flight recorder's trace could not be saved in "
                                         f"{self.process_dir!r} ({exc.strerror or exc})")
        return trace

    def abandon_in_forked_child(self):
        super().abandon_in_forked_child()
        self._saved_env = None        # the child keeps following: its environment stays



def continue_in_forked_child(session, flight_recorder):
    """In a child forked while following: a fresh session for this process with
    the parent's options (the inherited one was abandoned). Returns it started.
    flight_recorder: as FollowSession takes it."""
    if _run_over(session.job_dir):
        return None                 # the run is over: this child is not traced
    forget_startup_frames()         # its frames at the fork are the program's
    return _start_child_session(session.job_dir, session.follow_options, flight_recorder)


def _start_child_session(job_dir, options, flight_recorder):
    install_exit_paths(root=False)        # first: a SIGTERM now still exits as it would
    # (options: the parent's, checked and whole: its plan's, as its children are told)
    child = FollowSession(StartPlan(dict(options, output=job_dir, follow_children=True)),
                          root=False, forked=True, recorder=flight_recorder)
    _running.session = child
    try:
        child.start()
    except BaseException:
        _running.session = None
        raise
    return child


def armed_after_fork(flight_recorder):
    """A forkserver's fork: start tracing the new child (flight_recorder: as
    FollowSession takes it)."""
    try:
        armed = identity._armed
        if armed is None or _running.session is not None or _run_over(armed[0]):
            return
        _running.lock = threading.Lock()
        _start_child_session(armed[0], armed[1], flight_recorder)
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
    if identity._armed is None and not isinstance(_running.session, FollowSession):
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

