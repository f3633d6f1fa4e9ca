"""The bootstrap of a followed child: a new interpreter starts tracing.

A new Python interpreter (multiprocessing "spawn"/"forkserver", subprocess /
os.exec* / os.posix_spawn of Python, torchrun ranks) finds PYTRACE_CFFI_FOLLOW
in its environment (JSON: the job directory and the options) and this
package's _boot directory first on PYTHONPATH; the sitecustomize there runs any
other sitecustomize it shadows, then start_from_environment() starts tracing
before __main__ runs. A failure prints one line and leaves the program untraced.
"""
import atexit
import json
import os
import sys

from .._hiding import codes_below, hide_launcher_frames
from . import exits, identity
from .identity import ENV, _command_line, _join_run, _run_over, _say, handed_over
from .launches import _note_unfollowed, _untraced_helper
from .session import armed_after_fork


def start_from_environment(start, flight_recorder):
    """The bootstrap's work: trace this new interpreter, by start (the public
    pytrace_cffi.start, handed in by the bootstrap), if PYTRACE_CFFI_FOLLOW says so
    (flight_recorder: the package's, for the children a forkserver forks; see
    FollowSession). Never raises: a failure prints one line, the program runs untraced."""
    config = os.environ.get(ENV)
    if not config:
        return
    job_dir = None
    try:
        config = json.loads(config)
        job_dir, options = config["dir"], dict(config["options"])
        _join_run(config)
        command = " ".join(_command_line())
        if "from multiprocessing.forkserver import main" in command:
            # The server lives as long as the job; the children it forks are traced.
            identity._armed = (job_dir, options)
            os.register_at_fork(after_in_child=lambda: armed_after_fork(flight_recorder))
            return
        finish = handed_over(job_dir)
        if finish is not None:
            # This image replaced (exec) the process running `run`: it owes the finish.
            _owe_run_finish(job_dir, finish)
        if _untraced_helper(command) or _run_over(job_dir):
            return                    # (a run over: started as it ended, not traced)
        identity._child_job = job_dir
        if config.get("live") is not None:
            from . import live
            live.request(bool(config["live"]))     # encodes its part as it runs
        # Tracing starts inside site's import of our sitecustomize: the frames below
        # (site's, importlib's) and what they run until they return are the
        # interpreter's start-up, not the program's (see hide_launcher_frames).
        hide_launcher_frames(codes_below(sys._getframe(1)), with_callees=True)
        start(follow_children=True, output=job_dir, **options)
    except Exception as exc:     # noqa: BLE001 - never break the child
        reason = f"{exc.__class__.__name__}: {exc}"
        _say(f"not tracing pid {os.getpid()} ({reason})")
        if job_dir is not None:       # the parent's `run` reports it too
            _note_unfollowed(job_dir, {"pid": os.getppid(), "command": _command_line(),
                                       "child_pid": os.getpid(),
                                       "reason": f"its tracing failed to start ({reason})"})



def _owe_run_finish(job_dir, finish):
    """Makes this process finish `run` at exit (its trace saved first), as the
    process it replaced would have after the program."""
    # Here only: the modules that write a job are not every child's start-up cost.
    from .finish import RunFinish
    exits.owe(RunFinish(job_dir, str(finish["output"]), bool(finish.get("keep"))))
    atexit.register(exits.pay_owed)
