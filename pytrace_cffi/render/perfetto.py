"""Perfetto TrackEvent protobuf renderer (.pftrace): Perfetto's native format.

Much smaller than Chrome JSON (about 24 bytes per call, 2.5-3.5 with the default
deflate-compressed packets, against ~195) and loaded by ui.perfetto.dev with far less memory.
Encoded here without a protobuf library; field numbers are those of
perfetto/protos/perfetto/trace/*.proto.

Layout:
- sequence 1: the process track (pid), a counter track per counter series, the
  trace's facts (what Chrome JSON keeps in otherData: generator, python, backend,
  clock, start/stop ns, dropped events) as debug annotations of a "pytrace_cffi"
  instant on the process track at the start, then the instants (on their
  thread's track) and counter values, all stamped with absolute CLOCK_MONOTONIC
  nanoseconds;
- one sequence per thread: its track (ThreadDescriptor pid, tid, name), packet
  defaults (clock, track), a clock snapshot mapping the sequence's incremental
  clock onto CLOCK_MONOTONIC at the trace's start (or at the thread's first call
  when that is earlier), the interned categories
  (python_function, user_annotation) and annotation names, then the calls as
  SLICE_BEGIN/SLICE_END with delta timestamps, encoded in C
  (c_src/pt_perfetto.c), event names interned on first use. Extra args of a key
  (e.g. "Python module id") are debug annotations of its begins; a call still
  open at stop carries "open at stop": true, a frame already running when the
  trace began (seeded at start(), a forked child's frames continued from its
  parent) "open at start": true.

A call's "Python id" and "Python parent id" of the JSON are implicit here: the
calls' begin order (thread by thread) and their nesting.
"""
import os

from .._core import ffi, lib
from .._files import replaced_atomically
from .._progress import Progress
from ..errors import TraceFormatError
from .perfetto_packets import (CLOCK_MONOTONIC, CLOCK_REALTIME, COMPRESSED_INPUT_BYTES,
                               SEQ_INCREMENTAL_STATE_CLEARED, TYPE_COUNTER, TYPE_INSTANT,
                               AnnotationNames, PacketSink, counter_value, packet)
from .protobuf import bytes_field as _bytes, int_field as _int
from ..model.walk import dropped_by_thread, warn_if_too_deep

CHUNK_BYTES = 4 << 20
PROCESS_SEQUENCE = 1
SEQUENCE_CLOCK = 64                 # sequence-scoped clock ids are 64..127
CATEGORIES = ("python_function", "user_annotation")     # iids 1 and 2
_CATEGORY_IID = {"python": 1, "c": 1, "annotation": 2}
OPEN_AT_STOP = "open at stop"
OPEN_AT_START = "open at start"


# --- the file ----------------------------------------------------------------

def _uuid_base(trace):
    """Track uuids of this trace: distinct from another trace's when merged."""
    return ((trace.pid << 40) ^ trace.start_ns) & ((1 << 62) - 1) | 1 << 62


ORDERING_EXPLICIT = 1     # TrackDescriptor ProcessOrdering / ThreadOrdering EXPLICIT
CHILD_ORDERING_EXPLICIT = 3   # TrackDescriptor ChildTracksOrdering EXPLICIT


def track_descriptors(processes, threads, single_name="python"):
    """TrackDescriptor bodies (what TracePacket field 60 holds) of the process and
    thread tracks: {"root": ..., "processes": [...], "threads": [...]}.

    processes: (uuid, pid, label, rank) per process; label None for the trace of
    one process (named single_name: the program, "python" when not known), rank
    its place among the processes.
    threads: (uuid, process uuid, pid, tid, name, rank) per thread.
    With several processes, Perfetto's UI orders process tracks by their
    sibling_order_rank (and threads by theirs) only when the root descriptor
    (uuid 0) says process_ordering/thread_ordering EXPLICIT: "root" is that
    descriptor then, and b"" for one process (whose file stays as it was)."""
    several = any(label is not None for _, _, label, _ in processes)
    out = {"root": (_int(1, 0) + _int(19, ORDERING_EXPLICIT) + _int(20, ORDERING_EXPLICIT))
           if several else b"", "processes": [], "threads": []}
    for uuid, pid, label, rank in processes:
        if label is None:
            out["processes"].append(_int(1, uuid) + _bytes(3, _int(1, pid)
                                                            + _bytes(6, single_name)))
        else:
            out["processes"].append(_int(1, uuid) + _bytes(3, _int(1, pid) + _bytes(6, label))
                                    + _int(11, CHILD_ORDERING_EXPLICIT) + _int(12, rank))
    for uuid, parent, pid, tid, name, rank in threads:
        out["threads"].append(_int(1, uuid) + _int(5, parent)
                              + _bytes(4, _int(1, pid) + _int(2, tid) + _bytes(5, name))
                              + (_int(12, rank) if several else b""))
    return out


def _process_sequence(trace, uuids):
    """Sequence 1's packets: process and counter tracks, the trace's facts, marks."""
    seq = _int(10, PROCESS_SEQUENCE)
    base = trace.start_ns
    # Trace time is CLOCK_MONOTONIC, as in the JSON, from the file's first packet on;
    # the realtime anchor, when the trace has one, maps it onto CLOCK_REALTIME too.
    clocks = _bytes(1, _int(1, CLOCK_MONOTONIC) + _int(2, base))
    anchor = (trace.realtime_anchor or {}).get("start")
    if anchor:
        realtime = anchor["realtime_ns"] + (base - anchor["monotonic_ns"])
        clocks += _bytes(1, _int(1, CLOCK_REALTIME) + _int(2, realtime))
    yield packet(_bytes(6, clocks + _int(2, CLOCK_MONOTONIC)), seq)
    descriptors = uuids["descriptors"]
    yield packet(_bytes(60, descriptors["processes"][0]),
                 _int(13, SEQ_INCREMENTAL_STATE_CLEARED),
                 _bytes(59, _int(58, CLOCK_MONOTONIC)), seq)
    if descriptors["root"]:
        yield packet(_bytes(60, descriptors["root"]), seq)
    for descriptor in descriptors["processes"][1:]:
        yield packet(_bytes(60, descriptor), seq)
    for (pid, name, series), uuid in uuids["counters"].items():
        title = name if series == name else f"{name} {series}"
        parent = uuids["process_of_pid"].get(pid, uuids["process"])
        yield packet(_bytes(60, _int(1, uuid) + _int(5, parent) + _bytes(2, title)
                            + _bytes(8, b"")), seq)
    facts = {"generator": "pytrace_cffi", "python": trace.python_version,
             "backend": trace.backend, "clock": trace.clock,
             "start_monotonic_ns": base, "stop_monotonic_ns": trace.stop_ns,
             "dropped_events": trace.dropped_events, "realtime_anchor": trace.realtime_anchor}
    facts.update(dropped_by_thread(trace))
    if trace.processes:
        facts["processes"] = [dict(info, pid=pid) for pid, info in trace.processes.items()]
    if trace.label is not None:
        facts["label"] = trace.label
    yield packet(_int(8, base), _bytes(11, _int(9, TYPE_INSTANT) + _int(11, uuids["process"])
                                       + _bytes(23, "pytrace_cffi")
                                       + AnnotationNames.plain(facts)), seq)
    for mark in trace.marks:
        if mark.kind == "i":
            track = uuids["tids"].get(mark.thread, uuids["process"])
            event = (_int(9, TYPE_INSTANT) + _int(11, track) + _bytes(23, mark.name)
                     + (AnnotationNames.plain(mark.args)
                        if isinstance(mark.args, dict) else b""))
            yield packet(_int(8, mark.ns), _bytes(11, event), seq)
        else:
            for series, value in mark.args.items():
                track = uuids["counters"][(uuids["pid_of_tid"].get(mark.thread, trace.pid),
                                           mark.name, series)]
                yield packet(_int(8, mark.ns), _bytes(11, _int(9, TYPE_COUNTER) + _int(11, track)
                                                      + counter_value(value)), seq)


def _thread_head(descriptor, uuid, sequence_id, interned_head, clock_ns):
    """A thread sequence's first packets: its track (descriptor: the
    TrackDescriptor body), defaults, the clock mapping (sequence clock =
    CLOCK_MONOTONIC at clock_ns, in ns) and the interned categories and
    annotation names."""
    seq = _int(10, sequence_id)
    descriptor = _bytes(60, descriptor)
    defaults = _bytes(59, _int(58, SEQUENCE_CLOCK) + _bytes(11, _int(11, uuid)))
    head = packet(descriptor, _int(13, SEQ_INCREMENTAL_STATE_CLEARED), defaults,
                  _bytes(12, interned_head), seq)
    clocks = (_bytes(1, _int(1, SEQUENCE_CLOCK) + _int(2, clock_ns) + _int(3, 1)
                     + _int(4, 1))
              + _bytes(1, _int(1, CLOCK_MONOTONIC) + _int(2, clock_ns))
              + _int(2, CLOCK_MONOTONIC))        # primary_trace_clock
    return head + packet(_bytes(6, clocks), seq)


def _blob(parts):
    """parts joined, with the padding the C side's fixed-size copies read past
    the last one, and the offsets of each part (len(parts) + 1 of them)."""
    offsets = [0]
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    blob = ffi.new("char[]", b"".join(parts) + bytes(lib.PT_PF_BLOB_PADDING))
    return blob, ffi.new("uint32_t[]", offsets)


def track_uuids(trace, uuids):
    """Fills uuids with the tracks' uuids ("process_of_pid", "tids", "next_uuid",
    ...) and TrackDescriptor bodies ("descriptors") of trace."""
    base_uuid = _uuid_base(trace)
    uuids.update(process=base_uuid, threads=[], tids={}, counters={})
    for index, thread in enumerate(trace.threads):
        uuid = base_uuid + 1 + index
        uuids["threads"].append(uuid)
        uuids["tids"].setdefault(thread.native_id, uuid)
        uuids["tids"].setdefault(thread.native_id or thread.ident, uuid)
    next_uuid = base_uuid + 1 + len(trace.threads)
    # A counter track per process, name and series, under its process's track.
    uuids["pid_of_tid"] = pid_of_tid = {}
    for thread in trace.threads:
        pid_of_tid.setdefault(thread.native_id, trace.thread_pid(thread))
    for mark in trace.marks:
        if mark.kind == "C":
            for series in mark.args:
                key = (pid_of_tid.get(mark.thread, trace.pid), mark.name, series)
                if key not in uuids["counters"]:
                    uuids["counters"][key] = next_uuid
                    next_uuid += 1
    # One process track per process (the trace's own first).
    labels = {trace.pid: None}
    if trace.processes:
        # A lane whose pid is not the OS pid (processes._lane_ids) says which it is.
        labels = {pid: str(info.get("label", f"pid {pid}"))
                  + (f" ({trace.process_id_text(pid)})" if "os_pid" in info else "")
                  for pid, info in trace.processes.items()}
        labels.setdefault(trace.pid, f"pid {trace.pid}")
    process_uuids = {trace.pid: base_uuid}
    for pid in labels:
        if pid not in process_uuids:
            process_uuids[pid] = next_uuid
            next_uuid += 1
    ranks = {pid: rank for rank, pid in enumerate(labels)}
    uuids["process_of_pid"] = process_uuids
    uuids["next_uuid"] = next_uuid
    uuids["descriptors"] = track_descriptors(
        [(uuid, pid, labels[pid], ranks[pid]) for pid, uuid in process_uuids.items()],
        [(uuids["threads"][index], process_uuids.get(trace.thread_pid(thread), base_uuid),
          trace.thread_pid(thread), thread.native_id or thread.ident, thread.name, index)
         for index, thread in enumerate(trace.threads)],
        single_name=trace.label or "python")


def key_event_bytes(key, kind, args, annotation_names):
    """What a begin of key says (TrackEvent name_iid (10), category_iids (3), the
    key's args as debug annotations)."""
    return (_int(10, key + 1) + _int(3, _CATEGORY_IID[kind])
            + (annotation_names.annotations(args) if args else b""))


def key_interned_bytes(key, name):
    """key's InternedData event_names (2) entry."""
    return _bytes(2, _int(1, key + 1) + _bytes(2, name))


def interned_head(annotation_names):
    """A thread sequence's first interned data: the categories and annotation names."""
    return (b"".join(_bytes(1, _int(1, iid) + _bytes(2, name))
                     for iid, name in enumerate(CATEGORIES, 1))
            + annotation_names.interned())


def _chunks(trace, progress, chunk_bytes, uuids=None, own_batches=None):
    """The file's packets in pieces of at most about chunk_bytes (bytes, or a view
    of the C side's buffer that the next piece overwrites). uuids: a dict that
    gets the tracks' uuids ("process_of_pid", "tids", "next_uuid") as soon as
    they are made. own_batches(index): a thread's slices in start order as
    batches of (pt_slice *, n, index of the first) to write instead of its own
    (None: its own)."""
    uuids = {} if uuids is None else uuids
    track_uuids(trace, uuids)
    yield b"".join(_process_sequence(trace, uuids))
    annotation_names = AnnotationNames()

    # Per key, encoded once: TrackEvent name_iid (10), category_iids (3) and the
    # key's args as debug annotations; the InternedData event_names (2) entry.
    events, interned = [], []
    for key, (name, kind) in enumerate(zip(trace.names, trace.key_kinds)):
        events.append(key_event_bytes(key, kind, trace.key_args.get(key), annotation_names))
        interned.append(key_interned_bytes(key, name))
    marks = _OpenMarks(annotation_names)
    head = interned_head(annotation_names)
    n_keys = len(events)
    event_blob, event_offsets = _blob(events)
    interned_blob, interned_offsets = _blob(interned)
    interned_done = ffi.new("uint8_t[]", max(1, n_keys))
    # Room for the biggest packet, whatever chunk_bytes says.
    cap = max(chunk_bytes, 2 * (max(map(len, events), default=0)
                                + max(map(len, interned), default=0)
                                + max(map(len, marks.blobs))) + 1024)
    out = ffi.new("char[]", cap)
    written = ffi.new("uint64_t *")

    encode = dict(events=event_blob, event_offsets=event_offsets, interned=interned_blob,
                  interned_offsets=interned_offsets, interned_done=interned_done, n_keys=n_keys,
                  marks=marks.pointers, mark_lens=marks.lens, out=out, cap=cap,
                  written=written, progress=progress)
    # From the events, records as the walk finalizes them; else (a slice table, or
    # a trace streaming whole slices: a loaded slices.bin, a joined job) slices in
    # start order, begun and ended in time order in C.
    streams = trace._streams          # a model.streams.CallStreams, or None
    records = streams is not None and not trace.slices_built()
    counts = list(trace.thread_counts())
    depths = [depth for _, _, _, depth in counts]
    from ..model.walk import batches as thread_batches
    encoded = streams is not None and own_batches is None
    live_head = None
    for index, thread in enumerate(trace.threads):
        part = streams.encoded_part(index) if encoded else None
        if part is not None:
            # encoded while its process ran (follow/live.py): its head, then the part
            if live_head is None:
                live_head = interned_head(live_marks()[0])
            path, sequence_id, clock_ns = part
            yield _thread_head(uuids["descriptors"]["threads"][index], uuids["threads"][index],
                               sequence_id, live_head, clock_ns)
            yield Part(path)
            progress.advance(counts[index][1])
            continue
        sequence_id = PROCESS_SEQUENCE + 1 + index
        batches = own_batches(index) if own_batches is not None else None
        from_records = False
        if batches is None and records:
            batches = streams.records(index)        # None: the streams hand out slices
            from_records = batches is not None
        if batches is None:
            batches = thread_batches(trace, index)
        batches = iter(batches)
        first = next(batches, None)
        # The sequence's clock starts at the trace's start, or at its first call if
        # that is earlier (a loaded trace's clock may say so): deltas are never negative.
        clock_ns = trace.start_ns
        if first is not None:
            clock_ns = min(clock_ns, first[0][0].ts if from_records else first[0][0].start)
        yield _thread_head(uuids["descriptors"]["threads"][index], uuids["threads"][index],
                           sequence_id, head, clock_ns)
        ffi.memmove(interned_done, bytes(max(1, n_keys)), max(1, n_keys))
        if first is None:
            continue
        steps = (_record_steps if from_records else _slice_steps)(
            first, batches, thread, sequence_id, clock_ns, depths[index], encode)
        yield from _filled(steps, encode)


class _OpenMarks:
    """The debug annotations of a call open at start (on its begin) and of one
    open at stop (on its end), indexed as pt_pftrace_slices reads them
    (PT_PF_MARK_*)."""

    def __init__(self, annotation_names):
        stop = annotation_names.annotations({OPEN_AT_STOP: True})
        start = annotation_names.annotations({OPEN_AT_START: True})
        self.blobs = [b""] * 3
        self.blobs[lib.PT_PF_MARK_OPEN_AT_STOP] = stop
        self.blobs[lib.PT_PF_MARK_OPEN_AT_START] = start
        self.pointers = ffi.new("char *[]", [ffi.from_buffer(b) for b in self.blobs])
        self.lens = ffi.new("uint32_t[]", [len(b) for b in self.blobs])


class Part:
    """A file of whole Trace.packet entries (a live part, perhaps of
    compressed_packets) to copy into the file as it is, outside any
    compressed_packets of the writer's own."""

    def __init__(self, path):
        self.path = path

    def copy_to(self, out):
        import shutil
        from .._safe_read import open_binary
        try:        # (a regular file, not through a link: see follow/live.live_parts)
            part, _ = open_binary(self.path)
        except FileNotFoundError:
            return                  # a thread that made no call
        with part:
            out.flush()
            shutil.copyfileobj(part, out, 1 << 20)


def live_marks():
    """(annotation names, what a call open at stop says on its end, what one open
    at start says on its begin) as follow/live.py's encoder writes them: made in
    this order on both sides, so their iids agree."""
    names = AnnotationNames()
    marks = _OpenMarks(names)
    return (names, marks.blobs[lib.PT_PF_MARK_OPEN_AT_STOP],
            marks.blobs[lib.PT_PF_MARK_OPEN_AT_START])


def _filled(steps, encode):
    """The buffer's contents, handed on as full as it gets (a compressed packet
    takes whole pieces: full ones fill it), each valid until the next is asked
    for. steps yields, per batch, step(at, room): it encodes the batch on from
    where it stopped into room bytes at `at` (the length in encode["written"])
    and returns (whether it moved on, whether it stopped for want of room)."""
    out, cap, written = encode["out"], encode["cap"], encode["written"]
    used = 0
    for step in steps:
        while True:
            moved, full = step(out + used, cap - used)
            used += written[0]
            if not full:
                break
            if not moved and not used:
                raise RuntimeError("pytrace_cffi: a .pftrace packet did not fit its buffer")
            yield ffi.buffer(out, used)
            used = 0
    if used:
        yield ffi.buffer(out, used)


def _record_steps(first, batches, thread, sequence_id, clock_ns, depth, encode):
    """_filled's steps for a thread's walk records (pt_pftrace_records)."""
    e = encode
    next_index = ffi.new("uint64_t *")
    last_ns = ffi.new("int64_t *", clock_ns)
    batch = first
    while batch is not None:
        records, n = batch
        next_index[0] = 0

        def step(at, room, records=records, n=n):
            before = next_index[0]
            status = lib.pt_pftrace_records(records, n, next_index, last_ns, e["events"],
                                            e["event_offsets"], e["interned"],
                                            e["interned_offsets"], e["interned_done"],
                                            e["n_keys"], e["marks"], e["mark_lens"],
                                            sequence_id, at, room, e["written"])
            if status != lib.PT_OK:
                raise TraceFormatError(f"thread {thread.name!r}: its calls are out of time "
                                       f"order or name no known function")
            e["progress"].advance((next_index[0] - before) // 2)
            return next_index[0] != before, next_index[0] < n
        yield step
        batch = next(batches, None)


def _slice_steps(first, batches, thread, sequence_id, clock_ns, depth, encode):
    """_filled's steps for a thread's slices in start order (pt_pftrace_slices),
    a batch each and one more after the last to end the slices still open."""
    e = encode
    stack_cap = depth + 1
    stack = ffi.new("int64_t[]", stack_cap)
    stack_end = ffi.new("int64_t[]", stack_cap)
    cursor = ffi.new("pt_pf_cursor *")
    cursor.open, cursor.last_ns = 0, clock_ns
    batch = first
    while True:
        slices, n, first_index = batch if batch is not None else (ffi.NULL, 0, 0)
        last = batch is None
        cursor.next = 0

        def step(at, room, slices=slices, n=n, first_index=first_index, last=last):
            before = cursor.next, cursor.open
            status = lib.pt_pftrace_slices(slices, n, first_index, last, cursor, stack,
                                           stack_end, stack_cap, e["events"],
                                           e["event_offsets"], e["interned"],
                                           e["interned_offsets"], e["interned_done"],
                                           e["n_keys"], e["marks"], e["mark_lens"],
                                           sequence_id, at, room, e["written"])
            if status != lib.PT_OK:
                raise TraceFormatError(
                    f"thread {thread.name!r}: call {first_index + cursor.next} is out of "
                    f"time order, nests deeper than its depth says or names no known "
                    f"function")
            e["progress"].advance(cursor.next - before[0])
            return ((cursor.next, cursor.open) != before,
                    cursor.next < n or bool(last and cursor.open))
        yield step
        if last:
            break
        batch = next(batches, None)


def write_perfetto(trace, path, compress=True, more=None, own_batches=None):
    """Writes trace to path as Perfetto protobuf, deflate-compressed packets when
    compress. Written beside path and renamed: a failed export leaves no
    truncated file and the trace untouched. more(uuids, first_sequence_id):
    packets (whole Trace.packet entries) to write after the trace's, given its
    tracks' uuids (see _chunks) and the first sequence id it leaves free.
    own_batches: see _chunks (merge_torch's slices filtered around torch's regions).
    trace._streams.encoded_part(index) (model/streams.py): (path, sequence id,
    clock ns) of a thread's packets encoded while its process ran
    (follow/live.py), written as they are after its head, or None."""
    path = os.fspath(path)
    warn_if_too_deep(trace)
    chunk_bytes = COMPRESSED_INPUT_BYTES if compress else CHUNK_BYTES
    with replaced_atomically(path, lambda tmp: open(tmp, "wb")) as out, \
            Progress(f"writing {path}", len(trace)) as progress:
        sink = PacketSink(out, compress)
        try:
            uuids = {}
            for chunk in _chunks(trace, progress, chunk_bytes, uuids, own_batches):
                if isinstance(chunk, Part):
                    sink.finish()
                    chunk.copy_to(out)
                else:
                    sink.write(chunk)
            if more is not None:
                for chunk in more(uuids, PROCESS_SEQUENCE + 1 + len(trace.threads)):
                    sink.write(chunk)
            sink.finish()
        finally:
            sink.close()
