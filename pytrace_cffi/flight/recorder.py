"""The flight recorder: a FollowSession whose events stay in a ring (ring.py),
dumped while the program goes on.

A dump is one directory per process, DUMPS_DIR/<UTC time>-<reason>/proc-<pid>/,
written by a clone of the process (c_src/pt_flight.c: the program pays for the
clone only): the ring's events as events.bin, the names of the keys this
module's thread journals (keys.jsonl, written every JOURNAL_S and just before a
dump here; the ring has no spill hook: see follow/session.py),
process.json, threads.json, and dump.json (why, when, and each thread's Python
stack read from its frames at that moment: where it is, even once the ring has
lost the calls' beginnings). dumps.py reads it back.

Triggers, each dumping this process only:
- a request: `python -m pytrace_cffi dump DIR` writes DIR/.requests/<pid> for
  every process registered in DIR/.live/, naming their one dump directory; the
  C thread of pt_flight.c looks for this process's every 250 ms at most. No
  signal: a call of the program (a C sleep(), a wait) is never cut short, and a
  handler of the program's (Lightning's SIGUSR1) never runs for it;
- the dump signal (default SIGUSR1) and the watchdog (no step for N seconds),
  all three served by the C thread of pt_flight.c, which asks this module's thread
  first (a byte on a pipe) and dumps by itself, without names or stacks, when
  Python has not answered within GRACE_NS (a thread stuck in C holding the GIL);
- an uncaught exception: sys.excepthook's audit event (whatever hook the program
  installs; C audit hook of follow/exits.py) and threading.excepthook, before
  the program's hook runs;
- SIGTERM when the program has no handler of its own (follow/exits.py's), before
  the process dies of it as it would have: by the main thread's handler, or,
  when the main thread waits in C with the GIL released and cannot run it, by
  this module's thread (told by the C thread: exits.sigterm_off_main);
- pytrace_cffi.dump() from the program.
"""
import atexit
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time

from .. import _running
from .._core import ffi, lib
from .._hiding import hide_alone, hiding
from .._own_threads import own_thread_begin
from .._names import name_for_source, path_inputs, path_prefixes
from ..follow import exits
from ..follow.identity import _host, _read_json_file, process_facts
from ..options import DEFAULT_DUMP_WINDOW_S, STACKS_DUMP_FORMAT, watchdog_spec

REGISTRY = ".live"              # DUMPS_DIR/.live/<pid>.json: who can be asked
REQUESTS = ".requests"          # DUMPS_DIR/.requests/<pid>: `dump`'s ask (the dump's name)
REQUEST_FILE = ".request.json"  # `dump DIR`'s: the dump directory's name
REQUEST_FRESH_S = 30
GRACE_NS = 1_000_000_000        # Python's time to answer the C thread
JOURNAL_S = 0.25                # how often the recorder's thread names what is new
JOURNAL_FILE = "journal.json"   # (C copies it into a dump: pt_flight.c)
DUMP_FILE = "dump.json"
DONE_FILE = "done.json"         # a dump's last file
THREAD_NAME = "pytrace_cffi: flight"
FORMAT_THREAD_NAME = THREAD_NAME + ": dump format"    # (our threads' names start so)
FORMAT_WAIT_S = 120             # for a dump's clone, then for its formatted trace


def dump_dir_name(reason, when=None):
    """<UTC yyyymmdd-hhmmss>-<reason as a word>: a dump's directory name."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(when))
    word = re.sub(r"[^a-z0-9]+", "-", reason.lower()).strip("-")[:40] or "dump"
    return f"{stamp}-{word}"


class FlightRecorder:
    """The dumps of one session (a ring FollowSession): opened before its hooks go
    live, closed at its stop."""

    def __init__(self, session, dumps_dir, signum, watchdog, dump_format=None,
                 dump_window=None):
        self.session = session
        self.dumps_dir = os.path.abspath(dumps_dir)
        # "stacks": the raw dumps keep the stacks and the ring's last window_s only
        self.window_s = None
        if dump_format == STACKS_DUMP_FORMAT:
            self.window_s = dump_window or DEFAULT_DUMP_WINDOW_S
            dump_format = None
        self.dump_format = dump_format      # also written as one trace: formatted.py
        self.signum = signum
        self.watchdog_s, region = watchdog_spec(watchdog) if watchdog else (None, None)
        if region is not None:      # (set before start: the tracer keeps it)
            lib.pt_set_progress_region(session.ptr, ffi.cast("void *", id(region)))
        self.region = region
        self._torch_region_exit = None      # (class, its __exit__, ours) while wrapped
        self.dumps = []             # the directories this process dumped into
        self._lock = threading.RLock()
        self._thread = None
        self._closing = False
        self._previous_thread_hook = None
        self._registered = None
        self._registry_fd = None
        self._registry_id = None
        self._torch_hook = None
        self._serving = threading.Event()   # set once its thread is left out of traces
        self._journaled = None
        self._sigterm_dumped = False
        self._request_file = None
        self._signal_taken_said = False
        # dump_format's: (process dump, place) to write, for a thread of its own
        self._to_format = []
        self._formatting = threading.Condition()
        self._formatter = None
        self._unannounced = []      # (clone pid, path, reason): dumps still being written
        self._announcing = threading.Lock()
        self._pid = os.getpid()     # (a forked child's copy announces nothing)
        self._requests_served = set()       # (name, time) of `dump DIR` requests taken

    # -- life ----------------------------------------------------------------
    def open(self):
        os.makedirs(os.path.join(self.dumps_dir, REGISTRY), exist_ok=True)
        os.makedirs(os.path.join(self.dumps_dir, REQUESTS), exist_ok=True)
        if self.signum and signal.getsignal(self.signum) not in (signal.SIG_DFL, None):
            # the program's own handler stays: this process dumps by the other triggers
            _say(f"the dump signal {signal.Signals(self.signum).name} has a handler of the "
                 "program's: not used for dumps here (--dump-signal picks another; "
                 "`python -m pytrace_cffi dump` asks without a signal)")
            self.signum = 0
        self._thread = threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True)
        self._thread.start()
        self._serving.wait()
        if self.dump_format:        # (started now: once tracing, its start would be traced)
            started = threading.Event()
            self._formatter = threading.Thread(target=self._format_dumps, args=(started,),
                                               name=FORMAT_THREAD_NAME, daemon=True)
            self._formatter.start()
            started.wait()
        self._journal()             # the threads' names at once: a hang may come first
        self._watch_torch_steps()   # (torch imported before start: its steps count at once)
        facts = process_facts()
        c_dump = json.dumps({"version": 1, "reason": "hang: Python did not answer within "
                             f"{GRACE_NS / 1e9:g} s (0.5 s for SIGTERM): a thread stuck in C "
                             "holding the GIL?",
                             "written_by": "C", "pid": os.getpid(), "host": _host(),
                             **_labels(facts), "threads": None})
        self._set_dump_options()
        self._request_file = os.path.join(self.dumps_dir, REQUESTS, str(os.getpid()))
        if lib.pt_flight_watch_requests(os.fsencode(self._request_file)) != lib.PT_OK:
            self._request_file = None
        status = lib.pt_flight_arm(self.session.ptr, self.signum,
                                   int((self.watchdog_s or 0) * 1e9), GRACE_NS,
                                   os.fsencode(self.dumps_dir),
                                   os.fsencode(self.session.process_dir), c_dump.encode())
        if status != lib.PT_OK:
            self.close()
            raise ValueError(f"the flight recorder cannot start (status {status}): another "
                             "session of this process has one, or a path is too long")
        self._registered = os.path.join(self.dumps_dir, REGISTRY, f"{os.getpid()}.json")
        with open(self._registered, "w", encoding="utf-8") as f:
            # requests: asked by DUMPS_DIR/.requests/<pid> (`dump` signals none)
            json.dump({"pid": os.getpid(), "signal": self.signum, "host": _host(),
                       "requests": self._request_file is not None, **_labels(facts)}, f)
        # held open while recording: `dump PID` finds the dumps directory through
        # /proc/PID/fd (non-inheritable: not a child's)
        self._registry_fd = os.open(self._registered, os.O_RDONLY | os.O_CLOEXEC)
        self._registry_id = _file_id(self._registry_fd)
        exits.install_uncaught_hook()
        # (== not is: each self._thread_exception is a new bound method object)
        if threading.excepthook != self._thread_exception:
            self._previous_thread_hook = threading.excepthook
            threading.excepthook = self._thread_exception
        exits.handle_sigterm()          # (again when following: its last words name the dump)
        # SIGTERM's relay (when ours) tells the C thread too: served off the main
        # thread when that waits in C (exits.sigterm_off_main)
        lib.pt_flight_watch_sigterm(1)
        # (before the daemon threads writing them stop; announce: a dump's outcome)
        atexit.register(self.finish_formatting)

    def _set_dump_options(self):
        """How the clones write the ring (pt_flight_files.c): events.bin compressed,
        and only the last window_s of it with dump_format "stacks"."""
        from .. import _clock
        window_ticks = 0
        if self.window_s:
            ns_per_tick = _clock.ns_per_tick() if _clock.USE_TSC else 1.0
            window_ticks = max(1, int(self.window_s * 1e9 / ns_per_tick))
        if lib.pt_flight_set_dump_options(1, window_ticks) != lib.PT_OK:
            lib.pt_flight_set_dump_options(0, window_ticks)
            _say("no memory for compressing the flight recorder's dumps: they are written "
                 "uncompressed")

    def close(self):
        """At stop: the threads end, the hooks go, a dump asked for and not yet
        served is written now, the dumps under way finish (5 s)."""
        if self._closing:
            return
        if self._registered:        # first: `dump DIR` no longer signals this process
            try:
                os.unlink(self._registered)
            except OSError:
                pass
        if self._registry_fd is not None:       # (nor `dump PID` finds it)
            if _file_id(self._registry_fd) == self._registry_id:
                os.close(self._registry_fd)     # (else the program closed it: its number
            self._registry_fd = None            # may be a file of the program's now)
        self._closing = True
        lib.pt_flight_disarm()
        if self._thread is not None:
            lib.pt_flight_wake_python()
            if self._thread is not threading.current_thread():
                self._thread.join(5)
            self._thread = None
        if threading.excepthook == self._thread_exception:
            threading.excepthook = self._previous_thread_hook
        if self._torch_hook is not None:
            with contextlib.suppress(Exception):
                self._torch_hook.remove()
        if self._torch_region_exit is not None:
            cls, original, ours = self._torch_region_exit
            if cls.__dict__.get("__exit__") is ours:
                cls.__exit__ = original
        unserved = lib.pt_flight_unserved()
        if unserved and unserved != lib.PT_FLIGHT_SIGTERM:     # (its handler has it)
            # (the ring is whole still: stop() comes after)
            self._serve_request(lib.pt_flight_request(), unserved)
        self.announce(wait_s=5)
        atexit.unregister(self.finish_formatting)
        if self._formatter is not None and self._formatter.is_alive():
            self.finish_formatting()
            with self._formatting:
                self._to_format.append(None)        # its end
                self._formatting.notify_all()

    # -- triggers ------------------------------------------------------------
    def on_sigterm(self):
        """SIGTERM (follow/exits.py's handler): one dump, however many come."""
        if not self._sigterm_dumped:
            self._sigterm_dumped = True
            self.dump("SIGTERM")
            self.finish_formatting()    # before the process dies of it

    def on_uncaught(self, exc_type, exc_value=None, exc_traceback=None):
        """sys.excepthook's audit event: dumps before the program's hook runs."""
        self.dump(f"exception {getattr(exc_type, '__name__', exc_type)}",
                  exception=(exc_type, exc_value, exc_traceback))

    def _thread_exception(self, args):
        try:
            self.dump(f"exception {args.exc_type.__name__} in thread "
                      f"{getattr(args.thread, 'name', '?')}",
                      exception=(args.exc_type, args.exc_value, args.exc_traceback))
        finally:
            (self._previous_thread_hook or threading.__excepthook__)(args)

    def _serve(self):
        """The thread that answers the C thread's requests (signal, watchdog)."""
        own_thread_begin()
        self._serving.set()
        try:
            while not self._closing:
                # (no descriptor: a program closing every one, a daemon, cannot take it)
                lib.pt_flight_wait_python(int(JOURNAL_S * 1e9))
                if self._closing:
                    return
                with self._lock:        # (a dump() of the program's journals too)
                    self._journal()
                self._watch_torch_steps()
                self._check_signal()
                self.announce()
                seq = lib.pt_flight_request()
                if seq and lib.pt_flight_claim(seq):
                    # (served even when stop() began meanwhile: claimed is ours)
                    self._serve_request(seq, lib.pt_flight_reason(seq))
        except Exception as exc:            # noqa: BLE001 - the program goes on
            _say(f"the flight recorder's thread stopped: {exc}")
        finally:
            lib.pt_own_thread_end()

    def _serve_request(self, seq, reason):
        """The dump the C thread asked for (request number seq, PT_FLIGHT_*)."""
        if reason == lib.PT_FLIGHT_WATCHDOG:
            self._dump_now(f"watchdog: no step for {self.watchdog_s:g} s", requested=True)
        elif reason == lib.PT_FLIGHT_SIGTERM:
            exits.sigterm_off_main(self)
        elif reason == lib.PT_FLIGHT_REQUEST:
            name = ffi.string(lib.pt_flight_request_name(seq)).decode("ascii", "replace")
            self._dump_now("request", requested=True, name=name or None)
        else:
            self._dump_now("signal", requested=True)

    def _check_signal(self):
        """Says once when the program took the dump signal over (its own handler,
        installed after start: Lightning's SIGUSR1 on SLURM): the signal dumps no
        more here; `dump` still does (it asks by a file)."""
        # _closing is read after the C call: close() sets it before it disarms
        # (which gives the signal back), so a disarm seen here is never taken for
        # the program's handler.
        if (self.signum and not self._signal_taken_said
                and not lib.pt_flight_signal_ours() and not self._closing):
            self._signal_taken_said = True
            _say(f"the program installed its own handler of the dump signal "
                 f"{signal.Signals(self.signum).name}: it no longer dumps here "
                 "(`python -m pytrace_cffi dump` still does: it sends no signal)")

    def _journal(self):
        """Names what was first seen since the last time (keys.jsonl; the threads'
        names and the path prefixes in journal.json): a dump that C writes,
        Python being unable to run, names what was seen until JOURNAL_S before."""
        names = self.session._key_names
        if lib.pt_start_ns(self.session.ptr):   # (its first line holds the clock's start)
            with names.lock:
                with contextlib.suppress(OSError):
                    names._write_new()
        threads = {str(t.ident): t.name for t in threading.enumerate()
                   if t.ident is not None and not t.name.startswith(THREAD_NAME)}
        task_lanes = self.session._task_lanes     # (log_async)
        lanes = ({str(native_id): name for native_id, name in task_lanes.thread_names().items()}
                 if task_lanes is not None else {})
        inputs = path_inputs() if self.session.trim_paths else None
        if (threads, lanes, inputs) != self._journaled:
            self._journaled = (threads, lanes, inputs)
            # what C's dump needs to name what the journal has not: threads, task
            # lanes (by their OS id stand-in), and how this process trims the
            # paths of key_sources.tsv
            prefixes = path_prefixes(inputs) if inputs else ()
            path = os.path.join(self.session.process_dir, JOURNAL_FILE)
            with contextlib.suppress(OSError):
                with open(path + ".tmp", "w", encoding="utf-8") as f:
                    json.dump({"threads": threads, "lanes": lanes,
                               "path_prefixes": list(prefixes)}, f)
                os.replace(path + ".tmp", path)

    def _watch_torch_steps(self):
        """torch's optimizer steps count as steps for the watchdog, once torch.optim
        is imported (never imported here); so do the ends of torch's record_function
        regions named as the watchdog's region."""
        if not self.watchdog_s:
            return
        with self._lock:            # (open() and the recorder's thread both look)
            self._watch_torch_hooks()

    def _watch_torch_hooks(self):
        if self._torch_hook is None:
            optimizer = sys.modules.get("torch.optim.optimizer")
            register = getattr(optimizer, "register_optimizer_step_post_hook", None)
            if register is not None:
                self._torch_hook = register(lambda *args: lib.pt_flight_step())
        if self.region is not None and self._torch_region_exit is None:
            self._watch_torch_regions()

    def _watch_torch_regions(self):
        """torch.autograd.profiler.record_function has no hook of its own: its
        __exit__ is wrapped until close (a wrapper traces leave out alone), and an
        end of the region the watchdog names is progress (pt_flight_progress_cell:
        C's thread sees it within a quarter of the watchdog's time)."""
        profiler = sys.modules.get("torch.autograd.profiler")
        cls = getattr(profiler, "record_function", None)
        original = cls.__dict__.get("__exit__") if isinstance(cls, type) else None
        if original is None:
            return
        region = self.region
        progress = ffi.cast("int64_t *", lib.pt_flight_progress_cell())

        def __exit__(self, *exc_info):
            # no call of its own here (a call would show in the trace): a counter
            # C's thread reads, bumped by a store
            try:
                return original(self, *exc_info)
            finally:
                try:
                    name = self.name
                except AttributeError:
                    name = None
                if name == region:
                    progress[0] += 1

        hide_alone(__exit__.__code__)
        cls.__exit__ = __exit__
        self._torch_region_exit = (cls, original, __exit__)

    # -- the dump --------------------------------------------------------------
    def dump(self, reason, path=None, requested=False, exception=None):
        """Writes this process's dump (see the module's docstring); returns its
        directory (the clone may still be writing: done.json ends it). Never
        raises: a failure is said on stderr and None returned. exception: the
        (type, value, traceback) the calling thread is dying of."""
        if self._closing or _running.session is not self.session:
            return None         # (a forked child's copy of its parent's recorder)
        return self._dump_now(reason, path, requested, exception)

    def _dump_now(self, reason, path=None, requested=False, exception=None, name=None):
        try:
            with self._lock:
                return self._dump(reason, path, requested, exception, name)
        except Exception as exc:            # noqa: BLE001 - the program goes on
            _say(f"the flight recorder could not dump ({exc.__class__.__name__}: {exc})")
            return None

    def _new_dump_dir(self, name):
        """DUMPS_DIR/name/proc-<pid>, made; name-2, name-3... when this process
        dumped into name already (two dumps within a second)."""
        own = f"proc-{os.getpid()}"
        for attempt in range(1, 1000):
            path = os.path.join(self.dumps_dir, name if attempt == 1 else f"{name}-{attempt}",
                                own)
            try:
                os.makedirs(path)
                return path
            except FileExistsError:
                continue
        raise OSError(f"no new dump directory for {name} in {self.dumps_dir}")

    def _dump(self, reason, path, requested, exception=None, name=None):
        when = time.time_ns()
        monotonic = time.monotonic_ns()
        frames, frames_ticks = _current_frames(self.session)
        stacks = _stacks(self.session.trim_paths, frames)
        raised = None
        if exception is not None:       # its frames are gone: its traceback has them
            raised = _raised(exception, self.session.trim_paths, stacks)
        names = self.session._key_names
        with names.lock:
            names._write_new()          # every key seen so far named in keys.jsonl
        self._journal()                 # every thread and task lane seen so far named
        default_place = path is None
        if default_place:
            asked = requested and self._request_name()      # (taken once, either way)
            name = name or asked or dump_dir_name(reason, when / 1e9)
            path = self._new_dump_dir(name)
        else:
            os.makedirs(path, exist_ok=True)
        facts = process_facts()
        collectives = _collectives(self.session)
        text = json.dumps({"version": 1, "reason": reason, "written_by": "Python",
                           "pid": os.getpid(), "host": _host(), **_labels(facts),
                           "realtime_ns": when, "monotonic_ns": monotonic,
                           "frames_ticks": frames_ticks, "threads": stacks,
                           **({"exception": raised} if raised else {}),
                           **({"collectives": collectives} if collectives else {})})
        pid = lib.pt_flight_dump(self.session.ptr, os.fsencode(path),
                                 os.fsencode(self.session.process_dir), text.encode(),
                                 frames_ticks or 0)
        if pid <= 0:
            raise OSError(-pid if pid < 0 else 0, "no process could be cloned to write it")
        self.dumps.append(path)
        # said once the clone has ended (announce): it may fail (a full disk)
        with self._announcing:
            self._unannounced.append((pid, path, reason))
        if self._formatter is not None:
            with self._formatting:
                self._to_format.append((path, os.path.dirname(path) if default_place
                                        else path))
                self._formatting.notify_all()
        return path

    def _request_name(self):
        """The name `dump DIR`'s request file gives, once per request: a request
        that could not be rewritten (a full disk) is not the next one's."""
        request = _requested_name(self.dumps_dir)
        if request is None or request in self._requests_served:
            return None
        self._requests_served.add(request)
        return request[0]

    # -- the dump as one trace (formatted.py) ---------------------------------
    def _format_dumps(self, started):
        """The thread writing the dumps in dump_format, in turn (never traced)."""
        own_thread_begin()
        started.set()
        try:
            while True:
                with self._formatting:
                    while not self._to_format:
                        self._formatting.wait()
                    item = self._to_format[0]
                if item is None:
                    return
                self._format(*item)
                with self._formatting:
                    self._to_format.pop(0)
                    self._formatting.notify_all()
        finally:
            lib.pt_own_thread_end()

    def _format(self, process_dump, place):
        """Once the clone wrote process_dump whole, the dump's place written in
        dump_format (never raises)."""
        try:
            from .formatted import format_dump
            if not _whole(process_dump, FORMAT_WAIT_S):
                _say(f"the dump {process_dump} is not whole (its clone ended early or is "
                     f"slow): not written as {self.dump_format}; its raw files are read as "
                     "far as they go")
                return
            _say(f"flight recorder dump -> {format_dump(place, self.dump_format)}")
        except Exception as exc:            # noqa: BLE001 - the program goes on
            _say(f"the dump in {place} could not be written as {self.dump_format} "
                 f"({exc.__class__.__name__}: {exc}); its raw files are whole")

    def announce(self, wait_s=0):
        """Says how each dump whose clone has ended (waiting up to wait_s for
        them) went: written, or failed and what it kept. Never raises."""
        if os.getpid() != self._pid or not self._unannounced:
            return
        if wait_s:
            lib.pt_flight_wait(int(wait_s * 1e9))
        with self._announcing:
            ended = [(lib.pt_flight_status(pid), pid, path, reason)
                     for pid, path, reason in self._unannounced]
            ended = [e for e in ended if e[0] != -1 or wait_s]
            self._unannounced = [u for u in self._unannounced
                                 if u[0] not in {pid for _, pid, _, _ in ended}]
        for code, _, path, reason in ended:
            if code == -2:              # (its end not known here: done.json says)
                code = 0 if os.path.exists(os.path.join(path, DONE_FILE)) else -4
            with contextlib.suppress(Exception):    # (a closed stderr)
                if code == 0:
                    _say(f"flight recorder dump ({reason}) -> {path}")
                elif code == -1:
                    _say(f"flight recorder dump ({reason}) -> {path} (still being "
                         f"written as this process goes: whole once {DONE_FILE} is there)")
                else:
                    _say(f"flight recorder dump ({reason}) into {path} failed "
                         f"({_failure(code)}): {_kept(path)}")

    def finish_formatting(self, timeout=FORMAT_WAIT_S):
        """Waits (up to timeout) for the dumps still to be written in dump_format:
        at close, at exit, before SIGTERM ends the process; says how the dumps
        went first (announce)."""
        self.announce(wait_s=min(timeout, 5))
        # (not alive in a forked child: its lock may have been held at the fork)
        if (self._formatter is None or not self._formatter.is_alive()
                or threading.current_thread() is self._formatter):
            return
        deadline = time.monotonic() + timeout
        with self._formatting:
            while (self._to_format and self._formatter.is_alive()
                   and time.monotonic() < deadline):
                self._formatting.wait(max(0.0, deadline - time.monotonic()))


def _whole(process_dump, seconds):
    """Whether the clone writing process_dump finished it (done.json) within
    seconds; False at once when no clone runs and it is not whole."""
    deadline = time.monotonic() + seconds
    done = os.path.join(process_dump, DONE_FILE)
    while not os.path.exists(done):
        if time.monotonic() > deadline:
            return False
        if lib.pt_flight_wait(50_000_000) == 0:    # every clone ended
            return os.path.exists(done)
    return True


def _failure(code):
    if code == -3:
        return "its writer was killed"
    return os.strerror(code) if code > 0 else f"no {DONE_FILE}"


def _kept(path):
    """What a failed dump's directory holds, in words (the stacks are written
    first, the ring last: pt_flight.c)."""
    try:
        with open(os.path.join(path, DUMP_FILE), encoding="utf-8") as f:
            json.load(f)
        stacks = True
    except (OSError, ValueError):
        stacks = False
    if not stacks:
        return "nothing of it was kept"
    # (a ring cut short is emptied by the clone: it would show wrong open calls)
    return "its threads' stacks (dump.json) were kept, not the ring's events (events.bin)"


def _collectives(session):
    """dump.json's "collectives" (torch.distributed's, when the program uses it)."""
    if "torch.distributed" not in sys.modules:
        return None
    from .._collectives import dump_field
    try:                    # (never the dump's failure)
        field = dump_field(None if session.watcher is None else session.watcher.collectives)
        json.dumps(field)
        return field
    except Exception as exc:            # noqa: BLE001
        return {"problems": [f"collectives: {exc.__class__.__name__}: {exc}"[:200]]}


def _labels(facts):
    return {"label": facts.get("label"), "rank": facts.get("rank"),
            "worker_id": facts.get("worker_id")}


def _raised(exception, trim_paths, stacks):
    """dump.json's "exception" of the (type, value, traceback) the calling thread
    dies of: its type, message and native_id; that thread's stack in stacks
    becomes the traceback's frames, each with the line it was at (the frames
    themselves are gone by the time a hook sees the exception)."""
    exc_type, value, tb = exception
    prefixes = path_prefixes() if trim_paths else ()
    frames = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if not hiding(code):
            frames.append({"name": name_for_source(code, prefixes), "since_ns": None,
                           "line": tb.tb_lineno, "raised": True})
        tb = tb.tb_next
    native_id = threading.get_native_id()
    for thread in stacks:
        if thread["native_id"] == native_id:
            thread["stack"] = frames
    try:
        message = str(value)
    except Exception:               # noqa: BLE001 - the exception's own __str__ failed
        message = "<unprintable>"
    return {"type": getattr(exc_type, "__qualname__", str(exc_type)),
            "message": message[:2000], "native_id": native_id}


def _current_frames(session):
    """(sys._current_frames(), the event clock's ticks then), in one hold of the
    GIL (pt_flight_frames): the clone's stacks.tsv holds the calls open at those
    ticks, whatever the threads do meanwhile. (frames, None) when that fails."""
    out = []
    ticks = ffi.new("int64_t *")
    if lib.pt_flight_frames(session.ptr, ffi.cast("void *", id(sys._current_frames)),
                            ffi.cast("void *", id(out)), ticks) == lib.PT_OK and out:
        return out[0], ticks[0]
    return sys._current_frames(), None


def _stacks(trim_paths, current_frames):
    """Each Python thread's stack, outermost first, from current_frames (of
    sys._current_frames): its frames' functions, named as the trace names them,
    with the line each frame is on; the recorder's own thread left out. (A frame
    goes on running after the snapshot; its f_back does not change, its line may
    have moved on.)"""
    prefixes = path_prefixes() if trim_paths else ()
    threads = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in current_frames.items():
        thread = threads.get(ident)
        if thread is not None and thread.name.startswith(THREAD_NAME):
            continue
        frames = []
        while frame is not None:
            frames.append((frame.f_code, frame.f_lineno))
            frame = frame.f_back
        frames.reverse()
        # as the trace leaves them out: ours (the dump's own frames, `run`'s) and
        # the launcher's. name: the function's key (its first line, as the trace
        # names it, matched with the ring's calls); line: the line it is on
        stack = [{"name": name_for_source(code, prefixes), "since_ns": None, "line": line}
                 for code, line in frames if not hiding(code)]
        out.append({"native_id": getattr(thread, "native_id", None), "ident": ident,
                    "name": getattr(thread, "name", f"thread {ident}"), "stack": stack})
    return out


def _requested_name(dumps_dir):
    """(name, time) of the dump directory `dump DIR` asked for, when its request
    is fresh; else None."""
    from ..errors import TraceFormatError
    try:        # (a FIFO or a link there must not hold up or misdirect the dump)
        request = _read_json_file(os.path.join(dumps_dir, REQUEST_FILE))
        if time.time() - request["time"] < REQUEST_FRESH_S and re.fullmatch(
                r"[0-9A-Za-z.-]+", request["name"]):
            return request["name"], request["time"]
    except (OSError, TraceFormatError, ValueError, KeyError, TypeError, OverflowError):
        pass
    return None


say_to = None       # a callable that takes each line instead of stderr (_attached.py:
                    # an attached process's stderr is the program's alone)


def _file_id(fd):
    """(device, inode) of the file open as fd, or None (closed)."""
    try:
        facts = os.fstat(fd)
    except OSError:
        return None
    return facts.st_dev, facts.st_ino


def _say(text):
    line = f"pytrace_cffi: pid {os.getpid()}: {text}"
    if say_to is not None:
        say_to(line)
    else:
        print(line, file=sys.stderr)

