"""read_trace: whatever pytrace_cffi wrote, read back by its path: a saved-trace
directory, a Chrome .json/.json.gz or a .pftrace (formats.read picks the reader
by the name), a job's trace directory (follow_children: proc-* inside), whose
processes are joined into one Trace (follow.join.joined_trace), or one process's
directory of a job (process.json, no meta.json: a flight recorder's dump of
that process, or one that is still running or was killed), read as a job of one
process. A flight recorder's dump directory (DUMPS_DIR/<time>-<reason>/, its
processes' proc-* inside) is a job's directory. It sits above the
process code for that last case, so that neither formats.py nor a reader or a
renderer imports process code."""
import os
import warnings

from . import formats
from .errors import TraceWarning


def read_trace(path):
    """A Trace from a saved-trace directory, a job's directory (a flight
    recorder's dump directory too), one process's directory of a job, a Chrome
    .json/.json.gz or a .pftrace written by pytrace_cffi. Raises TraceFormatError
    for anything else."""
    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.lexists(os.path.join(path, "meta.json")) \
            and (_holds_processes(path) or _is_process_dir(path)):
        return _read_job(path)
    return formats.read(path)


def _is_process_dir(path):
    """Whether path is one process's directory of a job: its process.json (the
    trace itself, meta.json, not written yet: running, killed, or a dump)."""
    return os.path.lexists(os.path.join(path, "process.json"))


def _holds_processes(path):
    """Whether path is the trace directory of a job (follow_children): proc-* inside."""
    return any(name.startswith("proc-") and os.path.isdir(os.path.join(path, name))
               for name in os.listdir(path))


def _read_job(path):
    """Every process of a job's trace directory as one Trace of several processes
    (see follow.join.joined_trace): each thread's pid says whose it is. A process
    not read whole (lost, recovered, damaged) is named in a TraceWarning."""
    from .follow.jobs import not_read_whole
    from .follow.join import joined_trace
    trace, results = joined_trace(path)
    message = not_read_whole(path, results)
    if message:
        warnings.warn(message, TraceWarning, stacklevel=3)
    return trace
