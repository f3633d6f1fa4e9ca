"""Where each process of a job is stuck, from the flight recorder's dumps:
`python -m pytrace_cffi report DUMPDIR...`.

A dump of one process is a directory proc-<pid>/ (a saved trace) with a
dump.json beside its files: why and when it was written, which process it is
(pid, label, rank), and per thread the open stack, outermost first, each frame
with the monotonic ns its call began (null when it began before the ring's
oldest event). A job's dump request makes one DUMPDIR holding a proc-<pid>/ per
process; DUMPDIRs gather under <job or trace dir>/dumps/.

The report groups the processes by the stack of their main thread (the whole
stack, or its innermost `frames` frames), compared by the frames' names and
current lines, and names the groups with the fewest members first: the odd ones out of a job whose
ranks all wait in the same collective. Each frame shows how long it has been
open: the dump's monotonic time less the frame's since_ns, and a Python
frame its current line, file:line (dump.json's "line"; the name's own line is
the function's first). With threads=True
the other threads that are not idle follow, grouped the same way by thread name
and stack. A thread is idle when it has no frame, or its innermost frame is one
of the waiting functions below (a sleep, a lock or condition wait, a queue get,
a select or poll): pools and watchers spend their lives there.

dump.json's stacks are completed from the dump's ring where it can be read
(flight/dumps.py: since when each call runs, the built-ins frames do not show,
the stacks of a dump C wrote); else dump.json alone is read, so the report works
on a dump whose ring cannot be read.
"""
import json
import os
import re
import reprlib
import time
from collections import Counter, namedtuple

from .errors import TraceFormatError
from ._progress import ranges
from .flight.places import holders, looked_in
from ._safe_read import read_bounded

DUMP_FILE = "dump.json"
DUMP_VERSION = 1
MAX_DUMP_BYTES = 64 << 20         # a stack per thread: a file beyond this is not a dump
BEFORE_WINDOW = "since before the recorded window"
NOT_SEEN = "start not in the ring"      # a frame inside one whose start the ring has
NAMED_MEMBERS = 8                 # members named in a group's text line beyond its ranks

# Built-ins a thread waits in, named as traces name them.
IDLE_BUILTINS = frozenset({
    "time.sleep", "_thread.lock.acquire", "_thread.RLock.acquire",
    "_thread.RLock._acquire_restore", "_queue.SimpleQueue.get", "select.select",
    "select.poll.poll", "select.epoll.poll", "select.kqueue.control", "posix.read",
    "posix.waitpid", "posix.waitid", "_socket.socket.accept", "_socket.socket.recv",
    "_socket.socket.recv_into", "_multiprocessing.SemLock.acquire",
})
# Python functions a thread waits in, by (file name, function): their built-in
# callee is not in a stack traced with --no-c-calls.
IDLE_FUNCTIONS = frozenset({
    ("threading.py", "wait"), ("threading.py", "join"),
    ("threading.py", "_wait_for_tstate_lock"), ("queue.py", "get"),
    ("selectors.py", "select"), ("connection.py", "wait"), ("connection.py", "_poll"),
    ("connection.py", "poll"), ("connection.py", "recv"), ("connection.py", "_recv"),
    ("connection.py", "recv_bytes"), ("connection.py", "_recv_bytes"),
    ("synchronize.py", "wait"),
})
PYTHON_NAME = re.compile(r"^(?P<path>.*)\((?P<line>\d+)\): (?P<function>.+)$", re.S)

Frame = namedtuple("Frame", "name since_ns line start_seen line_not_known",
                   defaults=(None, True, None))
Frame.__doc__ = """A frame: its function's name (as traces name it), the monotonic ns
its call began (or None), the line it is on (None when not known), False in
start_seen when its start is not in the ring although the ring reaches back to
it (flight/dumps.py: the frames and the ring disagree): not before the window;
line_not_known why a Python frame of a dump C wrote has no line (or None)."""
ThreadStack = namedtuple("ThreadStack", "native_id name frames ring_only", defaults=((),))
ThreadStack.__doc__ = """A thread: ring_only the Python calls its ring holds open that
its frames, read at the same instant, do not show (left out of frames)."""
ProcessDump = namedtuple("ProcessDump", "directory pid label rank worker_id host reason "
                                        "realtime_ns monotonic_ns threads exception "
                                        "collectives", defaults=(None, None))
ProcessDump.__doc__ = """One process's dump.json: threads are ThreadStacks, each frame
a Frame (outermost first); rank and worker_id None when the process has none;
exception the Raised a thread of it died of (its stack: the traceback), or None;
collectives dump.json's "collectives" as it is (flight/collectives.py reads it)."""
Raised = namedtuple("Raised", "type message native_id")
Dump = namedtuple("Dump", "directory processes problems")
Dump.__doc__ = """A DUMPDIR: its ProcessDumps (by rank, then label, then pid) and the
(path, what is wrong) of each proc-* directory that could not be read."""
Member = namedtuple("Member", "process thread seconds")
Member.__doc__ = """A thread of a process in a group: seconds its innermost frame has
been open, None when its call began before the recorded window or there is none."""
Group = namedtuple("Group", "frames members lines not_known", defaults=((), ()))
Group.__doc__ = """Threads with the same stack: frames are the names compared
(outermost first), lines their current lines (None where not known), members
the Members, in process order; not_known why a frame's line is not known (None
where it is, or nothing is said)."""


# -- finding and reading dumps ---------------------------------------------------

def _is_process_dump(path):
    return os.path.isfile(os.path.join(path, DUMP_FILE))


def _process_dirs(path, links=False):
    """path's proc-*/ directories; with links, also its proc-* symbolic links (listed
    to be refused in words: one may lead out of the directory)."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return []
    found = [os.path.join(path, name) for name in names if name.startswith("proc-")]
    return [p for p in found if (links and os.path.islink(p))
            or (os.path.isdir(p) and not os.path.islink(p))]


def is_dump_directory(path):
    """Whether path is a DUMPDIR: a proc-*/ inside holds a dump.json."""
    return any(_is_process_dump(directory) for directory in _process_dirs(path))


def dump_directories(path, every=False):
    """The DUMPDIRs path names: itself (a DUMPDIR, or one process's dump), else
    the DUMPDIRs in every place its dumps may be (flight/places.py: inside it,
    its dumps/, the dumps directory beside it, OUT-dumps/ for `run -o OUT`, and
    where a job directory's processes say they dump), the newest only unless
    every, oldest first. TraceFormatError, saying where it looked, when none."""
    if _is_process_dump(path) or is_dump_directory(path):
        return [path]
    found = [os.path.join(holder, name) for holder in holders(path)
             for name in sorted(os.listdir(holder))
             if not os.path.islink(os.path.join(holder, name))
             and is_dump_directory(os.path.join(holder, name))]
    if not found:
        raise _no_dump(path)
    found.sort(key=_dumped_at)
    return found if every else found[-1:]


def _no_dump(path):
    return TraceFormatError(f"{path}: holds no dump (no proc-*/{DUMP_FILE} in a directory "
                            f"of: {looked_in(path)})")


def _dumped_at(directory, single=False):
    """When a DUMPDIR (single: one process's dump) was written, for choosing the
    newest: its processes' latest realtime_ns, else its modification time; then
    its name."""
    latest = None
    for process_dir in [directory] if single else _process_dirs(directory):
        try:
            data = json.loads(read_bounded(os.path.join(process_dir, DUMP_FILE),
                                           MAX_DUMP_BYTES))
        except (OSError, ValueError, RecursionError, TraceFormatError):
            continue
        stamp = data.get("realtime_ns") if isinstance(data, dict) else None
        if type(stamp) is int:
            latest = stamp if latest is None else max(latest, stamp)
    if latest is None:
        latest = int(os.stat(directory).st_mtime * 1e9)
    return latest, directory


def newest_per_process(path):
    """(where the dumps are: path, or the one place holding them, each process's
    newest dump): a job's processes dump at their own times (each its watchdog,
    its SIGTERM), and the picture of the job is every process's latest, found in
    every place its dumps may be (see dump_directories). TraceFormatError when
    path holds no dump."""
    newest, places = {}, set()
    for holder in holders(path):
        for name in os.listdir(holder):
            if os.path.islink(os.path.join(holder, name)):
                continue            # (may lead out of the directory)
            for process_dir in _process_dirs(os.path.join(holder, name)):
                if _is_process_dump(process_dir):
                    places.add(holder)
                    when = _dumped_at(process_dir, single=True)
                    pid = os.path.basename(process_dir)
                    if pid not in newest or newest[pid][0] < when:
                        newest[pid] = (when, process_dir)
    if not newest:
        raise _no_dump(path)
    return (places.pop() if len(places) == 1 else path,
            sorted(process_dir for _, process_dir in newest.values()))


def read_dump(directory, process_dirs=None):
    """The Dump of a DUMPDIR (or of one process's dump directory, or of
    process_dirs, the dumps newest_per_process chose in directory)."""
    if process_dirs is not None:
        pass
    elif _is_process_dump(directory):
        process_dirs = [directory]
    else:
        process_dirs = _process_dirs(directory, links=True)
    processes, problems = [], []
    for process_dir in process_dirs:
        try:
            processes.append(read_process_dump(process_dir))
        except FileNotFoundError:
            problems.append((process_dir, f"no {DUMP_FILE} (the process wrote no dump)"))
        except TraceFormatError as exc:
            problems.append((process_dir, str(exc)))
    processes.sort(key=_process_order)
    return Dump(directory, _on_one_clock(processes), problems)


ONE_MOMENT_NS = 5_000_000_000       # dumps of one request are this close at most


def _on_one_clock(processes):
    """The processes of one host in one dump (one request: each process's
    recorder takes it within 250 ms) dumped within ONE_MOMENT_NS of each other
    measured against the latest of their dumps, so that "for N s" compares across
    them: a call begun earlier has run longer, whichever process dumped first.
    Each process's newest of a directory of dumps (another trigger, another
    moment: a worker's SIGTERM after a request) keeps its own moment."""
    def moment(process):
        return process.host, os.path.dirname(os.path.abspath(process.directory))
    latest = {}
    for process in processes:
        key = moment(process)
        latest[key] = max(latest.get(key, process.monotonic_ns), process.monotonic_ns)
    return [process._replace(monotonic_ns=latest[moment(process)])
            if 0 < latest[moment(process)] - process.monotonic_ns <= ONE_MOMENT_NS
            else process for process in processes]


def _process_order(process):
    return (process.rank is None, process.rank or 0, process.label, process.pid)


def read_process_dump(directory):
    """A ProcessDump from directory/dump.json; TraceFormatError when it is not one
    (FileNotFoundError when it is missing)."""
    path = os.path.join(directory, DUMP_FILE)
    if os.path.islink(directory):
        raise TraceFormatError(f"{directory}: a symbolic link, not followed (it may lead "
                               "out of the dump's directory)")
    data = _completed(directory)
    if data is None:
        try:
            data = json.loads(read_bounded(path, MAX_DUMP_BYTES))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise TraceFormatError(f"{path}: not JSON ({exc})") from None
    if isinstance(data, dict) and data.get("threads") is None:
        data["threads"] = []            # (C's dump, its ring unreadable)
    if not isinstance(data, dict):
        raise TraceFormatError(f"{path}: not a dump (a JSON object is expected)")
    if data.get("version") != DUMP_VERSION:
        raise TraceFormatError(f"{path}: dump version {data.get('version')!r}, this "
                               f"pytrace_cffi reads version {DUMP_VERSION}")
    pid = _field(data, "pid", int, path)
    threads = _field(data, "threads", list, path)
    rank = _field(data, "rank", int, path, optional=True)
    label = _field(data, "label", str, path, optional=True)
    return ProcessDump(
        directory=directory, pid=pid,
        label=label if label is not None else f"pid {pid}", rank=rank,
        worker_id=_field(data, "worker_id", int, path, optional=True),
        host=_field(data, "host", str, path, optional=True),
        reason=_field(data, "reason", str, path, optional=True) or "?",
        realtime_ns=_field(data, "realtime_ns", int, path, optional=True),
        monotonic_ns=_field(data, "monotonic_ns", int, path),
        threads=[_thread(entry, path) for entry in threads],
        exception=_raised(data, path), collectives=data.get("collectives"))


def _raised(data, path):
    """dump.json's "exception" (flight/recorder.py) as a Raised, or None."""
    raised = data.get("exception")
    if raised is None:
        return None
    if not isinstance(raised, dict):
        raise TraceFormatError(f"{path}: 'exception' is {raised!r}, not an object")
    return Raised(_field(raised, "type", str, path), _field(raised, "message", str, path),
                  _field(raised, "native_id", int, path, optional=True))


def _completed(directory):
    """dump.json with its stacks completed from the dump's ring (when each call
    began, the built-in calls frames do not show; a dump C wrote has only the
    ring): flight/dumps.py. None when the ring cannot be read: dump.json alone."""
    if not any(os.path.exists(os.path.join(directory, name))
               for name in ("stacks.tsv", "events.bin")):
        return None
    from .flight.dumps import dump_facts
    try:
        return dump_facts(directory)
    except (OSError, TraceFormatError):
        return None


def _field(data, name, kind, path, optional=False):
    value = data.get(name)
    if value is None and optional:
        return None
    if type(value) is not kind:
        raise TraceFormatError(f"{path}: {name!r} is {reprlib.repr(value)}, not "
                               f"{'an integer' if kind is int else 'a ' + kind.__name__}")
    if kind is int and not -1 << 63 <= value < 1 << 63:     # (no float, no time holds it)
        raise TraceFormatError(f"{path}: {name!r} is {reprlib.repr(value)}, not a 64-bit "
                               "integer")
    return value


def _thread(entry, path):
    if not isinstance(entry, dict):
        raise TraceFormatError(f"{path}: a thread is {entry!r}, not an object")
    frames = []
    for frame in _field(entry, "stack", list, path):
        if not isinstance(frame, dict):
            raise TraceFormatError(f"{path}: a frame is {frame!r}, not an object")
        frames.append(Frame(_field(frame, "name", str, path),
                            _field(frame, "since_ns", int, path, optional=True),
                            _field(frame, "line", int, path, optional=True),
                            frame.get("start_seen") is not False,
                            _field(frame, "line_not_known", str, path, optional=True)))
    ring_only = entry.get("ring_only")
    return ThreadStack(_field(entry, "native_id", int, path, optional=True),
                       _field(entry, "name", str, path, optional=True) or "?",
                       tuple(frames), tuple(name for name in ring_only if isinstance(name, str))
                       if isinstance(ring_only, list) else ())


# -- grouping --------------------------------------------------------------------

def main_thread(process):
    """The process's main thread: the one whose id is the pid, else the one
    named MainThread, else its first; None when the dump lists no thread."""
    for thread in process.threads:
        if thread.native_id == process.pid:
            return thread
    for thread in process.threads:
        if thread.name == "MainThread":
            return thread
    return process.threads[0] if process.threads else None


def is_idle(thread):
    """Whether thread waits where threads wait (see the module's doc)."""
    if not thread.frames:
        return True
    name = thread.frames[-1].name
    if name in IDLE_BUILTINS:
        return True
    match = PYTHON_NAME.match(name)
    return bool(match) and (os.path.basename(match["path"]),
                            match["function"]) in IDLE_FUNCTIONS


def _seconds(process, frame):
    """Seconds frame has been open; None when it began before the window,
    NOT_SEEN when its start is not in the ring that reaches back to it."""
    if frame.since_ns is None:
        return None if frame.start_seen else NOT_SEEN
    return max(0, process.monotonic_ns - frame.since_ns) / 1e9


def group_stacks(dump, frames=0, other_threads=False):
    """Groups of the main threads' stacks (other_threads: of the other threads
    that are not idle, with their thread names), fewest members first, then the
    longest stuck first, compared by the innermost `frames` frames' names (0:
    the whole stack). A process without a thread is a member of the empty stack."""
    found = {}
    for process in dump.processes:
        main = main_thread(process)
        if other_threads:
            chosen = [t for t in process.threads if t is not main and not is_idle(t)]
        else:
            chosen = [main or ThreadStack(None, "?", ())]
        for thread in chosen:
            stack = thread.frames[-frames:] if frames else thread.frames
            key = (tuple(frame.name for frame in stack),
                   tuple(frame.line for frame in stack),
                   tuple(frame.line_not_known for frame in stack))
            if other_threads:
                key = (thread.name,) + key
            seconds = _seconds(process, stack[-1]) if stack else None
            found.setdefault(key, []).append(Member(process, thread._replace(frames=stack),
                                                    seconds))
    groups = []
    for key, members in found.items():
        names, lines, not_known = key[1:] if other_threads else key
        groups.append(Group(names, members, lines, not_known))
    groups.sort(key=lambda group: (len(group.members), -_longest(group),
                                   _process_order(group.members[0].process)))
    return groups


def _longest(group):
    return max((m.seconds for m in group.members if isinstance(m.seconds, float)),
               default=-1.0)


# -- words -----------------------------------------------------------------------

def who(members, thread_names=False):
    """The members named as a person would: "rank 3", "ranks 0-2, 4-7", then the
    processes without a rank by label and pid (the first NAMED_MEMBERS of them);
    with thread_names, the thread's name after them."""
    ranks = [m.process.rank for m in members if m.process.rank is not None]
    others = [f"{m.process.label} (pid {m.process.pid})" for m in members
              if m.process.rank is None]
    parts = []
    if ranks:
        parts.append(("rank " if len(set(ranks)) == 1 else "ranks ") + ranges(ranks))
    if len(others) > NAMED_MEMBERS:
        others = others[:NAMED_MEMBERS] + [f"{len(others) - NAMED_MEMBERS} more"]
    text = ", ".join(parts + others)
    if thread_names:
        text += f", thread {members[0].thread.name!r}"
    return text


def short_name(name, line=None, not_known=None):
    """A call's name for a headline: a Python function as "function (file:line)",
    line its current line when known (else the function's first, and why the
    current one is not known when not_known says), anything else as it is."""
    match = PYTHON_NAME.match(name)
    if not match:
        return name
    why = f"; line not known: {not_known}" if line is None and not_known else ""
    return (f"{match['function']} ({os.path.basename(match['path'])}:"
            f"{match['line'] if line is None else line}{why})")


def frame_text(name, line=None, not_known=None):
    """A frame in a stack: a Python function on its current line as
    "path:line: function", anything else (or without its line) as named, with
    why the line is not known when not_known says."""
    match = PYTHON_NAME.match(name)
    if match and line is None and not_known:
        return f"{name} (line not known: {not_known})"
    if not match or line is None:
        return name
    return f"{match['path']}:{line}: {match['function']}"


def _line(group, depth):
    return group.lines[depth] if 0 <= depth < len(group.lines) else None


def _not_known(group, depth):
    return group.not_known[depth] if 0 <= depth < len(group.not_known) else None


def duration_text(values):
    """How long, over members: "42.1 s", "41.2-41.9 s", BEFORE_WINDOW, or a range
    with how many began before the window."""
    known = [v for v in values if isinstance(v, float)]
    unknown = values.count(None)
    not_seen = values.count(NOT_SEEN)
    if not known:
        return BEFORE_WINDOW if unknown or not not_seen else NOT_SEEN
    low, high = min(known), max(known)
    text = f"{low:.1f} s" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f} s"
    if unknown:
        text += f" ({unknown} {BEFORE_WINDOW})"
    if not_seen:
        text += f" ({not_seen}: {NOT_SEEN})"
    return text


def _raised_in(member):
    """The Raised member's thread died of (its frames: the traceback), or None."""
    raised = member.process.exception
    return raised if raised is not None and raised.native_id == member.thread.native_id \
        else None


def headline(group, thread_names=False):
    """`rank 3 in __next__ (dataloader.py:620) for 42.1 s`; `rank 1 raised
    RuntimeError: bad batch in load (data.py:40)` for an exception's dump."""
    if not group.frames:
        whose = "its dump" if len(group.members) == 1 else "their dumps"
        return f"{who(group.members, thread_names)}: no open call in {whose}"
    innermost = len(group.frames) - 1
    where = short_name(group.frames[-1], _line(group, innermost), _not_known(group, innermost))
    raised = [_raised_in(m) for m in group.members]
    if all(raised):
        others = len({(r.type, r.message) for r in raised}) - 1
        return (f"{who(group.members, thread_names)} raised {raised[0].type}: "
                f"{raised[0].message} in {where}"
                + (f" (and {others} other exception{'s' if others > 1 else ''})"
                   if others else ""))
    duration = duration_text([m.seconds for m in group.members])
    when = (f"({duration})" if duration == NOT_SEEN else duration
            if duration.startswith(BEFORE_WINDOW) else f"for {duration}")
    return f"{who(group.members, thread_names)} in {where} {when}"


def _frame_seconds(group, depth):
    return [_seconds(m.process, m.thread.frames[depth]) for m in group.members]


def _frame_lines(group):
    """The group's stack, outermost first, each frame with how long it has been
    open (over the members)."""
    raised = all(_raised_in(m) for m in group.members)     # a traceback: no durations
    rows = [(frame_text(name, _line(group, depth), _not_known(group, depth)),
             "" if raised else duration_text(_frame_seconds(group, depth)))
            for depth, name in enumerate(group.frames)]
    width = max((len(name) for name, _ in rows), default=0)
    return [f"    {name.ljust(width)}  {duration}".rstrip() for name, duration in rows]


def format_report(dump, groups, thread_groups=None):
    """dump's report as text: a title, then each group's headline and stack."""
    lines = [f"{dump.directory}: {_title(dump)}"]
    for group in groups:
        lines.append(headline(group))
        lines.extend(_frame_lines(group))
    if thread_groups is not None:
        lines.append("other threads, not idle:" if thread_groups else
                     "other threads: all idle")
        for group in thread_groups:
            lines.append(headline(group, thread_names=True))
            lines.extend(_frame_lines(group))
    from .flight.collectives import section_lines       # (torch.distributed's)
    lines.extend(section_lines(dump.processes))
    lines.extend(_disagreements(dump))
    for path, problem in dump.problems:
        lines.append(f"not read: {problem}" if problem.startswith(path) else
                     f"not read: {path}: {problem}")
    for process in dump.processes:
        if _cut_short(process.directory):
            lines.append(f"cut short: {process.directory}: its dump was not finished (no "
                         "done.json): its stacks come from dump.json, the ring's events "
                         "may be missing")
    return "\n".join(_CONTROL.sub(_escaped, line) for line in lines)


def _disagreements(dump):
    """A line per thread whose ring holds Python calls open that its frames, read
    at the same instant, do not show (flight/dumps.py): never made into a stack
    (it would be one no thread had), said apart."""
    return [f"note: {process.label} (pid {process.pid}), thread {thread.name!r}: the "
            f"ring holds {', '.join(thread.ring_only)} open, which its Python frames do "
            "not show: the stack above is its frames' (with the ring's built-in calls)"
            for process in dump.processes for thread in process.threads if thread.ring_only]


# A dump's labels, reasons and names are the dumped program's (or a hostile
# file's): their control characters (a terminal's escape sequences) are shown
# escaped, never sent to the terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escaped(match):
    return f"\\x{ord(match.group()):02x}"


def _cut_short(directory):
    """Whether a recorder's dump (it has process.json) lacks done.json, its last
    file: its writer failed (a full disk, a kill) or is still writing."""
    return (os.path.exists(os.path.join(directory, "process.json"))
            and not os.path.exists(os.path.join(directory, "done.json")))


def _title(dump):
    count = len(dump.processes)
    text = f"{count} process{'es' if count != 1 else ''}"
    stamps = [p.realtime_ns for p in dump.processes if p.realtime_ns is not None]
    if stamps:
        text += " dumped at " + time.strftime("%Y-%m-%d %H:%M:%S",
                                              time.localtime(min(stamps) / 1e9))
    reasons = Counter(p.reason for p in dump.processes)
    if len(reasons) == 1:
        text += f" ({next(iter(reasons))})"
    elif reasons:
        text += " (" + ", ".join(f"{reason}: {n}" for reason, n in reasons.most_common()) + ")"
    return text


def report_data(dump, groups, thread_groups=None):
    """dump's report as JSON-ready data (see docs/CLI.md#report)."""
    def group_data(group, thread_names=False):
        return {
            "who": who(group.members, thread_names),
            "innermost": group.frames[-1] if group.frames else None,
            "innermost_line": _line(group, len(group.frames) - 1),
            "innermost_line_not_known": _not_known(group, len(group.frames) - 1),
            "members": [{"pid": m.process.pid, "label": m.process.label,
                         "rank": m.process.rank, "host": m.process.host,
                         "thread": m.thread.name, "native_id": m.thread.native_id,
                         "seconds": _number(m.seconds),
                         "raised": _raised_in(m) and {"type": _raised_in(m).type,
                                                      "message": _raised_in(m).message}}
                        for m in group.members],
            "frames": [{"name": name, "line": _line(group, depth),
                        "line_not_known": _not_known(group, depth),
                        "seconds": [_number(v) for v in _frame_seconds(group, depth)]}
                       for depth, name in enumerate(group.frames)],
        }
    data = {
        "directory": dump.directory,
        "processes": len(dump.processes),
        "reasons": dict(Counter(p.reason for p in dump.processes)),
        "realtime_ns": min((p.realtime_ns for p in dump.processes
                            if p.realtime_ns is not None), default=None),
        "groups": [group_data(group) for group in groups],
        "not_read": [{"path": path, "problem": problem} for path, problem in dump.problems],
    }
    if any(p.collectives for p in dump.processes):
        from .flight.collectives import section_data
        data["collectives"] = section_data(dump.processes)
    if thread_groups is not None:
        data["other_threads"] = [group_data(group, True) for group in thread_groups]
    return data


def _number(seconds):
    return seconds if isinstance(seconds, float) else None


def report(paths, every=False, frames=0, threads=False, as_json=False):
    """The text (or JSON text) `report PATH...` prints."""
    sections = []
    for path in paths:
        if every or _is_process_dump(path) or is_dump_directory(path):
            dumps = [read_dump(directory) for directory in dump_directories(path, every)]
        else:               # a directory of dumps: every process's newest
            dumps = [read_dump(*newest_per_process(path))]
        for dump in dumps:
            groups = group_stacks(dump, frames)
            thread_groups = group_stacks(dump, frames, other_threads=True) if threads else None
            sections.append(report_data(dump, groups, thread_groups) if as_json
                            else format_report(dump, groups, thread_groups))
    if as_json:
        return json.dumps({"version": 1, "dumps": sections}, indent=1)
    return "\n\n".join(sections)
