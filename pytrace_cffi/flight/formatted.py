"""A flight recorder's dump written as one trace file (start(dump_format=...),
run --dump-format, `dump --format` / `-o`), beside its raw files.

The raw directories (DUMPDIR/proc-<pid>/, written by the clones) stay the
ground truth; the formatted trace is an addition: DUMPDIR/trace.<suffix>
(DUMPDIR/trace/ for "dir"), the processes of DUMPDIR whose raw dumps are whole
(done.json) joined as `export DUMPDIR` joins them. It is written under a
temporary name and renamed, so a reader never sees half of one.

The processes of a job that dump into one directory (`dump JOBDIR`) each write
it in turn, under a lock on DUMPDIR: each one that holds a process the file
does not yet hold writes it again with every whole process, so the last one to
finish leaves the whole job in it (FORMATTED_FILE says which processes it
holds; one finishing after another wrote them all writes nothing).
"""
import contextlib
import json
import os
import shutil

from .. import formats
from ..errors import TraceFormatError
from ..follow.join import joined_trace
from .dumps import DONE_FILE, DUMP_FILE, PROCESS_PREFIX

FORMATTED_NAME = "trace"    # + the format's suffix (not "dump": dump.json marks a process dump)
FORMATTED_FILE = ".formatted.json"      # {"path": its name, "processes": [proc-*]}
LOCK_FILE = ".formatted.lock"


def formatted_path(place, format_name):
    """Where the dump in place is written in format_name (formats.DUMP_FORMATS)."""
    fmt = formats.dump_format(format_name)
    if fmt.directory:
        return os.path.join(place, FORMATTED_NAME) + os.sep
    return os.path.join(place, FORMATTED_NAME + fmt.suffixes[0])


def whole_process_dumps(place):
    """The process dumps in DUMPDIR place that are whole (done.json), sorted; place
    itself when it is one."""
    if os.path.isfile(os.path.join(place, DUMP_FILE)):
        candidates = [place]
    else:
        try:
            names = os.listdir(place)
        except OSError:
            names = []
        candidates = sorted(os.path.join(place, name) for name in names
                            if name.startswith(PROCESS_PREFIX))
    return [path for path in candidates if not os.path.islink(path)
            and os.path.isfile(os.path.join(path, DONE_FILE))]


def format_dump(place, format_name):
    """Writes the whole process dumps of place (a DUMPDIR, or one process dump
    given as dump(path=...)) as formatted_path(place, format_name), unless the
    file there holds them all already. Returns its path. TraceFormatError when no
    process dump there is whole."""
    target = formatted_path(place, format_name)
    with _locked(place):
        dumps = whole_process_dumps(place)
        if not dumps:
            raise TraceFormatError(f"{place}: no whole process dump (done.json) to write")
        names = [os.path.basename(path) for path in dumps]
        if _holds(place, target, names):
            return target
        write_joined(dumps, target, formats.dump_format(format_name))
        _write_note(place, target, names)
    return target


def write_joined(process_dumps, target, fmt=None):
    """Writes the processes of process_dumps joined (as export joins a job) to
    target in fmt (by default the format target's name picks), under a temporary
    name renamed at the end. Returns the trace."""
    fmt = fmt or formats.format_of(target)
    trace = joined_trace(list(process_dumps))[0]
    if fmt.directory:
        final = target.rstrip(os.sep)
        temporary = f"{final}.{os.getpid()}.tmp"
        shutil.rmtree(temporary, ignore_errors=True)
        formats.whole_or_nothing(temporary, lambda: formats.write(trace, temporary, fmt))
        old = f"{final}.{os.getpid()}.old"
        if os.path.isdir(final):        # (a directory cannot be replaced in one rename)
            os.rename(final, old)
        os.rename(temporary, final)
        shutil.rmtree(old, ignore_errors=True)
        return trace
    temporary = f"{target}.{os.getpid()}.tmp"
    try:
        formats.write(trace, temporary, fmt)
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    return trace


@contextlib.contextmanager
def _locked(place):
    import fcntl
    fd = os.open(os.path.join(place, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)            # (releases the lock)


def _holds(place, target, names):
    """Whether target, written already, holds every process of names."""
    from ..follow.identity import _read_json_file
    try:        # (a FIFO or a link planted there must not hold up the recorder)
        note = _read_json_file(os.path.join(place, FORMATTED_FILE))
        return (os.path.exists(target) and note.get("path") == os.path.basename(
            target.rstrip(os.sep)) and set(names) <= set(note.get("processes", ())))
    except (OSError, TraceFormatError, ValueError, TypeError, AttributeError):
        return False


def _write_note(place, target, names):
    path = os.path.join(place, FORMATTED_FILE)
    with contextlib.suppress(OSError):
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"path": os.path.basename(target.rstrip(os.sep)), "processes": names}, f)
        os.replace(path + ".tmp", path)
