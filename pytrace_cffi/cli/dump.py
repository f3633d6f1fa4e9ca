"""`python -m pytrace_cffi dump TARGET...`: asks running flight recorders
(flight/recorder.py) to dump, without stopping them, and says where the dumps
went. TARGET is a pid (its recorder keeps its entry of its dumps directory's
.live/ registry open: /proc/PID/fd says where it dumps), a dumps directory
(its .live/ registry lists the processes recording into it) or a job's trace
directory (its processes' process.json say where they dump). Every process
asked at once writes into one dump directory (the request file names it). A process
whose dumps directory is known is asked by a file, DUMPS_DIR/.requests/<pid>, that
its recorder's C thread looks for: no signal, so no call of the program is cut short
(a C sleep() returns early on one) and no handler of the program's runs; others (a
pid whose dumps directory is not known) get the signal.
Once every process's raw dump is whole, --format writes each dump directory as
one trace beside its raw files (flight/formatted.py), -o all of them as one."""
import contextlib
import json
import os
import sys
import time

from .. import formats
from ..options import signal_number

# (the recorder's and the job's modules are imported when the command runs:
# `run`'s start-up parses this parser too)


def add_dump_parser(commands):
    dump = commands.add_parser(
        "dump", help="make running flight recorders dump (they go on recording)",
        description="Asks the processes recording with --flight-recorder to write a dump "
                    "of their newest events and stacks, without stopping them nor "
                    "interrupting them: by a request file each recorder looks for (a pid "
                    "whose dumps directory is not known: by its --dump-signal). TARGET: a pid, a dumps directory (--dumps-dir: "
                    "every process recording into it) or a job's trace directory "
                    "(--processes-dir, start(output=DIR)). Read the dumps with "
                    "`python -m pytrace_cffi report DUMPDIR`, or export a DUMPDIR.")
    dump.add_argument("targets", nargs="+", metavar="TARGET",
                      help="a pid, a dumps directory or a job's trace directory")
    dump.add_argument("--signal", metavar="SIG", default=None,
                      help="the signal for a pid given alone (default SIGUSR1)")
    dump.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                      help="how long to wait for the dumps to be written (default 30)")
    dump.add_argument("--format", metavar="FMT", default=None,
                      help="once the dumps are written, also write each dump directory as "
                           "one trace, DUMPDIR/trace.<suffix>: " + ", ".join(formats.DUMP_FORMATS)
                           + " ('dir': a saved-trace directory)")
    dump.add_argument("-o", "--output", metavar="FILE", default=None,
                      help="once the dumps are written, also write them, every process "
                           f"joined, to FILE: {formats.suffixes_text()}")


def cmd_dump(args):
    from ..flight.recorder import dump_dir_name
    if args.format is not None and args.format.lower().lstrip(".") not in formats.DUMP_FORMATS:
        raise SystemExit(f"pytrace_cffi dump: --format must be one of "
                         f"{', '.join(formats.DUMP_FORMATS)}, not {args.format!r}")
    asked = []          # (pid, signal, dumps_dir or None)
    for target in args.targets:
        asked += _processes_of(target, args.signal)
    if not asked:
        raise SystemExit("pytrace_cffi dump: no running flight recorder found in "
                         + ", ".join(args.targets))
    name = dump_dir_name("request")
    asked_at = time.time()
    named = {d for d in {d for _, _, d in asked if d} if _write_request(d, name)}
    expected = {}       # pid -> its dump's directory, or (dumps_dir,): it names its own
    for pid, signum, dumps_dir in asked:
        by_file = _ask_by_file(pid, dumps_dir, name)
        if dumps_dir:
            expected[pid] = (os.path.join(dumps_dir, name, f"proc-{pid}")
                             if by_file or dumps_dir in named else (dumps_dir,))
        if by_file or not signum:
            continue
        try:
            os.kill(pid, signum)
        except OSError as exc:
            print(f"pytrace_cffi: pid {pid}: {exc.strerror}", file=sys.stderr)
    done = _wait_for(expected, args.wait, asked_at)
    for pid, path in sorted(expected.items()):
        if pid in done:
            print(f"pid {pid}: written: {done[pid]}")
        elif isinstance(path, tuple):
            print(f"pid {pid}: not finished (yet): it names its own dump in {path[0]} (the "
                  "request could not be written there; a full disk?)")
        else:
            print(f"pid {pid}: not finished (yet): {path}")
    for pid, _, d in asked:
        if not d:
            print(f"pid {pid}: asked (its dumps directory is not known here)")
    places = sorted({os.path.dirname(path) for path in done.values()})
    written = _write_formatted(places, args.format, args.output)
    if places:
        print("read them with: python -m pytrace_cffi report " + " ".join(places))
    return 0 if len(done) == len(expected) and written else 1


def _write_formatted(places, format_name, output):
    """--format's and -o's traces of the dump directories places (their whole
    process dumps). Returns whether every one asked for was written."""
    from ..errors import TraceFormatError
    from ..flight.formatted import format_dump, whole_process_dumps, write_joined
    ok = True
    for place in places if format_name else ():
        try:
            print(f"as one trace: {format_dump(place, format_name.lower().lstrip('.'))}")
        except (OSError, TraceFormatError) as exc:
            print(f"pytrace_cffi: cannot write {place} as {format_name}: {exc}",
                  file=sys.stderr)
            ok = False
    if output:
        dumps = [path for place in places for path in whole_process_dumps(place)]
        try:
            if not dumps:
                raise TraceFormatError("no process dump was written whole")
            formats.whole_or_nothing(output, lambda: write_joined(dumps, output))
            print(f"{len(dumps)} process dump{'s' if len(dumps) > 1 else ''} -> {output}")
        except (OSError, TraceFormatError) as exc:
            print(f"pytrace_cffi: cannot write {output}: {exc}", file=sys.stderr)
            ok = False
    return ok


def _processes_of(target, signal_name):
    from ..flight.recorder import REGISTRY
    if target.isdigit():
        pid = int(target)
        dumps_dir = _dumps_dir_of_pid(pid)
        if dumps_dir is not None:
            _live_recorder(dumps_dir, pid)      # (asked by file when it looks for one)
        return [(pid, signal_number(signal_name or "SIGUSR1"), dumps_dir)]
    if not os.path.isdir(target):
        raise SystemExit(f"pytrace_cffi dump: {target!r} is neither a pid nor a directory")
    found = []
    registry = os.path.join(target, REGISTRY)
    for entry in (sorted(os.listdir(registry)) if os.path.isdir(registry)
                  and not os.path.islink(registry) else ()):
        pid, _, kind = entry.partition(".")     # the registry's <pid>.json entries
        if pid.isdigit() and kind == "json":
            signum = _live_recorder(os.path.abspath(target), int(pid))
            if signum is not None:
                found.append((int(pid), signum, os.path.abspath(target)))
    for entry in sorted(os.listdir(target)):
        if entry.startswith("proc-"):
            facts = _json(os.path.join(target, entry, "process.json"))
            flight = facts.get("flight") if isinstance(facts, dict) else None
            if (isinstance(flight, dict) and isinstance(flight.get("dumps_dir"), str)
                    and os.path.isabs(flight["dumps_dir"]) and type(facts.get("pid")) is int
                    and facts["pid"] > 0
                    and not os.path.exists(os.path.join(target, entry, "meta.json"))):
                # process.json only says where to look: its recorder's own entry decides
                signum = _live_recorder(flight["dumps_dir"], facts["pid"])
                if signum is not None:
                    found.append((facts["pid"], signum, flight["dumps_dir"]))
    return list({pid: (pid, s, d) for pid, s, d in found}.values())


def _live_recorder(dumps_dir, pid):
    """The dump signal of pid's entry DUMPS_DIR/.live/<pid>.json when it is a live
    recorder's of ours (0: it has none, and takes requests by file only; one that
    takes them goes into _BY_FILE), else None (a line on stderr says why, unless
    the entry is gone or names no signal). Anyone who can write there could name any process
    and signal, and a recorder killed by SIGKILL leaves its entry for the pid's
    next owner: so the entry must be our regular file, held open by pid itself
    (the recorder keeps it open), with a signal a recorder may dump on."""
    from ..errors import TraceFormatError
    from ..flight.recorder import REGISTRY
    from .._safe_read import read_bounded_with_stat
    path = os.path.join(dumps_dir, REGISTRY, f"{pid}.json")
    try:
        data, st = read_bounded_with_stat(path, 1 << 16)
        facts = json.loads(data.decode("utf-8"))
    except FileNotFoundError:
        return None             # (its recorder stopped meanwhile)
    except (TraceFormatError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return _skipped(path, f"not a recorder's entry ({exc})")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return _skipped(path, f"owned by uid {st.st_uid}, not by you")
    if not isinstance(facts, dict) or facts.get("pid") != pid:
        return _skipped(path, "does not name the pid of its file name")
    by_file = facts.get("requests") is True
    if facts.get("signal") == 0:
        if not by_file:
            return None         # a recorder with no dump signal, nor requests
        signum = 0
    else:
        try:
            signum = signal_number(facts.get("signal"))
        except (TypeError, ValueError) as exc:
            return _skipped(path, f"its signal is not one a recorder dumps on ({exc})")
        if not signum:
            return _skipped(path, "its signal is not one a recorder dumps on")
    holds = _holds_open(pid, (st.st_dev, st.st_ino))
    if holds is None:
        return _skipped(path, f"pid {pid} is not running (an entry left by a killed "
                              "recorder)" if os.path.isdir("/proc/self/fd")
                        and not os.path.exists(f"/proc/{pid}") else
                        f"cannot see whether pid {pid} is its recorder (/proc/{pid}/fd "
                        "cannot be read)")
    if not holds:
        return _skipped(path, f"pid {pid} does not hold it open: not its recorder (an "
                              "entry left by a process that was killed?)")
    if by_file:
        _BY_FILE.add(pid)
    return signum


_BY_FILE = set()        # pids whose live recorder looks for DUMPS_DIR/.requests/<pid>


def _ask_by_file(pid, dumps_dir, name):
    """Asks pid for a dump named name by its request file, when its live
    recorder looks for one (_live_recorder checked it); whether it was asked so."""
    from ..flight.recorder import REQUESTS
    if not dumps_dir or pid not in _BY_FILE:
        return False
    path = os.path.join(dumps_dir, REQUESTS, str(pid))
    try:
        _replace_with(path, name)
        return True
    except OSError as exc:
        print(f"pytrace_cffi: cannot write {path} ({exc.strerror}): pid {pid} is signalled",
              file=sys.stderr)
        return False


def _holds_open(pid, file_id):
    """Whether pid has the file (st_dev, st_ino) open: None when its /proc/PID/fd
    cannot be read (gone, not ours, no /proc)."""
    fds = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fds)
    except OSError:
        return None
    for name in names:
        try:
            st = os.stat(os.path.join(fds, name))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == file_id:
            return True
    return False


def _skipped(path, why):
    print(f"pytrace_cffi dump: {path}: not signalled: {why}", file=sys.stderr)
    return None


def _dumps_dir_of_pid(pid):
    """The dumps directory of a pid: the one whose .live/<pid>.json its recorder
    holds open (read from /proc/PID/fd, ours to read when the pid is ours to
    signal), else ./pytrace_cffi-dumps when it is registered there; or None."""
    from ..flight.recorder import REGISTRY
    from ..options import DEFAULT_DUMPS_DIR
    fds = f"/proc/{pid}/fd"
    try:
        links = [os.readlink(os.path.join(fds, fd)) for fd in os.listdir(fds)]
    except OSError:
        links = []
    for link in links:
        registry, name = os.path.split(link)
        if (name == f"{pid}.json" and os.path.basename(registry) == REGISTRY
                and os.path.isfile(link)):
            return os.path.dirname(registry)
    if os.path.exists(os.path.join(DEFAULT_DUMPS_DIR, REGISTRY, f"{pid}.json")):
        return os.path.abspath(DEFAULT_DUMPS_DIR)
    return None


def _replace_with(path, text):
    """path becomes a new file of ours holding text (written beside it, renamed
    over it: a fixed temporary name could be a link planted there); OSError when
    it cannot, and the new file is gone then."""
    import tempfile
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path),
                               prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_request(dumps_dir, name):
    """Whether the request naming the dumps name went into dumps_dir."""
    from ..flight.recorder import REQUEST_FILE
    path = os.path.join(dumps_dir, REQUEST_FILE)
    try:
        _replace_with(path, json.dumps({"name": name, "time": time.time()}))
        return True
    except OSError as exc:
        print(f"pytrace_cffi: cannot write {path} ({exc.strerror}): each process names "
              "its own dump", file=sys.stderr)
        return False


def _wait_for(expected, seconds, asked_at):
    """{pid: its dump's directory} of the dumps expected (a directory, or
    (dumps_dir,): any of pid's finished there since asked_at) that are whole
    within seconds."""
    from ..flight.dumps import DONE_FILE
    deadline = time.monotonic() + seconds
    while True:
        done = {}
        for pid, path in expected.items():
            if isinstance(path, tuple):
                path = _own_named_dump(path[0], pid, asked_at)
            if path and os.path.exists(os.path.join(path, DONE_FILE)):
                done[pid] = path
        if len(done) == len(expected) or time.monotonic() > deadline:
            return done
        time.sleep(0.05)


def _own_named_dump(dumps_dir, pid, since):
    """A dump of pid in dumps_dir begun since (a time.time()), or None."""
    try:
        names = os.listdir(dumps_dir)
    except OSError:
        return None
    for name in names:
        path = os.path.join(dumps_dir, name, f"proc-{pid}")
        try:
            if os.stat(path).st_mtime >= since - 1:
                return path
        except OSError:
            continue
    return None


def _json(path):
    from ..follow.identity import _read_json_file
    try:
        return _read_json_file(path)
    except Exception:           # noqa: BLE001 - a file of a process going away
        return None

