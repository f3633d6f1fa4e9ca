"""start(output="out.pftrace"): what stop() returns once the file is written.

Done as `run -o OUT` does it: the FollowSession (session.py) records into a job
directory of its own (finish.job_dir_for), its events spill there as they are
recorded, a .pftrace is encoded on the encoder's thread as the program runs
(live.py), and stop() writes OUT from the job (finish_run: the parts encoded
already when they hold the whole trace, else the whole trace) and removes the
directory. With follow_children the processes it starts are followed into the
job and OUT holds them all; without, the session sets no environment and wraps
no exit path (os._exit, SIGTERM). A program that ends without stop() still gets
OUT: pytrace_cffi's atexit (_running.stop_at_exit; exits.finish_here with
children followed) stops the session as stop() does.
"""
from .. import formats
from ..model.trace import StoredTrace


class WrittenTrace(StoredTrace):
    """What stop() returns after start(output=FILE): where the trace went.
    load() reads it back (a .json, .json.gz or .pftrace; an .html page is not
    read back)."""

    def __init__(self, path, written, threads, dropped_events):
        self.path = path
        self.written = written          # False: finish_run said why, and where the rest is
        self.threads = threads
        self.dropped_events = dropped_events

    def load(self):
        return formats.read(self.path)

    def __repr__(self):
        state = "written to" if self.written else "NOT written to"
        return f"<pytrace_cffi.WrittenTrace {state} {self.path!r}>"
