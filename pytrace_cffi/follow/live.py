"""The .pftrace of `run -o OUT.pftrace` encoded while the program runs.

The run's own process spills each full chunk to events.bin; a LiveEncoder hands
the C encoder (c_src/pt_live.c, a thread of its own without the GIL) each new
key's bytes and the spill file's length at every spill, so the file's calls are
encoded on the other core as the program runs. At stop the encoder does the last
chunks; live.json then says whether its parts hold the whole trace (every key
named at spill time as the trace names it at stop, no tag or args, no failure),
and the run's finish writes OUT with them (render/perfetto.py: CallStreams.encoded_part)
instead of walking the trace again. Otherwise OUT is written from the whole trace, as
before; live.json says why.

The clock's slope (ticks to ns) is fixed when the encoder starts, at the first
spill at least CALIBRATION_NS (0.2 s) after the clock's first reading, and the trace
keeps that slope (session.fixed_ns_per_tick): both encodings then agree to the
nanosecond. PYTRACE_CFFI_LIVE=0 turns it off.
"""
import json
import os
import stat

from .. import _clock, _progress
from .._core import ffi, lib
from ..errors import TraceFormatError
from .._own_threads import keep_forks_quiet

LIVE_FILE = "live.json"
# A process's thread i writes packet sequence sequence(first_sequence(pid), i):
# its first RANGE threads (and task lanes) one pid's own range, the rest the
# upper half of the ids (c_src/pt_export.h), so that the parts of a job's
# processes are stitched into one file as they are. Past MAX_THREADS threads
# (2^31 and more) a process is written from its whole trace, which says so; a
# join whose processes' sequences meet writes the later one from its whole trace.
RANGE = lib.PT_LIVE_RANGE
MAX_THREADS = lib.PT_LIVE_MAX_THREADS
PARTS_DIR = "live"
CALIBRATION_NS = 200_000_000
NOT_STARTED = "the program ended before the encoder started"
SAY_BACKLOG_BYTES = 32 << 20    # left to encode at stop: about a second or more

_requested = {"compress": None}


_writer = {}        # request()'s pieces of the .pftrace writer


def request(compress=True):
    """run -o OUT.pftrace: the run's own process encodes as it runs. The encoder's
    Python pieces are imported now, before the program starts (OUT needs them at
    its end anyway): imported at the first spill, they (queue, heapq, threading...)
    would appear in the program's sys.modules while it runs."""
    if os.environ.get("PYTRACE_CFFI_LIVE", "1") != "0":
        _requested["compress"] = compress
        _load_writer()


def _load_writer():
    if not _writer:
        from ..render import perfetto, perfetto_packets
        _writer.update(live_marks=perfetto.live_marks,
                       compress_level=perfetto_packets.COMPRESS_LEVEL)

def request_as(compress):
    """Puts back what requested_compress() said (None: not encoding)."""
    _requested["compress"] = compress


def requested():
    return _requested["compress"] is not None


def requested_compress():
    """What the processes a followed one starts are told (None: not encoding)."""
    return _requested["compress"]


def first_sequence(pid):
    return 2 + (pid & 0x3FFFFF) * RANGE


def sequence(first, index):
    """The packet sequence of thread index of the process whose first is first."""
    return lib.pt_live_sequence(first, index)


def part_prefix(directory):
    return os.path.join(directory, PARTS_DIR, "thread-")


class LiveEncoder:
    """The C encoder of one process's trace, fed by its spill hook."""

    def __init__(self, ptr, directory, min_duration_ns):
        self.ptr = ffi.cast("pt_tracer *", ptr)
        self.directory = directory
        self.min_duration_ns = min_duration_ns or 0
        self.compress = _requested["compress"]
        self.c = None
        self.ns_per_tick = None
        self.failed = None
        self.names, self.kinds, self.hidden = [], [], []
        self.given = 0
        self.annotation_names = None

    def keys(self, names, kinds, hidden):
        """The keys named at this spill (keys.jsonl's), in key order."""
        self.names += names
        self.kinds += kinds
        self.hidden += hidden

    def before_spill(self):
        """Called by the spill hook: starts the encoder once the clock's slope can
        be fixed, gives it the new keys and the blocks spilled so far."""
        if self.failed:
            return
        if self.c is None and not self._begin():
            return
        self._give()
        lib.pt_live_advance(self.c, lib.pt_spill_bytes(self.ptr))

    def abandon(self, why):
        """The spill moved, or something failed: OUT is written from the whole trace."""
        self.failed = self.failed or why
        c, self.c = self.c, None
        if c is not None:
            ffi.release(c)      # pt_live_free now

    def _begin(self):
        ticks, ns = _clock.reading()
        if _clock.USE_TSC and ns - _clock._BASELINE[1] < CALIBRATION_NS:
            return False
        ns_per_tick = _clock.ns_per_tick((ticks, ns))
        # the writer's pieces, taken at request(): importing them now would show
        # them in the program's sys.modules
        _load_writer()
        live_marks, COMPRESS_LEVEL = _writer["live_marks"], _writer["compress_level"]
        self.annotation_names, stop, start = live_marks()
        os.makedirs(os.path.join(self.directory, PARTS_DIR), exist_ok=True)
        c = lib.pt_live_new(os.fsencode(os.path.join(self.directory, "events.bin")),
                            os.fsencode(part_prefix(self.directory)),
                            first_sequence(os.getpid()),
                            COMPRESS_LEVEL if self.compress else -1,
                            lib.pt_start_ticks(self.ptr), lib.pt_start_ns(self.ptr),
                            ns_per_tick, self.min_duration_ns, stop, len(stop), start,
                            len(start))
        if c == ffi.NULL:
            self.failed = "the encoder could not start (no memory, or events.bin unreadable)"
            return False
        self.c = ffi.gc(c, lib.pt_live_free)
        keep_forks_quiet()              # its thread is one of ours
        if lib.pt_live_start(self.c) != lib.PT_OK:
            self.abandon("the encoder's thread could not start")
            return False
        self.ns_per_tick = ns_per_tick      # fixed: the trace keeps it (fixed_ns_per_tick)
        return True

    def _give(self):
        new = range(self.given, len(self.names))
        if not new:
            return
        from ..render.perfetto import _blob, key_event_bytes, key_interned_bytes
        events, event_offsets = _blob([key_event_bytes(k, self.kinds[k], None,
                                                       self.annotation_names) for k in new])
        interned, interned_offsets = _blob([key_interned_bytes(k, self.names[k]) for k in new])
        status = lib.pt_live_add_keys(self.c, events, event_offsets, interned, interned_offsets,
                                      bytes(self.hidden[k] for k in new), len(new))
        if status != lib.PT_OK:
            self.abandon("out of memory for the encoder's keys")
            return
        self.given = len(self.names)

    def finish(self, facts):
        """After the last spill (finish_spill): waits for the encoder and writes
        live.json, saying whether its parts are the trace facts describes."""
        reason = self.failed
        result = None
        if reason is None and self.c is None:
            reason = NOT_STARTED
        if reason is None:
            # keys first seen after the last spill hook are named now, as the trace names them
            n = len(self.names)
            self.keys(list(facts["names"][n:]), list(facts["key_kinds"][n:]),
                      list(facts["hidden"][n:]))
            self._give()
            result = ffi.new("pt_live_result *")
            committed = lib.pt_spill_bytes(self.ptr)
            left = lib.pt_live_backlog(self.c, committed)
            # The encoder runs niced: on a busy machine it falls behind, and its
            # last blocks took seconds before the "writing" line. Said by size, up
            # front: `run` ends at the interpreter's exit, where no thread starts.
            if left >= SAY_BACKLOG_BYTES:
                _progress._say(f"pytrace_cffi: stopping: encoding the last "
                               f"{_progress.size_text(left)} of events for the .pftrace ...")
            status = lib.pt_live_finish(self.c, committed, facts["clock"]["stop_ticks"],
                                        result)
            reason = (_why_not_whole(result, self, facts) if status == lib.PT_OK
                      else "the encoder is not this process's (a forked child)")
            self.abandon(reason or "finished")
        info = {"complete": reason is None, "reason": reason, "compressed": bool(self.compress),
                "first_sequence": first_sequence(os.getpid()),
                "threads": len(facts["threads"]), "keys": len(facts["names"])}
        try:
            with open(os.path.join(self.directory, LIVE_FILE), "w", encoding="utf-8") as f:
                json.dump(info, f)
        except OSError:
            pass            # no live.json: OUT is written from the whole trace


def _why_not_whole(result, encoder, facts):
    """None when the encoder's parts are the whole trace facts describes; else why."""
    if result.stale:
        return ("the trace has torch names or record_function args, which only the whole "
                "trace decides")
    if result.status != lib.PT_OK or not result.complete:
        return "the encoder stopped: " + stop_words(result.status, result.error_number)
    if facts["clock"]["ns_per_tick"] != encoder.ns_per_tick:
        return "the clock's slope changed"
    n = len(facts["names"])
    if (encoder.names[:n] != list(facts["names"]) or encoder.kinds[:n] != list(facts["key_kinds"])
            or encoder.hidden[:n] != list(facts["hidden"])):
        return "a function's name or hiding changed after it was first seen"
    if result.n_threads > len(facts["threads"]):
        return "more threads encoded than the trace has"
    return None


def stop_words(status, error_number=0):
    """Why the encoder stopped (pt_live_result.status), in words."""
    if status == lib.PT_ERR_LIVE_IO:
        return ("a read of the spill file (events.bin) or a write of its parts failed"
                + (f" ({os.strerror(error_number)})" if error_number else ""))
    if status == lib.PT_ERR_LIVE_THREADS:
        return (f"the process had more than {MAX_THREADS} threads and asyncio task lanes, "
                "more than a .pftrace has packet sequences for one process")
    return {lib.PT_ERR_NOMEM: "out of memory",
            lib.PT_ERR_ARG: ("the spill file (events.bin) holds a damaged block, or a "
                             "packet too large to encode"),
            lib.PT_OK: "the spill file ended before its last block"}.get(
                status, "an error this version of pytrace_cffi does not describe")


def why_not_encoded(directory):
    """Why the encoder's parts in directory were not used, for a line on the
    console, or None (they were, it never ran, or the run was too short for it)."""
    info = _live_info(directory)
    reason = info.get("reason") if isinstance(info, dict) else None
    if not isinstance(reason, str) or reason == NOT_STARTED:
        return None
    return reason[:300]


def live_parts(directory, trace, used_sequences=None):
    """For the trace's streams' encoded_parts (model/streams.py, read by
    render/perfetto.py): thread index -> (its part's
    path, its sequence id, its clock's start) when directory's live.json says its
    parts hold trace whole (and, given used_sequences, their sequences are not in
    it: they are added), else None."""
    info = _live_info(directory)
    if (not isinstance(info, dict) or info.get("complete") is not True
            or info.get("threads") != len(trace.threads) or info.get("keys") != len(trace.names)):
        return None
    first = info.get("first_sequence")
    if not isinstance(first, int) or not 2 <= first < 2 ** 31:
        return None
    ids = [sequence(first, index) for index in range(len(trace.threads))]
    if used_sequences is not None:
        if not used_sequences.isdisjoint(ids):
            return None
        used_sequences.update(ids)
    prefix = part_prefix(directory)
    parts = [(prefix + str(index), ids[index], trace.start_ns)
             for index in range(len(trace.threads))]
    for path, _, _ in parts:        # (a FIFO or a link planted there: encoded whole)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
        except FileNotFoundError:
            pass                    # a thread that made no call
        except OSError:
            return None
    return parts


def _live_info(directory):
    """live.json's object, or None: read as the job's other small files are (a
    regular file, not through a link, bounded: a FIFO there held up export)."""
    from .identity import _read_json_file
    try:
        info = _read_json_file(os.path.join(directory, LIVE_FILE))
    except (OSError, TraceFormatError):
        return None
    return info if isinstance(info, dict) else None
