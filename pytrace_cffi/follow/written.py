"""start(output="out.pftrace"): the trace written to a file at stop().

Done as `run -o OUT` does it: the session is a FollowSession into a job
directory of its own (finish.job_dir_for), its events spill there as they are
recorded, a .pftrace is encoded on the encoder's thread as the program runs
(live.py), and stop() writes OUT from the job (finish_run: the parts encoded
already when they hold the whole trace, else the whole trace) and removes the
directory. With follow_children the processes it starts are followed into the
job and OUT holds them all; without, the session sets no environment and wraps
no exit path (os._exit, SIGTERM). A program that ends without stop() still gets
OUT: pytrace_cffi's atexit (_stop_at_exit in __init__; exits.finish_here with
children followed) stops the session as stop() does.
"""
import shutil

from .. import formats
from ..model.trace import StoredTrace
from . import exits, identity, live
from .finish import RunFinish, job_dir_for
from .session import FollowSession


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


class WritingSession(FollowSession):
    """The FollowSession of start(output=FILE); children followed or not."""

    def __init__(self, options, path, children):
        self.output_file = path
        self.job = job_dir_for(path)
        self._finish = RunFinish(self.job, path)        # (it reads path's format)
        self._encoding_before = live.requested_compress()
        if self._finish.format.live:
            live.request()
        try:
            super().__init__(dict(options, output=self.job), root=True, children=children)
        except BaseException:
            self.forget_output_file()
            raise
        if children:
            identity.run_here(path)
            exits.owe_run_finish(self._finish)      # os._exit, SIGTERM: OUT written first
            exits.handle_sigterm()

    @staticmethod
    def sigterm_waits():
        """stop() stops and writes OUT within it: see exits.sigterm_waits."""
        return exits.sigterm_waits()

    def forget_output_file(self):
        """start() failed: nothing of it stays."""
        live.request_as(self._encoding_before)
        if self.follows_children:
            exits.owe_run_finish(None)
        shutil.rmtree(self.job, ignore_errors=True)

    def write_output_file(self, result):
        """stop()'s last step: OUT written from the job (lines on stderr say so,
        as `run` does); returns the WrittenTrace."""
        live.request_as(self._encoding_before)
        if self.follows_children:
            exits.owe_run_finish(None)
        written = self._finish.run()
        return WrittenTrace(self.output_file, bool(written), result.threads,
                            result.dropped_events)


def start_writing(options, follow_children):
    """start()'s session for output=FILE (options checked), not started yet."""
    return WritingSession(options, options["output"], follow_children)
