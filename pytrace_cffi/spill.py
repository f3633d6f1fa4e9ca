"""The spill directory of a session traced under max_events: made before tracing
(a bad path fails first), completed into a saved trace after stop (finish_spill),
which returns a SpilledTrace (its events stay on disk). Part of the recorder:
the saved directory's files are written and read by their one owner,
model/saved.py (save_spilled, load); this module imports no renderer."""
import os

from ._core import lib
from .model.trace import StoredTrace


class SpilledTrace(StoredTrace):
    """What stop() returns when max_events spilled to a directory: the events
    stay on disk; load() (or iterating, or exporting) reads them back."""

    def __init__(self, directory, threads, dropped_events, spilled_events, parts=None):
        self.directory = directory
        self.threads = threads
        self.dropped_events = dropped_events
        self.spilled_events = spilled_events
        # (meta, hashes, params) when the directory's JSON files could not be
        # written (a full disk): its events.bin is read with these instead.
        self._parts = parts

    def load(self):
        # the reader imported when the trace is read, not with the package
        from .model.saved import load, load_parts
        if self._parts is not None:
            return load_parts(self.directory, *self._parts)
        return load(self.directory)

    def export_chrome_trace(self, path):
        return self.load().export_chrome_trace(path)

    def export_perfetto(self, path, compress=True):
        """Streams the spilled events to .pftrace (no slice table in memory)."""
        return self.load().export_perfetto(path, compress=compress)

    def __repr__(self):
        return (f"<pytrace_cffi.SpilledTrace {self.spilled_events} events in "
                f"{self.directory!r}>")


def prepare_spill_directory(directory):
    """Creates the spill directory now, so a bad path fails before tracing."""
    try:
        os.makedirs(directory, exist_ok=True)
        for stale in ("meta.json", "slices.bin"):
            if os.path.exists(os.path.join(directory, stale)):
                os.unlink(os.path.join(directory, stale))
    except OSError as exc:
        raise ValueError(f"cannot use {directory!r} as output: {exc}") from None
    return os.path.join(directory, "events.bin")


def finish_spill(session):
    """After stop: writes what is still in memory to events.bin, then the JSON
    files that make the directory a saved trace. Nothing recorded is lost to the
    file system: a directory removed while tracing is made again (see
    keep_spill_file), and when the JSON files cannot be written (a full disk) the
    trace returned reads events.bin with what they would hold. Either is noted in
    session.spill_problem, which stop() raises as a TraceError holding the trace."""
    from ._status import check
    from ._stopped import session_facts
    from .model.saved import save_spilled, spilled_parts
    keep_spill_file(session)
    check(lib.pt_spill_rest(session.ptr), session.ptr, "spilling")
    failed = lib.pt_spill_errno(session.ptr)    # the last block: held ones dropped
    if failed:
        note_spill_problem(session, "the events still in memory at the end could not be "
                                    f"written either ({os.strerror(failed)}): they are lost")
    facts = session_facts(session)
    session.finish_live(facts)      # a followed process's encoder does its last events
    directory = session.output
    # pt_spill_rest moved every event still held to events.bin (or counted it as
    # dropped when writing failed): a thread's n_events is what the file holds
    # for it, which load() checks block by block.
    threads = [thread._replace(n_events=info.spilled)
               for thread, info in zip(facts["threads"], facts["infos"])]
    meta, exc = save_spilled(directory, facts, threads, lib.pt_spill_bytes(session.ptr),
                             session.process_meta)
    spilled = sum(t.n_events for t in threads)
    parts = None
    if exc is not None:
        kept = os.path.isfile(os.path.join(directory, "events.bin"))
        parts = spilled_parts(meta, facts) if kept else None
        note_spill_problem(session, f"the saved trace in {directory!r} could not be "
                                    f"completed ({exc.strerror or exc}): " + (
                                        "its events.bin is read with what its meta.json "
                                        "would hold" if kept else "its events are lost"))
    return SpilledTrace(directory, threads, meta["dropped_events"], spilled, parts=parts)


def note_spill_problem(session, text):
    """Adds text to what stop() raises about a spilled session (spill_problem)."""
    previous = session.spill_problem
    session.spill_problem = f"{previous}; {text}" if previous else text


def keep_spill_file(session):
    """Before the last events go to the spill file of a stopped session: when its
    directory (or its events.bin) was removed while tracing, the open file still
    holds every event; it is copied into the directory made again, or else into a
    new temporary one (session.output then names it), and the spilling goes on
    there. Noted in session.spill_problem."""
    fd = lib.pt_spill_fd(session.ptr)
    directory = session.output
    if fd < 0 or _is_open_file(fd, os.path.join(directory, "events.bin")):
        return
    import tempfile
    for place in (directory, None):
        try:
            if place is None:
                place = tempfile.mkdtemp(prefix="pytrace_cffi-spill-")
            os.makedirs(place, exist_ok=True)
            target = os.path.join(place, "events.bin")
            if lib.pt_spill_move(session.ptr, os.fsencode(target)) != lib.PT_OK:
                continue
        except OSError:
            continue
        session.output = place
        where = "made again" if place == directory else f"moved to {place!r}"
        note_spill_problem(session, f"the spill directory {directory!r} was removed while "
                                    f"tracing: {where}, with every event recorded")
        return
    note_spill_problem(session, f"the spill directory {directory!r} was removed while "
                                "tracing and no place took its events again: they are lost")


def _is_open_file(fd, path):
    """Whether path is the file open as fd (not removed, nor replaced)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False
