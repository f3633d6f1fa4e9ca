"""merge_torch to a .pftrace: our calls as export_perfetto writes them, then
torch.profiler's events on tracks of their own, on our CLOCK_MONOTONIC.

torch's `ts` (epoch µs less baseTimeNanoseconds) goes back to CLOCK_MONOTONIC
through the realtime anchor (the inverse of merge.torch_ts's map), so ours stay
as they are. torch's events on a thread we traced go on a track of their own
beside ours, with the same pid and tid (Perfetto shows both under the thread):
its ops and our Python calls come from two clocks and may cross by a few ns,
which begin/end slices on one track could not show. As in the JSON merge, its
python_function events on threads we traced, within our trace's time, are left
out (ours replace them), its names for our threads give way to ours, and each
of its record_function regions is kept once, torch's: our calls on that thread
are filtered by the JSON merge's own code (merge_regions.TorchProfilerRegions, compared on
CLOCK_REALTIME as there), so the thread's tracks nest as one.

A .pftrace slice is a begin and an end that must nest on its track, so torch's
complete ("X") events are sorted per track before they are written: unlike the
JSON merge, which streams torch's file, this one holds torch's events (not
ours) in memory, about their size in its file. Flow events ("s"/"f", e.g. CPU
launch -> GPU kernel) bind to the innermost slice around them on their track.
Events of other phases are counted in the "torch.profiler" instant's args.
"""
import hashlib
import struct
import warnings

from .errors import TraceWarning
from .formats import torch_compressed
from .merge_regions import (TORCH_PYTHON_CATEGORY, TorchProfilerRegions, anchor_clocks,
                            is_finite_number, noting_last_start, replaced_by_ours)
from .readers.torch_chrome import TorchChromeReader, check_torch
from .render.perfetto import write_perfetto
from .render.perfetto_packets import (CLOCK_MONOTONIC, SEQ_INCREMENTAL_STATE_CLEARED,
                                      TYPE_COUNTER, TYPE_INSTANT, AnnotationNames,
                                      counter_value, packet)
from .render.protobuf import bytes_field as _bytes, int_field as _int
from .render.protobuf import varint
from .model.realtime import monotonic_to_realtime

TYPE_SLICE_BEGIN, TYPE_SLICE_END = 1, 2
PIECE_BYTES = 64 << 10          # torch's packets handed to the writer this many at once
_FIXED64 = struct.Struct("<Q")


def realtime_to_monotonic(anchor, realtime_ns):
    """The monotonic reading that monotonic_to_realtime maps to realtime_ns (to
    the ns: the offset moves by far less than a ns per ns)."""
    start = anchor["start"]
    guess = realtime_ns - (start["realtime_ns"] - start["monotonic_ns"])
    for _ in range(3):
        guess += realtime_ns - monotonic_to_realtime(anchor, guess)
    return guess


class _TorchTracks:
    """torch's processes and threads as tracks: a process track per pid (ours
    when the pid is one of our processes'), a thread track per (pid, tid), a
    counter track per (pid, title); described once torch's names are all read."""

    def __init__(self, uuids, next_uuid, our_threads):
        self.process_uuid = dict(uuids["process_of_pid"])
        self.ours = set(self.process_uuid)
        self.our_threads = our_threads          # (pid, tid) -> our thread's name
        self.next_uuid = next_uuid
        self.process_names, self.thread_names = {}, {}
        self.thread_uuid, self.counter_uuid = {}, {}

    def _new_uuid(self):
        self.next_uuid += 1
        return self.next_uuid

    def process(self, pid):
        uuid = self.process_uuid.get(pid)
        if uuid is None:
            uuid = self.process_uuid[pid] = self._new_uuid()
        return uuid

    def thread(self, pid, tid):
        uuid = self.thread_uuid.get((pid, tid))
        if uuid is None:
            self.process(pid)
            uuid = self.thread_uuid[(pid, tid)] = self._new_uuid()
        return uuid

    def counter(self, pid, title):
        uuid = self.counter_uuid.get((pid, title))
        if uuid is None:
            self.process(pid)
            uuid = self.counter_uuid[(pid, title)] = self._new_uuid()
        return uuid

    def descriptors(self):
        """TrackDescriptor bodies of torch's tracks (ours are described already)."""
        for pid, uuid in self.process_uuid.items():
            if pid in self.ours:
                continue
            name = str(self.process_names.get(pid, f"torch pid {pid}"))
            if _int32(pid):
                yield _int(1, uuid) + _bytes(3, _int(1, pid) + _bytes(6, name))
            else:
                yield _int(1, uuid) + _bytes(2, name)
        for (pid, tid), uuid in self.thread_uuid.items():
            parent = self.process_uuid[pid]
            name = self.our_threads.get((pid, tid))
            if name is None:
                name = str(self.thread_names.get((pid, tid), f"thread {tid}"))
            if _int32(pid) and _int32(tid):
                yield _int(1, uuid) + _int(5, parent) + _bytes(
                    4, _int(1, pid) + _int(2, tid) + _bytes(5, name))
            else:
                yield _int(1, uuid) + _int(5, parent) + _bytes(2, name)
        for (pid, title), uuid in self.counter_uuid.items():
            yield (_int(1, uuid) + _int(5, self.process_uuid[pid]) + _bytes(2, title)
                   + _bytes(8, b""))


def _int32(value):
    """Whether value can be a ProcessDescriptor/ThreadDescriptor pid or tid."""
    return type(value) is int and -2 ** 31 <= value < 2 ** 31


def _flow_id(category, ident):
    """A flow's 64-bit id from torch's category and id (the same in every run)."""
    digest = hashlib.blake2b(f"{category}\0{ident}".encode("utf-8", "backslashreplace"),
                             digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


def _event_fields(event):
    """TrackEvent name, category and args of a torch event."""
    out = _bytes(23, str(event.get("name", "")))
    if event.get("cat") is not None:
        out += _bytes(22, str(event["cat"]))
    args = event.get("args")
    if isinstance(args, dict):
        out += AnnotationNames.plain(args)
    return out


class _TorchEvents:
    """torch's events read once, kept per track until all are known (see the
    module's doc), then written as packets."""

    def __init__(self, tracks, anchor, base, ours_span, traced, last_starts):
        self.tracks, self.anchor, self.base = tracks, anchor, base
        self.first, self.last = ours_span
        self.traced = traced                    # (pid, tid) of our threads
        self.last_starts = last_starts          # (pid, tid) -> its last call's start (ns)
        self.slices = {}                        # track uuid -> [(start, -end, n, fields)]
        self.instants = []                      # (ts, track, fields)
        self.counters = []                      # (ts, track, value)
        self.flows = {}                         # track uuid -> [(ts, flow id)]
        self.replaced = self.skipped = 0

    def ns(self, ts_us):
        return realtime_to_monotonic(self.anchor, round(ts_us * 1000) + self.base)

    def add(self, event, number):
        if not isinstance(event, dict):
            self.skipped += 1
            return
        phase = event.get("ph")
        if phase == "M":
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            if event.get("name") == "process_name" and "name" in args:
                self.tracks.process_names[event.get("pid")] = args["name"]
            elif event.get("name") == "thread_name" and "name" in args:
                self.tracks.thread_names[(event.get("pid"), event.get("tid"))] = args["name"]
            return
        if not is_finite_number(event.get("ts")):
            self.skipped += 1
            return
        pid, tid = event.get("pid"), event.get("tid")
        start = self.ns(event["ts"])
        if phase == "X":
            dur = event.get("dur") or 0
            if not is_finite_number(dur) or dur < 0:
                self.skipped += 1
                return
            end = max(start, self.ns(event["ts"] + dur))
            if event.get("cat") == TORCH_PYTHON_CATEGORY and (pid, tid) in self.traced \
                    and replaced_by_ours(start, end, self.first,
                                         self.last_starts.get((pid, tid))):
                self.replaced += 1
                return
            track = self.tracks.thread(pid, tid)
            self.slices.setdefault(track, []).append((start, -end, number,
                                                      _event_fields(event)))
        elif phase in ("i", "I"):
            scope = event.get("s", "t")
            track = (self.tracks.process(pid) if scope in ("p", "g")
                     else self.tracks.thread(pid, tid))
            self.instants.append((start, track, _event_fields(event)))
        elif phase == "C":
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            name = str(event.get("name", ""))
            for series, value in args.items():
                if is_finite_number(value):
                    title = name if series == name else f"{name} {series}"
                    self.counters.append((start, self.tracks.counter(pid, title), value))
        elif phase in ("s", "t", "f"):
            track = self.tracks.thread(pid, tid)
            self.flows.setdefault(track, []).append(
                (start, _flow_id(event.get("cat"), event.get("id"))))
        else:
            self.skipped += 1

    def packets(self, sequence_id):
        """The packets, in pieces: descriptors, then each track's slices (begins and
        ends nested, flows on the begins), instants and counter values."""
        seq = _int(10, sequence_id)
        pieces, size = [], 0

        def put(entry):
            nonlocal size
            pieces.append(entry)
            size += len(entry)

        put(packet(_int(13, SEQ_INCREMENTAL_STATE_CLEARED),
                   _bytes(59, _int(58, CLOCK_MONOTONIC)), seq))
        for descriptor in self.tracks.descriptors():
            put(packet(_bytes(60, descriptor), seq))
        for track, slices in self.slices.items():
            for entry in _slice_packets(track, slices, self.flows.get(track, ()), seq):
                put(entry)
                if size >= PIECE_BYTES:
                    yield b"".join(pieces)
                    pieces, size = [], 0
        for ts, track, fields in self.instants:
            put(packet(_int(8, ts), _bytes(11, _int(9, TYPE_INSTANT) + _int(11, track)
                                           + fields), seq))
        for ts, track, value in self.counters:
            put(packet(_int(8, ts), _bytes(11, _int(9, TYPE_COUNTER) + _int(11, track)
                                           + counter_value(value)), seq))
        if pieces:
            yield b"".join(pieces)


def _slice_packets(track, slices, flows, seq):
    """A track's slices as begin and end packets that nest: sorted by start, the
    longer first; a slice that would end after the one around it is cut to it."""
    slices.sort()
    flows = sorted(flows)
    bound = _bind_flows(slices, flows)
    stack = []                                  # ends of the open slices
    head = _int(11, track)
    for index, (start, neg_end, _, fields) in enumerate(slices):
        while stack and stack[-1] <= start:
            yield _end(stack.pop(), head, seq)
        end = -neg_end
        if stack and end > stack[-1]:
            end = stack[-1]                     # crosses its parent's end: cut
        flow = b"".join(_fixed64(47, f) for f in bound.get(index, ()))
        yield packet(_int(8, start), _bytes(11, _int(9, TYPE_SLICE_BEGIN) + head + fields
                                            + flow), seq)
        stack.append(end)
    while stack:
        yield _end(stack.pop(), head, seq)


def _fixed64(field, value):
    return varint(field << 3 | 1) + _FIXED64.pack(value)


def _end(ts, head, seq):
    return packet(_int(8, ts), _bytes(11, _int(9, TYPE_SLICE_END) + head), seq)


def _bind_flows(slices, flows):
    """slice index -> flow ids: each flow event on the innermost slice open at its
    time (slices sorted by start, the longer first), else dropped."""
    bound, stack, at = {}, [], 0
    for ts, flow in flows:
        while at < len(slices) and slices[at][0] <= ts:
            start = slices[at][0]
            while stack and -slices[stack[-1]][1] < start:
                stack.pop()
            stack.append(at)
            at += 1
        while stack and -slices[stack[-1]][1] < ts:
            stack.pop()
        if stack:
            bound.setdefault(stack[-1], []).append(flow)
    return bound


def _kept_around_regions(ours, regions, anchor, last_starts):
    """write_perfetto's own_batches: a thread's slices, filtered where torch has
    regions as the JSON merge filters them (merge_regions.TorchProfilerRegions:
    each region once, torch's; our calls crossing its edges left out, alone), the
    start of its last call noted in last_starts as they go."""
    from .model.walk import batches as thread_batches
    name_ids = regions.name_ids(ours.names, ours.key_kinds)
    clocks = anchor_clocks(anchor)

    def own_batches(index):
        thread = ours.threads[index]
        track = (ours.thread_pid(thread), thread.native_id or thread.ident)
        edges = regions.edges(*track, on_monotonic=clocks)
        batches = noting_last_start(thread_batches(ours, index), track, last_starts)
        return batches if edges is None else edges.kept(batches, name_ids)
    return own_batches


def merge_torch_pftrace(ours, torch_path, out_path, anchor):
    """merge.merge_torch's work for a .pftrace out_path (ours: a Trace whose
    realtime anchor is checked)."""
    compressed = torch_compressed(torch_path)
    with TorchChromeReader(torch_path, "torch trace", compressed) as torch_json:
        head = torch_json.whole_head(("baseTimeNanoseconds",))
        base = check_torch(head, torch_path)
    pid_of_tid = {}
    our_threads = {}
    for thread in ours.threads:
        pid = ours.thread_pid(thread)
        pid_of_tid.setdefault(thread.native_id, pid)
        our_threads[(pid, thread.native_id or thread.ident)] = thread.name
    traced = set(our_threads) | {(pid_of_tid.get(m.thread, ours.pid), m.thread)
                                 for m in ours.marks}
    counts = {}
    regions = TorchProfilerRegions.read(torch_path, base, set(our_threads))
    last_starts = {}            # (written before more() reads them)
    kept_batches = _kept_around_regions(ours, regions, anchor, last_starts)

    def more(uuids, sequence_id):
        tracks = _TorchTracks(uuids, uuids["next_uuid"] + (1 << 32), our_threads)
        events = _TorchEvents(tracks, anchor, base, (ours.start_ns, ours.stop_ns), traced,
                              last_starts)
        with TorchChromeReader(torch_path, "torch trace", compressed) as reader:
            reader.read_head()
            for number, (event, _) in enumerate(reader.events()):
                events.add(event, number)
        counts.update(skipped=events.skipped)
        facts = dict(head, torch_trace=str(torch_path),
                     torch_python_function_events_replaced=events.replaced,
                     torch_events_not_carried=events.skipped, **regions.counts(),
                     clock="torch's ts mapped onto our CLOCK_MONOTONIC through our "
                           "realtime anchor")
        info = packet(_int(8, ours.start_ns), _bytes(
            11, _int(9, TYPE_INSTANT) + _int(11, uuids["process"])
            + _bytes(23, "torch.profiler")
            + AnnotationNames.plain(facts)), _int(10, sequence_id))
        pieces = events.packets(sequence_id)
        yield next(pieces) + info
        yield from pieces

    write_perfetto(ours, out_path, more=more, own_batches=kept_batches)
    if counts.get("skipped"):
        warnings.warn(f"{torch_path}: {counts['skipped']} torch events of phases a .pftrace "
                      f"merge does not carry were left out", TraceWarning, stacklevel=3)
    return out_path
