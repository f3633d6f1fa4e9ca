"""`run`'s tracing windows with its children followed: each window is a job
(its per-process traces in a directory of their own), joined into the window's
OUT when it closes (follow/finish.py)."""

from .. import _has_session, formats, start
from ..follow import exits, identity
from ..follow.finish import RunFinish, job_dir_for
from ..formats import numbered
from .windows import Windows, stopped


class JobWindows(Windows):
    """`run`'s tracing windows, following children: each window is a job (its
    per-process traces in a new directory, keep_in: --processes-dir, or None),
    whose finish (RunFinish, with write and export: see follow/finish.py) this
    process owes until the window closes."""

    def __init__(self, output, options, write, export, keep_in=None):
        super().__init__(output, options, write)
        self._export = export
        self._keep_in = keep_in
        self._job = None

    def guard_ending(self):
        """Done by the follow session: os._exit and exec write OUT from the job, or
        hand its finish over to an exec'd image (follow/exits.py)."""

    def finish(self):
        if not exits.run_ended_early():     # else written, or handed over, at an exec
            super().finish()

    def open(self, noop=False):
        if noop:                    # a schedule's warmup: nothing kept, none followed
            self._job = None
            return super().open(noop=True)
        keep_in = self._keep_in
        with self._lock:
            if _has_session():
                return
            number = self._count + 1
            path = numbered(self._output, number) if self._numbered else self._output
            keep = (numbered(keep_in, number, formats.DIRECTORY)
                    if self._numbered and keep_in is not None
                    else keep_in)
            self._job = job_dir_for(path, keep)
            exits.owe_run_finish(RunFinish(self._job, path, keep_in is not None, self._write,
                                           self._export))
            identity.run_here(path)
            if formats.of(path).live:
                from ..follow import live
                live.request()          # the program's process encodes as it runs
            exits.handle_sigterm()      # (the session's end takes it away again)
        # Last statement: what this frame runs once the hooks are live is recorded.
        start(follow_children=True, output=self._job, **self._options)

    def close(self, save=True):
        with exits.sigterm_waits():     # OUT written whole, then a SIGTERM ends us
            self._close_job(save)

    def _close_job(self, save):
        with self._lock:
            if not _has_session():
                return
            exits.owe_run_finish(None)
            _, interrupted = stopped()
            if not save or self._job is None:      # a schedule's warmup
                if self._job is not None and self._keep_in is None:
                    import shutil
                    shutil.rmtree(self._job, ignore_errors=True)
                return
            self._count += 1
            path = numbered(self._output, self._count) if self._numbered else self._output
            if not RunFinish(self._job, path, self._keep_in is not None, self._write,
                             self._export).run(interrupted=interrupted):
                self.lost = True
