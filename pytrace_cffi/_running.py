"""This process's running session (start() without its stop()), the lock around
it, and the ways it ends: stop() (the public pytrace_cffi.stop) and
stop_at_exit() (pytrace_cffi's atexit, and a followed process's exit).

The public start() (pytrace_cffi/__init__.py) makes the session; all that ends
one (the public API, follow/'s exit paths, `run`) stops it here, below them all,
so no layer reaches up to the package for it."""
import contextlib
import sys
import threading

from ._hook_losses import finish_hook_losses
from .errors import TraceError, TracerStateError, TraceWarning
from .model.trace import StoredTrace

lock = threading.Lock()
session = None      # the running Session (or FollowSession), or None


def has_session():
    """Whether start() ran without its stop(), recording or not."""
    return session is not None


def stop():
    """Stops tracing and returns the Trace. Frames still running are closed at
    this moment. Raises TracerStateError if not tracing, and TraceError (with
    the trace in its .trace) if the hooks hit a failure while tracing.

    Works after another profiler took the hook too (is_tracing() is then False,
    but the session is still there to stop): warns with a TraceWarning naming
    where the hook was lost, when (after which recorded event) and to what, and
    what was recorded up to then; the same facts are in the trace's hook_lost.
    A hook found in place of ours is left alone.

    With start(output=FILE), a Ctrl-C while FILE is written stops the writing:
    lines on stderr say where the per-process traces stay and the command that
    writes FILE from them, then the KeyboardInterrupt goes on to the caller."""
    return _returned(*_stop(None, reraise=True))


def stop_ending():
    """stop() on the process's way out (its atexit, os._exit, SIGTERM, an exec):
    the same, but a Ctrl-C while FILE is written is not raised (the lines say
    where the traces are; the exit goes on)."""
    return _returned(*_stop(None, reraise=False))


def _returned(result, _, failure):
    if failure is not None:
        raise failure
    return result


def stop_holding(hold):
    """stop() as `run` ends a window: (its trace, whether a Ctrl-C came while it
    was saved, the TraceError stop() would raise or None). hold
    (cli.run.interrupts_held: a context manager yielding a list that gets an
    entry per Ctrl-C) is around stopping the session and reading its trace, so
    that a trace is never left half saved; not around writing
    start(output=FILE)'s file from it, which a Ctrl-C interrupts (the job's
    per-process traces stay, and a line says how to finish it), or which one
    that came before skips."""
    return _stop(hold, reraise=False)


def _stop(hold, reraise):
    global session
    with lock:
        running, session = session, None
        if running is None:
            raise TracerStateError("pytrace_cffi is not tracing; call start() first")
        came = None
        if running.sigterm_waits is None and hold is None:
            running.stop()          # at once: the calls made before it are recorded
            result, hook_lost = _read(running)
        else:
            # start(output=FILE): a SIGTERM meanwhile waits until FILE is written
            with (running.sigterm_waits or contextlib.nullcontext)():
                with (hold or contextlib.nullcontext)() as came:
                    running.stop()
                    result, hook_lost = _read(running)
                result = running.write_output_file(result, interrupted=bool(came),
                                                   reraise=reraise)
    return result, bool(came), _stopped(running, result, hook_lost)


def _read(session):
    """(session's trace, its hook_lost entries), session stopped."""
    result = session.result()
    hook_lost = finish_hook_losses(session, result)
    if hook_lost:
        result.hook_lost = hook_lost
    return result, hook_lost


def _stopped(session, result, hook_lost):
    """What stop() of session, stopped and read into result (see there), raises
    (a TraceError, returned) or warns of (the warnings point at stop()'s caller)."""
    if hook_lost:
        import warnings
        from ._hook_losses import hook_loss_message
        warnings.warn(hook_loss_message(hook_lost), TraceWarning, stacklevel=4)
    failure = session.hot_error()
    problem = session.spill_problem     # spill.finish_spill
    if failure or problem:
        return TraceError("; ".join(filter(None, [failure and f"tracing failed: {failure}",
                                                  problem])), trace=result)
    if session.recorders_lost:
        import warnings
        for recorder in session.recorders_lost:
            warnings.warn(TraceWarning("{%s}: %s" % (recorder.option, recorder.lost),
                                       options={recorder.option: None}), stacklevel=4)
    if result.dropped_events and session.flight is None:
        import warnings         # (a flight recorder keeps its newest events only)
        warnings.warn(TraceWarning(f"pytrace_cffi dropped {result.dropped_events} events "
                                   "({max_events} kept the newest; give {output} to keep "
                                   "them all)", options={"max_events": None, "output": ""}),
                      stacklevel=4)
    return None


def _named_output(session):
    """Where start(output=...) told session's trace to go: the file written at
    stop(), the job's directory (follow_children, a flight recorder's), or the
    directory max_events spills to. None when stop() would only return the trace
    (no output; a flight recorder's temporary job)."""
    if session.temporary_job:
        return None
    return session.output_file or session.job_dir or session.output


def stop_at_exit():
    """A session still running at interpreter exit (start() without its stop()).
    With an output named, the user said where its trace goes: it is stopped as
    stop() would stop it, so the file (or directory) is written, and one line says
    so. Without, stop() would have handed the trace to a program that has ended:
    it is unhooked and discarded, its temporary directory (a flight recorder's)
    removed. Never raises: the program's exit goes on as it would."""
    global session
    running = session
    if running is None:
        return
    where = _named_output(running)
    if where is None:
        with lock:
            session = None
        running.stop()
        if running.temporary_job:
            import shutil
            shutil.rmtree(running.job_dir, ignore_errors=True)
        print("pytrace_cffi: still tracing at exit; that trace was discarded (call stop())",
              file=sys.stderr)
        return
    said = "pytrace_cffi: still tracing at exit (no stop()): stopped as stop() would"
    try:
        result = stop_ending()
    except TraceError as exc:       # what was saved is where the message says
        print(f"{said}; {exc}", file=sys.stderr)
        return
    except Exception as exc:        # noqa: BLE001 - the program's exit goes on
        print(f"{said}, which failed ({exc.__class__.__name__}: {exc}); the trace was "
              f"meant for {where}", file=sys.stderr)
        return
    if isinstance(result, StoredTrace) and not result.written:     # lines above say why
        print(f"{said}; {where} could not be written", file=sys.stderr)
    else:
        if running.job_dir is None:    # a spill moved elsewhere is there
            where = result.directory if isinstance(result, StoredTrace) and result.directory \
                else where
        print(f"{said}; the trace is in {where}", file=sys.stderr)
