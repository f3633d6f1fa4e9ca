"""Where a job's flight recorder dumps may be, for `report PATH` (hang_report.py).

A user names the dumps by whatever they have at hand: the dumps directory
(--dumps-dir), a dump directory in it, `run`'s OUT (its dumps go beside it,
OUT-dumps/), or the job's directory (--processes-dir), whose processes may dump
anywhere: beside OUT, or where --dumps-dir said. Each process of a job says
where it dumps in its process.json ("flight": {"dumps_dir": ...}: `dump
JOBDIR` reads it too), so every place is looked in: PATH itself, PATH/dumps/,
the dumps directory beside PATH (PATH-dumps/, OUT-dumps/), and each
dumps_dir the job's proc-*/process.json name.

Reading a process.json only says where to look: what is read there is read as
any dump is (safely, bounded); a dumps_dir that is not an absolute path is not
looked in.
"""
import os

from ..errors import TraceFormatError
from ..follow.identity import JOB_FILE, _read_json_file
from ..options import default_dumps_dir

DUMPS_SUBDIRECTORY = "dumps"        # <job or trace dir>/dumps/<DUMPDIR>/
PROCESS_FILE = "process.json"
MAX_PROCESS_FILES = 100_000         # proc-* directories of one job read for their dumps_dir


def candidates(path):
    """The directories that may hold path's DUMPDIRs, in order, without repeats:
    [(directory, why it is looked in)]."""
    found = [(path, "the path given"),
             (os.path.join(path, DUMPS_SUBDIRECTORY), f"its {DUMPS_SUBDIRECTORY}/"),
             (default_dumps_dir(path), "beside it: where run -o OUT dumps")]
    for dumps_dir in job_dumps_dirs(path):
        found.append((dumps_dir, "named by its processes' process.json"))
    unique, seen = [], set()
    for directory, why in found:
        key = os.path.realpath(directory)
        if key not in seen:
            seen.add(key)
            unique.append((directory, why))
    return unique


def job_dumps_dirs(path):
    """The dumps directories the processes of job directory path record into, as
    their proc-*/process.json say (sorted; none when path is not a job's: it has
    no job.json, as a dump directory, whose proc-* hold copies of process.json)."""
    if not os.path.isfile(os.path.join(path, JOB_FILE)):
        return []
    try:
        names = sorted(name for name in os.listdir(path) if name.startswith("proc-"))
    except OSError:
        return []
    found = set()
    for name in names[:MAX_PROCESS_FILES]:
        process_dir = os.path.join(path, name)
        if os.path.islink(process_dir) or not os.path.isdir(process_dir):
            continue                    # (a link may lead out of the job)
        try:
            facts = _read_json_file(os.path.join(process_dir, PROCESS_FILE))
        except (OSError, TraceFormatError):
            continue
        flight = facts.get("flight") if isinstance(facts, dict) else None
        dumps_dir = flight.get("dumps_dir") if isinstance(flight, dict) else None
        if isinstance(dumps_dir, str) and os.path.isabs(dumps_dir) and "\0" not in dumps_dir:
            found.add(dumps_dir)
    return sorted(found)


def holders(path):
    """The existing directories among candidates(path), in order; TraceFormatError
    saying where it looked when none exists."""
    found = [directory for directory, _ in candidates(path) if os.path.isdir(directory)]
    if not found:
        raise TraceFormatError(f"{path}: neither a directory nor beside one of dumps "
                               f"(looked in {looked_in(path)})")
    return found


def looked_in(path):
    """Where report looked for path's dumps, in words."""
    return "; ".join(f"{directory} ({why})" for directory, why in candidates(path))
