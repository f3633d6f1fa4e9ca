"""A job's finish: OUT written from the job's per-process traces.

start(output=OUT) (and so each window of `run -o OUT`) records into a job of
its own; its FollowSession makes the RunFinish (the job directory, OUT, whether
the per-process traces are kept: processes_dir, OUT's format as the plan
decided it) and runs it at stop() (finish_run). Following children, the
process owes it (exits.owe: a RunFinish is an exits.OwedOutput): one that ends
without stop() (os._exit, SIGTERM) finishes it through exits.py, and one that
execs hands it to the new image (RunFinish.before_exec, identity.FINISH_FILE).
"""
import atexit
import contextlib
import os
import warnings

from .. import _progress, formats
from .._files import new_directory
from .._progress import counted
from ..errors import TraceFormatError, TraceWarning
from ..model.saved import load
from .exits import OwedOutput
from .identity import (FINISH_FILE, JOB_FILE, RUN_DONE_FILE, STARTING_AT_FINISH, _process_facts,
                       _say, _write_json, handed_over, overflow_dirs)
from .jobs import NOT_READ_WHOLE, process_directories, status, unfollowed, unfollowed_lines
from .join import join, joined_trace


def export_job(inputs, path):
    """Writes the processes of inputs (a job's directory, or the list of its
    process directories) as one trace in the format path's name picks, whole or
    not at all (what `export` does with them). Returns the trace."""
    trace = joined_trace(inputs)[0]
    formats.whole_or_nothing(path, lambda: formats.write(trace, path))
    return trace


class RunFinish(OwedOutput):
    """A job's finish, owed (exits.owe) by the process `pid` (the one that
    started the job with start(output=OUT), or the image an exec of it started):
    OUT (output) written from the job in job_dir by finish_run with write, in
    fmt (the Format of OUT's name unless the plan decided it already); keep: the
    per-process traces stay (processes_dir, `run --processes-dir`)."""

    def __init__(self, job_dir, output, keep=False, write=formats.write_or_fall_back,
                 fmt=None):
        self.job_dir = job_dir
        self.output = output
        self.format = formats.of(output) if fmt is None else fmt
        self.keep = keep
        self.write = write

    def run(self, path=None, interrupted=False, reraise=False):
        """finish_run of this job to path (by default output). Returns whether
        OUT was written."""
        return finish_run(self.job_dir, self.output if path is None else path, self.write,
                          self.format, keep=self.keep, interrupted=interrupted,
                          reraise=reraise)

    def pay(self):
        """run(), as the process ends (atexit, os._exit, SIGTERM, an exec's audit
        hook). Never raises."""
        try:
            self.run()
        except Exception as exc:     # noqa: BLE001 - the program's exit goes on
            _say(f"cannot write the job's trace to {self.output!r} ({exc.__class__.__name__}: "
                 f"{exc}); the per-process traces are in {self.job_dir}")

    def unpaid(self):
        return (f"{self.output} is not written: the job's per-process traces stay in "
                f"{self.job_dir} (write what they hold with: "
                f"{_progress.finish_command([self.job_dir], self.output)})")

    def before_exec(self, followed):
        """At an exec of the process owing this finish (its trace saved already):
        when the new image will be followed, DIR/finish.json hands the finish over
        (the image keeps the pid, which the file names; the environment cannot carry
        it: os.execve has read its env before the audit hook runs); otherwise (not
        Python, or its environment drops PYTRACE_CFFI_FOLLOW) the job is finished
        here, before this image is gone."""
        if followed:
            try:
                _write_json(os.path.join(self.job_dir, FINISH_FILE),
                            {"pid": self.pid, "output": self.output, "keep": self.keep})
                # Runs only if this image survives: the exec failed, nobody claimed it.
                atexit.register(self.unclaimed)
                return
            except OSError:
                pass
        self.pay()

    def unclaimed(self):
        """atexit after an exec that failed (ENOEXEC, ...) past its hand-over, or a
        SIGTERM that ended the process before it: the finish is still this
        process's; OUT holds what was traced before the exec."""
        if handed_over(self.job_dir) is not None:
            self.pay()


def job_dir_for(path, keep_in=None):
    """A new directory for `run -o path`'s per-process traces: keep_in (the
    user's --processes-dir, made if missing), else one in the temporary directory
    (not beside path: the program may remove the place it writes to)."""
    if keep_in is not None:
        os.makedirs(keep_in, exist_ok=True)
        return os.path.abspath(keep_in)
    name = os.path.basename(path.rstrip("/" + os.sep)) or "trace"
    return new_directory(f"pytrace_cffi-{name}-", ".processes")


def finish_run(job_dir, path, write, fmt, keep=False, interrupted=False, reraise=False):
    """After `run`: OUT written and one line per process traced and per child not
    followed. One process (the program's own, nothing followed): written as
    without following, by write(trace, path), which returns the path written
    (perhaps a fallback) or None. Several: the whole job, joined by join() when
    fmt (path's format) is joinable, else by export_job (what `export DIR -o OUT`
    does). A format that is live takes the parts encoded while the program ran. Writing is said in a line when it
    starts and one when it ends (size, time).

    First RUN_DONE_FILE goes into job_dir: a process of the job that outlives the
    run stops recording at its next spill. The per-process traces are in job_dir
    and, when its file system filled up, in overflow_dirs(job_dir) (beside OUT, else
    in the current directory).
    They are removed afterwards, unless keep (the user's --processes-dir), OUT
    could not be written (a Ctrl-C while writing, or interrupted: one came while
    this process's trace was saved), or a process is still running or could not
    be read: then they stay, their place is printed, and without OUT the command
    that writes it. Never changes the exit code: returns whether OUT was written;
    with reraise (the program's own stop()), a Ctrl-C that interrupted the
    writing is raised again once all that is said and done."""
    _write_json_quietly(os.path.join(job_dir, RUN_DONE_FILE), {"pid": os.getpid()})
    removed = not os.path.exists(os.path.join(job_dir, JOB_FILE))
    places = _job_places(job_dir)
    results, written = [], None
    try:
        if interrupted:
            raise KeyboardInterrupt
        if places:
            inputs = _process_inputs(places)
            results = status(inputs)
            written = _write_job(results, inputs, path, write, fmt)
    except KeyboardInterrupt:
        interrupted = True
    except (OSError, TraceFormatError) as exc:
        _say(f"cannot read the per-process traces of the job: {exc}")
    skipped = unfollowed(job_dir)
    # A child still starting up finds RUN_DONE_FILE (and so stays untraced) only
    # while job_dir is there.
    unsettled = any(r.state in ("running", "lost") for r in results) or any(
        child.get("reason") == STARTING_AT_FINISH for child in skipped)
    show_dirs = keep or not written or unsettled
    for r in results if len(results) > 1 else ():
        _say(f"  pid {r.pid} ({r.label}): {_state_text(r)}"
             + (f" [{r.directory}]" if show_dirs else ""))
    for line in unfollowed_lines(skipped):
        _say(f"  {line}")
    if removed:
        _say(f"{job_dir} was removed while the program ran: the traces of the processes "
             "that had ended by then are lost, with its notes of the children not followed"
             + ("; the running ones were saved again" if places else ""))
    shown = " and ".join(places) or job_dir
    if not places:
        _say(f"no process of the job left a trace in {job_dir}")
    elif interrupted:
        _say(f"interrupted while writing {path}: the per-process traces stay in {shown} "
             f"(finish it with: {_progress.finish_command(places, path)})")
    elif not written and results and all(_kept_nothing(r) for r in results):
        # (every place was full to the end): no command could write OUT from them
        notes = "; ".join(sorted({r.note for r in results if r.note}))
        _say("the trace is lost: no process of the job kept any events"
             + (f" ({notes})" if notes else "") + f"; {path} is not written")
        import shutil
        for place in {job_dir, *places}:
            shutil.rmtree(place, ignore_errors=True)
    elif not written:
        _say(f"the per-process traces stay in {shown} (write them later with: "
             f"{_progress.finish_command(places, path)})")
    elif keep or unsettled:
        _say(f"the per-process traces stay in {shown}")
    else:
        import shutil
        for place in {job_dir, *places}:
            shutil.rmtree(place, ignore_errors=True)
    if interrupted and reraise:
        raise KeyboardInterrupt
    return bool(written)


def _write_job(results, inputs, path, write, fmt):
    """finish_run's writing of OUT (see there). Returns the path written, or None."""
    root = [r for r in results if r.state == "complete" and _is_root(r.directory)]
    started = _progress.announce_writing(path)
    if len(results) == 1 and root:
        trace = load(root[0].directory)
        if fmt.live:
            from .live import live_parts, why_not_encoded
            parts = live_parts(root[0].directory, trace)
            if parts is not None:
                trace._streams.encoded_parts = parts   # encoded while it ran
            elif why_not_encoded(root[0].directory):
                _say(f"encoding the whole trace now: {why_not_encoded(root[0].directory)}")
        written = write(trace, path)
        if written:
            from ..render.summary import calls_begun     # as summary counts them
            from ..model.trace import threads_text
            _say(f"{counted(calls_begun(trace), 'call')} on {threads_text(trace.threads)}"
                 f" -> {written}{_progress.written_note(written, started)}")
            _progress.suggest_smaller(written)
        return written
    try:
        if fmt.joinable:
            join(inputs, path)
        else:
            with warnings.catch_warnings():     # finish_run's lines say it
                warnings.filterwarnings("ignore", NOT_READ_WHOLE, TraceWarning)
                export_job(inputs, path)
    except (OSError, ValueError, TraceFormatError) as exc:
        _say(f"cannot write the job's trace to {path!r}: {exc}")
        return None
    _say(f"{counted(len(results), 'process')}, "
         f"{counted(sum(r.calls for r in results), 'call')} -> {path}"
         f"{_progress.written_note(path, started)}")
    _progress.suggest_smaller(path)
    return path


def _kept_nothing(result):
    """Whether a process's trace holds no event and never will: lost, or this
    process's own (stopped: its trace could not be completed)."""
    return not result.calls and (result.state == "lost" or (
        result.state == "running" and result.pid == os.getpid()))


def _state_text(result):
    """A process's state in finish_run's lines: one that outlives the run stops
    recording at its next spill; this process, running to the reader, stopped."""
    text = f"{result.state}, {counted(result.calls, 'call')}" + (
        f" - {result.note}" if result.note else "")
    if result.state == "running" and result.pid == os.getpid():
        return (f"stopped, {counted(result.calls, 'call')} - its trace could not be completed (a full "
                "disk?): read as far as it was spilled")
    if result.state == "running":
        text += "; it outlives the run: it stops recording at its next spill"
    return text


def _job_places(job_dir):
    """The directories holding the job's per-process traces: job_dir, and the
    overflow beside OUT when a process moved there (see _KeyNames; made for a move
    that failed, it is removed empty)."""
    places = []
    for place in (job_dir, *overflow_dirs(job_dir)):
        try:
            if place and any(name.startswith("proc-") for name in os.listdir(place)):
                places.append(place)
            elif place and place != job_dir:
                os.rmdir(place)
        except OSError:
            pass
    return places


def _process_inputs(places):
    """What status and join read for the job: its directory when it is the one
    place, else the process directories of all (one moved beside OUT counts once)."""
    if len(places) == 1:
        return places[0]
    found = {}
    for place in places:            # the overflow last: its copy is the one moved
        for directory in process_directories(place):
            found[os.path.basename(directory)] = directory
    return sorted(found.values())


def _write_json_quietly(path, data):
    with contextlib.suppress(OSError):
        _write_json(path, data)


def _is_root(directory):
    return bool(_process_facts(directory)[0].get("root"))
