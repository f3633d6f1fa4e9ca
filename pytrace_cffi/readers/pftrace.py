"""Reading back a .pftrace that pytrace_cffi wrote (render/perfetto.py) as a Trace.

    from pytrace_cffi.readers.pftrace import read_pftrace
    trace = read_pftrace("trace.pftrace")    # or formats.read, `summary`, `export`

The file is read as a stream: its Trace.packet entries a block at a time,
compressed_packets inflated a block at a time, so memory does not follow its
size. The calls are checked and counted, not kept (as for our Chrome JSON,
readers/chrome_lines.py): the trace reads a thread's calls again when the summary or
an export asks for them, in batches (pt_pfread.c), knowing each call's duration
(4 bytes a call) so the calls come whole and in start order, numbered as the JSON
numbers them. The first read keeps those durations for up to KEEP_DURATIONS_CALLS
calls in all, and what the summary's counts need (calls open at start, each
thread's span), so an export reads a thread's packets once; a thread past that
budget gets a pass of its own that finds its durations first.

What the JSON of the same trace says, the .pftrace says too, but for (see
docs/FORMAT.md): a counter sample's thread (Perfetto keeps counters per process:
read back, a sample is on its process's first thread, as is an instant made on a
thread that made no call); the split of a counter's name from its series (read
back from the track titles "<name> <series>": a sample of several series is one
mark named by their titles' longest common first words, one series named
otherwise than its counter is a counter named "<name> <series>"); text that
UTF-8 cannot hold (lone surrogates of undecodable paths, written \\udcXX); an arg
the JSON writes as a number that int64 and finite doubles cannot hold (inf, nan,
huge ints: written as their repr, read back as that text) and empty lists and
dicts (read back as {}). The .pftrace also says which calls were still open at
stop, which the JSON does not. Frames running when the trace began ("open at
start", as in the JSON) read back as such: shown, not counted as calls.

Only what our writer emits is read: a .pftrace from another tool, or one merged
with torch.profiler's events, is refused with TraceFormatError, as is anything
corrupt or hostile (bounded reads, no allocation from a length field beyond
MAX_PACKET_BYTES (16 MiB), decompression in bounded pieces).
"""
import functools
import os

from .._core import ffi, lib
from .._progress import Progress
from ..errors import TraceFormatError
from ..model.streams import CallStreams
from .chrome_events import Changed, Keys, chrome_trace, take_open_at_start
from .chrome_lines import STREAM_BATCH_SLICES, FileSource, LineThread, file_identity
from .pftrace_names import (TABLE_ANNOTATION_NAMES, TABLE_CATEGORIES, TABLE_NAMES,
                            InternedNames, SequenceNames)
from .pftrace_packets import (DOUBLE, Bad, Resumes, Stop, annotations, one, packets, parse,
                              repeated_ints, signed, text)

PROCESS_SEQUENCE = 1
SEQ_INCREMENTAL_STATE_CLEARED = 1
CLOCK_REALTIME, CLOCK_MONOTONIC = 1, 3
SEQUENCE_CLOCKS = range(64, 128)
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4
CATEGORIES = ("python_function", "user_annotation")
OPEN_AT_STOP = "open at stop"
COMPRESSED_FIELD = 50           # TracePacket.compressed_packets
# The first read keeps each call's duration (4 bytes a call) for up to this many
# calls in all, so that each export or summary after it reads a thread's packets
# once, not twice (a durations pass, then the slices); a thread past the budget
# gets its durations pass when its calls are asked for, as every thread did
# before (#34 item 5).
KEEP_DURATIONS_CALLS = 1 << 25


# --- one thread's sequence --------------------------------------------------------

class _Sequence:
    """One thread's sequence as it is read: its defaults and clock, which iids it
    interned (in C: their names are the file's, the reader's InternedNames) and
    its calls in C (pt_pf_thread)."""

    def __init__(self, reader, sequence_id, mode, calls=0, c=None):
        self.reader = reader
        self.sequence_id = sequence_id
        if c is None:
            c = ffi.gc(lib.pt_pf_thread_new(sequence_id, mode, calls), lib.pt_pf_thread_free)
            if c == ffi.NULL:
                raise MemoryError("out of memory while reading a .pftrace")
        self.c = c
        self.pos = ffi.new("uint64_t *")
        self.uuid = self.track = self.clock_id = None
        self.cleared = False
        self.clock = None               # (clock id, unit ns) once the snapshot is read
        self.names, self.categories, self.annotation_names = (
            SequenceNames(self, table)
            for table in (TABLE_NAMES, TABLE_CATEGORIES, TABLE_ANNOTATION_NAMES))

    def clear(self):
        self.cleared = True
        lib.pt_pf_interned_clear(self.c)
        self.track, self.clock_id, self.clock = None, None, None
        self.c.clock_ready = 0

    def fast(self, buf, pos):
        self.pos[0] = pos
        names = self.reader.names
        status = lib.pt_pf_read(self.c, names.c, names.line_keys, buf, len(buf), self.pos)
        return status, self.pos[0]

    def packet(self, fields):
        """A packet of this sequence that C left: its state, or a call."""
        if one(fields, 13, 0) & SEQ_INCREMENTAL_STATE_CLEARED:
            self.clear()
        elif not self.cleared:
            raise Bad("a thread's packet before its sequence's state was cleared")
        if 60 in fields:
            self.reader.thread_descriptor(self, parse(one(fields, 60, kind=bytes)))
        if 59 in fields:
            defaults = parse(one(fields, 59, kind=bytes))
            self.clock_id = one(defaults, 58, self.clock_id)
            if 11 in defaults:
                self.track = one(parse(one(defaults, 11, kind=bytes)), 11, self.track)
            self._clock_ready()
        if 12 in fields:
            self._interned(one(fields, 12, kind=bytes))
        if 6 in fields:
            self._snapshot(one(fields, 6, kind=bytes))
        if 11 in fields:
            self._event(fields)
        elif 8 in fields:
            self._time(fields)           # a timestamp moves the incremental clock anyway
        # C takes this thread's events only on its own track (else Python checks each)
        self.c.track_ready = int(self.track is not None and self.track == self.uuid)

    def _interned(self, data):
        """A packet's interned names: C's when the file knows them all (each lane's
        first packet interns the categories and annotation names again)."""
        status = lib.pt_pf_take_interned(self.c, self.reader.names.c, data, len(data))
        if status == lib.PT_OK:
            return
        if status == lib.PT_ERR_NOMEM:
            raise MemoryError("out of memory while reading a .pftrace")
        interned = parse(data)
        for table in (TABLE_CATEGORIES, TABLE_NAMES, TABLE_ANNOTATION_NAMES):
            for entry in interned.get(table, ()):
                if not isinstance(entry, bytes):
                    raise Bad("an interned entry has the wrong wire type")
                entry = parse(entry)
                iid, name = one(entry, 1, 0), text(one(entry, 2, b"", bytes))
                if self.reader.names.tables[table].get(iid) != name:
                    self.reader.writable_names().learn(table, iid, name)
                if lib.pt_pf_interned_add(self.c, table, iid) != lib.PT_OK:
                    raise MemoryError("out of memory while reading a .pftrace")

    def _snapshot(self, data):
        clock, monotonic = _sequence_clock(data)
        if clock is not None:
            self.clock = clock
            self.c.now, self.c.unit_ns = monotonic, clock[1]
        self._clock_ready()

    def _clock_ready(self):
        self.c.clock_ready = int(self.clock is not None and self.clock_id == self.clock[0])

    def _time(self, fields):
        """The packet's time in ns (CLOCK_MONOTONIC), the clock moved to it."""
        if not self.c.clock_ready:
            raise Bad("a thread's event before its clock snapshot")
        clock_id = one(fields, 58, self.clock_id)
        if clock_id != self.clock_id:
            raise Bad(f"a thread's event on clock {clock_id}")
        delta = one(fields, 8)
        if delta is None:
            raise Bad("a thread's event without a timestamp")
        ts = self.c.now + delta * self.c.unit_ns
        self.c.now = _checked_ns(ts)
        return ts

    def _event(self, fields):
        raw = one(fields, 11, kind=bytes)
        event = parse(raw)
        kind = one(event, 9)
        track = one(event, 11, self.track)
        if track is None or track != self.uuid:
            raise Bad("a thread's event is not on its thread's track")
        before = self.c.now
        ts = self._time(fields)
        self.c.now = before                      # pt_pf_begin/end check the order
        if kind == TYPE_SLICE_END:
            # an end says no more than that it ends, or that its call was open at stop
            if set(event) - {9, 11, 4} or (4 in event and annotations(
                    event, self.annotation_names) != {OPEN_AT_STOP: True}):
                raise Bad("a slice end says more than that it ends")
            flags = lib.PT_SLICE_OPEN_AT_STOP if 4 in event else 0
            self.reader.check(lib.pt_pf_end(self.c, ts, flags), self)
            return
        if kind != TYPE_SLICE_BEGIN:
            raise Bad(f"a thread's event of type {kind}: not a slice begin or end")
        if 10 in event:
            iid = one(event, 10)
            if iid not in self.names:
                raise Bad(f"event name {iid} is not interned")
            name = self.names[iid]
        elif 23 in event:
            name = text(one(event, 23, kind=bytes))
        else:
            raise Bad("a slice without a name")
        categories = [self.categories.get(iid) for iid in repeated_ints(event, 3)]
        categories += [text(c) for c in event.get(22, ())]
        if len(categories) != 1 or categories[0] not in CATEGORIES:
            raise Bad(f"a slice of categories {categories!r}: not pytrace_cffi's "
                      f"(a trace merged with torch.profiler's cannot be read back)")
        args = annotations(event, self.annotation_names)
        open_at_stop = args.get(OPEN_AT_STOP) is True
        if open_at_stop:
            del args[OPEN_AT_STOP]
        opened = take_open_at_start(categories[0], args)     # as the JSON readers do
        keys = self.reader.keys
        key = keys.key(name, categories[0], args or None)
        flags = ((lib.PT_SLICE_C if keys.kinds[key] == "c" else 0)
                 | (lib.PT_SLICE_OPEN_AT_STOP if open_at_stop else 0) | opened)
        if raw[:2] == b"\x48\x01" and len(raw) - 2 < 2 ** 32:
            self.reader.writable_names().add_line_key(raw[2:], key, flags)
        self.reader.check(lib.pt_pf_begin(self.c, ts, key, flags), self)


@functools.lru_cache(maxsize=16)
def _sequence_clock(data):
    """(the sequence's incremental clock (id, unit), or None; CLOCK_MONOTONIC's ns
    at the snapshot) of a thread's ClockSnapshot bytes. Parsed once for a file:
    each of a thousand lanes' snapshots is most often the same bytes."""
    clocks = {}
    for entry in parse(data).get(1, ()):
        entry = parse(entry if isinstance(entry, bytes) else b"")
        clocks[one(entry, 1, 0)] = (one(entry, 2, 0), one(entry, 3, 0),
                                    one(entry, 4, 0) or 1)
    if CLOCK_MONOTONIC not in clocks:
        raise Bad("a thread's clock snapshot does not give CLOCK_MONOTONIC")
    monotonic = clocks[CLOCK_MONOTONIC][0]
    clock = None
    for clock_id, (_, incremental, unit) in clocks.items():
        if clock_id in SEQUENCE_CLOCKS:
            if not incremental or unit > 10 ** 9:
                raise Bad(f"clock {clock_id} is not an incremental clock as we write them")
            clock = (clock_id, unit)
            monotonic = _checked_ns(monotonic)
    return clock, monotonic


def _checked_ns(value):
    if not -(1 << 63) <= value < 1 << 63:
        raise Bad("a time is out of range")
    return value


# --- the whole file -----------------------------------------------------------------

class _Reader:
    """What packets() and a _Sequence need of the reader: C's statuses turned into
    exceptions (fault: the reader's own for a bad call)."""

    def failed(self, status):
        self.check(status, self.sequence)

    def check(self, status, sequence):
        if status == lib.PT_OK:
            return
        if status == lib.PT_ERR_NOMEM:
            raise MemoryError("out of memory while reading a .pftrace")
        self.fault(status, sequence)


class _Scan(_Reader):
    """The first read: the trace's facts, processes, counters and marks (sequence
    1), every thread's sequence checked and counted, where each begins."""

    def __init__(self, path):
        self.path = path
        self.keys = Keys()
        self.names = InternedNames()      # every sequence's; the replays' too
        self.sequence = None              # the thread being read
        self.done = set()                 # sequence ids read
        self.threads, self.stats, self.digests, self.starts, self.sequence_ids = \
            [], [], [], [], []
        self.open_at_start, self.spans = [], []     # per thread, as _PftraceStreams'
        self.kept = []                    # per thread: its C reader with its durations, or None
        self.keep_budget = KEEP_DURATIONS_CALLS
        self.thread_uuids = {}            # uuid -> thread index
        self.processes = {}               # process track uuid -> (pid, name)
        self.counters = {}                # counter track uuid -> (title, parent uuid)
        self.facts = None
        self.raw_marks = []               # (kind, ns, track uuid, name, args or value)
        self.process_state = False        # sequence 1's state cleared
        self.location = None

    # reader interface of packets
    def fast(self, buf, pos):
        if self.sequence is None:
            return lib.PT_PF_PYTHON, pos
        return self.sequence.fast(buf, pos)

    def full(self):
        return False

    def writable_names(self):
        return self.names

    def fault(self, status, sequence):
        where = f"thread {len(self.threads) - 1}: call {sequence.c.n}"
        if status == lib.PT_ERR_STATE:
            raise Changed(f"{where} is not as the first read found it")
        raise Bad(f"{where}: its time goes back, a slice ends that did not begin, or "
                  f"slices nest over a million deep")

    def packet(self, data, location):
        fields = parse(data)
        if COMPRESSED_FIELD in fields:
            raise Bad("compressed packets inside compressed packets")
        sequence_id = one(fields, 10)
        if not sequence_id:
            raise Bad("a packet without its sequence id")
        if sequence_id == PROCESS_SEQUENCE:
            if self.threads:
                raise Bad("the process's packets after the threads': not as pytrace_cffi "
                          "writes a .pftrace")
            self.process_packet(fields)
            return
        if self.sequence is None or sequence_id != self.sequence.sequence_id:
            self.end_thread()
            if sequence_id in self.done:
                raise Bad(f"sequence {sequence_id} resumes after another: not as "
                          f"pytrace_cffi writes a .pftrace")
            if not one(fields, 13, 0) & SEQ_INCREMENTAL_STATE_CLEARED or 60 not in fields:
                raise Bad(f"sequence {sequence_id} is no thread's as pytrace_cffi writes them "
                          f"(a .pftrace of another tool, or merged with torch.profiler's "
                          f"events, is not read back)")
            self.sequence = _Sequence(self, sequence_id, lib.PT_PF_SCAN, self.keep_budget)
            self.location = location
        self.sequence.packet(fields)

    def thread_descriptor(self, sequence, descriptor):
        thread = one(descriptor, 4, kind=bytes)
        uuid = one(descriptor, 1)
        if thread is None or not uuid or sequence.uuid is not None:
            raise Bad("a thread's sequence describes a track that is not its thread's")
        thread = parse(thread)
        from ..model.trace import ThreadInfo
        index = len(self.threads)
        if uuid in self.thread_uuids or uuid in self.processes:
            raise Bad(f"track {uuid} is described twice")
        sequence.uuid = uuid
        self.thread_uuids[uuid] = index
        pid = signed(one(thread, 1, 0))
        self.threads.append(ThreadInfo(index, one(thread, 2, 0), 0,
                                       text(one(thread, 5, b"", bytes)), 0, 0, pid))
        self.starts.append(self.location)
        self.sequence_ids.append(sequence.sequence_id)

    def end_thread(self):
        sequence, self.sequence = self.sequence, None
        if sequence is None:
            return
        if sequence.uuid is None:
            raise Bad(f"sequence {sequence.sequence_id} has no thread track")
        c = sequence.c
        if c.n_open:
            raise Bad(f"thread {len(self.threads) - 1}: {c.n_open} slices begin and never "
                      f"end")
        self.stats.append((c.n, c.open_at_stop, c.max_depth))
        if lib.pt_pf_thread_kept(c):
            self.kept.append(c)
            self.keep_budget -= c.n
        else:
            self.kept.append(None)
        self.open_at_start.append(c.open_at_start)
        self.spans.append((c.first_start, c.last_root_end) if c.n else None)
        self.digests.append(c.digest)
        self.done.add(sequence.sequence_id)

    # sequence 1: the process, its counters, the facts and the marks
    def process_packet(self, fields):
        if one(fields, 13, 0) & SEQ_INCREMENTAL_STATE_CLEARED:
            self.process_state = True
        if 60 in fields:
            self.process_descriptor(parse(one(fields, 60, kind=bytes)))
        if 59 in fields:
            clock = one(parse(one(fields, 59, kind=bytes)), 58)
            if clock not in (None, CLOCK_MONOTONIC):
                raise Bad(f"the process's events on clock {clock}")
        if 11 in fields:
            if not self.process_state:
                raise Bad("an event before the process's state was cleared")
            self.process_event(fields)

    def process_descriptor(self, descriptor):
        uuid = one(descriptor, 1, 0)
        if uuid in self.processes or uuid in self.counters:
            raise Bad(f"track {uuid} is described twice")
        if 3 in descriptor:
            process = parse(one(descriptor, 3, kind=bytes))
            self.processes[uuid] = (signed(one(process, 1, 0)),
                                    text(one(process, 6, b"", bytes)))
        elif 8 in descriptor:
            self.counters[uuid] = (text(one(descriptor, 2, b"", bytes)), one(descriptor, 5))
        elif uuid:
            raise Bad(f"track {uuid} is neither a process, a thread nor a counter")

    def process_event(self, fields):
        event = parse(one(fields, 11, kind=bytes))
        if one(fields, 58, CLOCK_MONOTONIC) != CLOCK_MONOTONIC or 8 not in fields:
            raise Bad("a process event not on CLOCK_MONOTONIC")
        ns = _checked_ns(one(fields, 8))
        kind, track = one(event, 9), one(event, 11)
        if kind == TYPE_INSTANT:
            name = text(one(event, 23, b"", bytes))
            args = annotations(event)
            if self.facts is None:
                if name != "pytrace_cffi" or args.get("generator") != "pytrace_cffi":
                    raise Bad("not written by pytrace_cffi (its facts are missing)")
                self.facts = args
                return
            self.raw_marks.append(("i", ns, track, name, args))
        elif kind == TYPE_COUNTER:
            if track not in self.counters:
                raise Bad(f"a counter value on track {track}, which is no counter")
            if 30 in event:
                value = signed(one(event, 30))
            elif 44 in event:
                value = DOUBLE.unpack(one(event, 44).to_bytes(8, "little"))[0]
            else:
                raise Bad("a counter event without a value")
            self.raw_marks.append(("C", ns, track, None, value))
        else:
            raise Bad(f"a process event of type {kind}")

    # the trace
    def finish(self):
        self.end_thread()
        if self.facts is None:
            raise Bad("not written by pytrace_cffi (its facts are missing)")
        self.keys.frozen = True

    def trace(self, source):
        other = self.facts
        listed = other.get("processes")
        lanes = {}
        if listed is not None:
            if not isinstance(listed, list) or not all(isinstance(p, dict) for p in listed):
                raise Bad("the facts' processes must be a list of objects")
            if not all(type(entry.get("pid")) is int for entry in listed):
                raise Bad("each of the facts' processes needs an integer pid")
            lanes = {entry["pid"]: {"label": entry.get("label", ""), "sort_index": rank}
                     for rank, entry in enumerate(listed)}
            pid = None
        elif len(self.processes) == 1:
            pid = next(iter(self.processes.values()))[0]
        else:
            raise Bad(f"{len(self.processes)} process tracks in the trace of one process")
        streams = _PftraceStreams(self, source)
        trace = chrome_trace(self.path, other, self.keys, self.threads, None, self.marks(),
                             pid, lanes, streams=streams, build_slices=streams.table)
        return trace

    def marks(self):
        """(kind, ns after the start, tid, name, args) per mark, counters grouped."""
        start = self.facts.get("start_monotonic_ns")
        if type(start) is not int:
            start = 0                       # chrome_trace says what is wrong
        pid_of_uuid = {uuid: pid for uuid, (pid, _) in self.processes.items()}
        first_tid = {}
        for thread in self.threads:
            first_tid.setdefault(thread.pid, thread.native_id)

        def tid_of(track, process_uuid):
            if track in self.thread_uuids:
                return self.threads[self.thread_uuids[track]].native_id
            pid = pid_of_uuid.get(process_uuid)
            return first_tid.get(pid, pid if pid is not None else 0)

        out, run = [], []
        for mark in self.raw_marks + [None]:
            if run and (mark is None or mark[0] != "C" or mark[1] != run[0][1]
                        or self.counters[mark[2]][1] != self.counters[run[0][2]][1]):
                out.extend(_counter_marks(run, self.counters, tid_of, start))
                run = []
            if mark is None:
                break
            kind, ns, track, name, args = mark
            if kind == "C":
                run.append(mark)
            else:
                out.append(("i", ns - start, tid_of(track, track), name, args))
        return out


def _counter_marks(run, counters, tid_of, start):
    """Counter samples of one moment and process as marks: one mark for several
    series whose titles share first words ("memory rss", "memory heap": memory),
    else one per title."""
    titles = [counters[track][0] for _, _, track, _, _ in run]
    parent = counters[run[0][2]][1]
    tid = tid_of(None, parent)
    ns = run[0][1] - start
    prefix = _common_words(titles) if len(titles) > 1 else None
    if prefix:
        return [("C", ns, tid, prefix, {title[len(prefix) + 1:]: value
                                        for title, (_, _, _, _, value) in zip(titles, run)})]
    return [("C", ns, tid, title, {title: value})
            for title, (_, _, _, _, value) in zip(titles, run)]


def _common_words(titles):
    """The longest run of first words (up to a space) that every title continues."""
    first = titles[0]
    cut = first.rfind(" ")
    while cut > 0:
        prefix = first[:cut + 1]
        if all(t.startswith(prefix) and len(t) > len(prefix) for t in titles):
            return first[:cut]
        cut = first.rfind(" ", 0, cut)
    return None


class _Replay(_Reader):
    """One thread's sequence read again (durations, then slices pass)."""

    def __init__(self, scan, index):
        self.scan, self.index, self.sequence = scan, index, None
        self.keys = scan.keys
        self.names = scan.names   # read by C, not changed (other walks may be reading it)
        self.kept = None          # the scan's C reader with the thread's durations

    def fast(self, buf, pos):
        return self.sequence.fast(buf, pos)

    def full(self):
        out = self.sequence.c.out
        return out != ffi.NULL and out.count == out.cap

    def writable_names(self):
        """The names to change: a copy of the scan's, the first time (the file
        changed since, or iids meant other names in other threads)."""
        if self.names is self.scan.names:
            self.names = self.names.copy()
        return self.names

    def fault(self, status, sequence):
        raise Changed(f"thread {self.index} has other calls")

    def packet(self, data, location):
        fields = parse(data)
        sequence_id = one(fields, 10)
        if sequence_id != self.sequence.sequence_id:
            raise Stop
        self.sequence.packet(fields)

    def release(self):
        """Frees the thread's durations now (not when a collection finds the
        sequence and this reader, which refer to each other)."""
        if self.sequence is not None:
            if self.sequence.c is not self.kept:
                ffi.release(self.sequence.c)
            self.sequence.reader = self.sequence = None

    def thread_descriptor(self, sequence, descriptor):
        uuid = one(descriptor, 1)
        if sequence.uuid is not None or self.scan.thread_uuids.get(uuid) != self.index:
            raise Changed(f"thread {self.index} has another track")
        sequence.uuid = uuid


class _PftraceStreams(CallStreams):
    """The calls of a .pftrace read back, a thread at a time, when an export or
    the summary asks for them (the trace's _streams): a pass that keeps each
    call's duration, then one that hands out whole calls in start order, in
    batches of STREAM_BATCH_SLICES. A file that changed since the first read
    raises TraceFormatError."""

    def __init__(self, scan, source):
        self.stats = scan.stats
        # What the summary would otherwise read every call again for (the scan's,
        # per thread): the calls running when the trace began (calls_begun), and
        # (first call's start, last root call's end) or None with no call
        # (process_totals).
        self.open_at_start = scan.open_at_start
        self.spans = scan.spans
        self._kept = scan.kept
        self._scan = scan
        self.where = f"{scan.path}: "         # for table()
        self._source = source
        self._resumes = Resumes()
        import weakref
        weakref.finalize(self, source.close)

    def slices(self, index):
        """Thread index's slices in start order: yields (pt_slice *, n, index of the
        first), each batch valid until the next is asked for."""
        n = self.stats[index][0]
        if not n:
            return
        scan, path = self._scan, self._scan.path
        replay = _Replay(scan, index)
        kept, self._kept[index] = self._kept[index], None     # one walk at a time has it
        try:
            self._source.check()
            if kept is not None:
                replay.kept = kept
                sequence = replay.sequence = _Sequence(replay, scan.sequence_ids[index],
                                                       None, c=kept)
            else:
                sequence = replay.sequence = _Sequence(replay, scan.sequence_ids[index],
                                                       lib.PT_PF_DURATIONS, n)
                for _ in packets(self._source.open(), scan.starts[index], replay,
                                 self._resumes):
                    raise AssertionError("the durations pass hands out no batch")
                self._same(sequence, index, sequence.c.digest)
            thread = LineThread(index, 0, "", 0, 0, min(n, STREAM_BATCH_SLICES))
            thread.state.limit = n
            if lib.pt_pf_thread_slices(sequence.c, thread.state) != lib.PT_OK:
                raise Changed(f"thread {index} has other calls")
            sequence.uuid = None
            first = 0
            for _ in packets(self._source.open(), scan.starts[index], replay, self._resumes):
                count = thread.state.count
                yield thread.batch, count, first
                first += count
                thread.state.count = 0
            self._same(sequence, index, thread.state.digest)
            if thread.state.count:
                yield thread.batch, thread.state.count, first
        except Changed as exc:
            raise TraceFormatError(f"{path}: changed since it was read ({exc.args[0]})") \
                from None
        except Bad as exc:
            raise TraceFormatError(f"{path}: changed since it was read ({exc})") from None
        except OSError as exc:
            raise TraceFormatError(f"{path}: cannot read ({exc})") from None
        finally:
            if replay.kept is not None:
                self._kept[index] = replay.kept     # its durations, for the next walk
            replay.release()

    def _same(self, sequence, index, digest):
        c = sequence.c
        if c.n_open or c.n != self.stats[index][0] or digest != self._scan.digests[index]:
            raise Changed(f"thread {index} has other calls")


def read_pftrace(path):
    """The Trace in a .pftrace pytrace_cffi wrote: checked and counted, its calls
    read again when asked for (see the module's doc). TraceFormatError for
    anything else."""
    path = os.fspath(path)
    raw_file = None
    try:
        raw_file = open(path, "rb")
        identity = file_identity(os.fstat(raw_file.fileno()))
        scan = _Scan(path)
        with Progress(f"reading {path}", os.path.getsize(path)) as progress:
            for _ in packets(_Progressed(raw_file, progress), (0, -1), scan):
                raise AssertionError("the first read hands out no batch")
        scan.finish()
        trace = scan.trace(FileSource(path, raw_file, identity))
        raw_file = None                       # the trace's now
        return trace
    except Bad as exc:
        raise TraceFormatError(f"{path}: {exc}") from None
    except Changed as exc:
        raise TraceFormatError(f"{path}: {exc.args[0]}") from None
    except FileNotFoundError:
        raise TraceFormatError(f"{path!r} does not exist") from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc})") from None
    finally:
        if raw_file is not None:
            raw_file.close()


class _Progressed:
    """A file whose reads advance a Progress by the bytes read."""

    def __init__(self, raw, progress):
        self.raw, self.progress = raw, progress
        self.done = 0

    def seek(self, offset):
        self.raw.seek(offset)

    def read(self, size):
        data = self.raw.read(size)
        position = self.raw.tell()
        if position > self.done:
            self.progress.advance(position - self.done)
            self.done = position
        return data
