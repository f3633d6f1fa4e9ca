"""Streaming walks over a trace's events (c_src/pt_walk.c): the calls a trace
shows, without a slice table, for the exports that stream (.pftrace, Chrome
JSON, a saved directory's slices.bin).

A trace keeps its events (in memory after stop(), or in a spill file's blocks)
and a KeyPlan: every key the slice pipeline would add (torch regions, module
calls, optimizer steps, regions with args) made once, so the streamed exports
and the slice table built on demand (thread_slices()) name calls with
the same keys. Each thread is scanned once (its counts,
its calls open at stop, what names an optimizer step's parent: at once for a
loaded trace, when first needed for a stopped session's); an export walks
it again and encodes the records as they become final (Streams.records, in time
order), or, for JSON and slices.bin, after one more scan that keeps each call's
duration, the whole calls in start order (Streams.slices).
"""
from .._core import ffi, lib
from .._torch import MODULE_CALL, OPTIMIZER_STEP, REGION_ENTER, REGION_EXIT
from ..errors import TraceError, TraceFormatError
from .streams import CallStreams, EventSource

import threading

RUN_EVENTS = 1 << 16        # events fed per call: records wait at most this long
NO_KEY = 0xFFFFFFFF
_SCAN_LOCK = threading.Lock()


class KeyPlan:
    """Keys for what the watcher and record_function tagged, made up front; the
    lists names/key_kinds and the dict key_args are the trace's, extended here."""

    def __init__(self, names, key_kinds, key_args, hidden, tags, annotation_args):
        self.names, self.key_kinds, self.key_args = names, key_kinds, key_args
        self.hidden = bytes(hidden)
        self.tags = tags
        self.annotation_args = annotation_args
        self.key_for_name = {}
        self.key_for_args = {}
        self.regions = TorchRegions(tags, names, key_kinds)
        n_tags = max(1, len(tags))
        region_key = [0] * n_tags
        tag_key, step_key, step_name = [0] * n_tags, [0] * n_tags, [0] * n_tags
        if self.regions.keys is not None:
            region_key = list(self.regions.keys)
        # An optimizer step's parent keeps its key when it is an annotation of the
        # step's own name (torch's region): names compared as small ids.
        annotation_ids = {}
        annotation_name = [0] * len(names)
        for key, (name, kind) in enumerate(zip(names, key_kinds)):
            if kind == "annotation":
                annotation_name[key] = annotation_ids.setdefault(name, len(annotation_ids) + 1)
        if len(tags) > 1 or annotation_args:
            for tag, info in enumerate(tags):
                if not info:
                    continue
                if info.get("kind") == MODULE_CALL:
                    tag_key[tag] = self.key_for(info)
                elif info.get("kind") == OPTIMIZER_STEP:
                    step_key[tag] = self.key_for(info)
                    step_name[tag] = annotation_ids.get(info["name"], 0)
        self._arrays = {
            "hidden": ffi.new("uint8_t[]", self.hidden or b"\0"),
            "region_key": ffi.new("uint32_t[]", region_key),
            "tag_key": ffi.new("uint32_t[]", tag_key),
            "step_key": ffi.new("uint32_t[]", step_key),
            "step_name": ffi.new("uint32_t[]", step_name),
            "annotation_name": ffi.new("uint32_t[]", annotation_name or [0]),
            # the scan only asks whether an index has args
            "scan_args": ffi.new("uint32_t[]", [1 if a else 0 for a in annotation_args] or [0]),
            "args_key": ffi.new("uint32_t[]", max(1, len(annotation_args))),
        }
        self.n_tags = len(tags)
        self.n_annotation_keys = len(annotation_name)

    def key_for(self, info):
        """The key of a module call's or optimizer step's name (as name_tagged_calls)."""
        key = self.key_for_name.get(info["name"])
        if key is None:
            key = self.key_for_name[info["name"]] = len(self.names)
            self.names.append(info["name"])
            self.key_kinds.append("python")
            if info["kind"] == MODULE_CALL:
                self.key_args[key] = {"Python module id": info["module_id"]}
        return key

    def key_with_args(self, key, args):
        import json
        identity = (key, json.dumps(args, sort_keys=True))
        found = self.key_for_args.get(identity)
        if found is None:
            found = self.key_for_args[identity] = len(self.names)
            self.names.append(self.names[key])
            self.key_kinds.append(self.key_kinds[key])
            self.key_args[found] = dict(args)
        return found

    def set_args_keys(self, base_keys):
        """After the scans: base_keys[index] is the key the args index was recorded on."""
        for index, base in enumerate(base_keys):
            args = self.annotation_args[index]
            if base != NO_KEY and args and base < len(self.names):
                self._arrays["args_key"][index] = self.key_with_args(base, args)

    def tables(self, clock, stop_ticks, min_duration_ns, scan):
        """A pt_walk_tables for a scan (scan=True) or an emitting walk."""
        a = self._arrays
        t = ffi.new("pt_walk_tables *")
        t.hidden, t.n_hidden = a["hidden"], len(self.hidden)
        t.n_tags = self.n_tags
        t.region_key, t.tag_key = a["region_key"], a["tag_key"]
        t.step_key, t.step_name = a["step_key"], a["step_name"]
        t.annotation_name, t.n_keys = a["annotation_name"], self.n_annotation_keys
        t.n_args = len(self.annotation_args)
        t.args_key = a["scan_args"] if scan else a["args_key"]
        t.min_ns = max(0, min_duration_ns or 0)
        t.tick0, t.ns0, t.ns_per_tick = clock["tick0"], clock["ns0"], clock["ns_per_tick"]
        t.stop_ticks = stop_ticks
        return t


class TorchRegions:
    """torch's record_function regions as slices of their own (category
    user_annotation, named as torch.profiler names them): each tagged
    record_function.__enter__ call gets a region slice around it, spanning to the
    end of the matching __exit__ call and enclosing the calls made in between.
    keys: per tag, the region's key (PT_REGION_EXIT for __exit__) for the walk's
    tables (walk.KeyPlan); None when no tag opens a region."""

    def __init__(self, tags, names, key_kinds):
        self.keys = None
        if not any(t and t.get("kind") == REGION_ENTER for t in tags):
            return
        key_for_name = {}
        keys = [0] * len(tags)
        for tag, info in enumerate(tags):
            if not info:
                continue
            if info.get("kind") == REGION_EXIT:
                keys[tag] = lib.PT_REGION_EXIT
            elif info.get("kind") == REGION_ENTER:
                key = key_for_name.get(info["name"])
                if key is None:
                    key = key_for_name[info["name"]] = len(names)
                    names.append(info["name"])
                    key_kinds.append("annotation")
                keys[tag] = key
        self.keys = ffi.new("uint32_t[]", keys)
        self.n_tags = len(keys)


class HeldEvents(EventSource):
    """A thread's events still held by the stopped tracer."""

    def __init__(self, ptr, index):
        self.ptr, self.index = ptr, index
        events = ffi.new("pt_event **")
        n, base = ffi.new("uint64_t *"), ffi.new("int64_t *")
        self._check(lib.pt_thread_events_at(ptr, index, 0, events, n, base))
        self.base_ticks = base[0]

    def _check(self, rc):
        if rc != lib.PT_OK:
            raise TraceError(f"reading thread {self.index}'s events: status {rc}")

    def runs(self):
        events = ffi.new("pt_event **")
        n, base = ffi.new("uint64_t *"), ffi.new("int64_t *")
        first = 0
        while True:
            self._check(lib.pt_thread_events_at(self.ptr, self.index, first, events, n, base))
            if not n[0]:
                return
            # a chunk holds up to 256K events: fed in runs, so records wait less
            for at in range(0, n[0], RUN_EVENTS):
                yield events[0] + at, min(RUN_EVENTS, n[0] - at)
            first += n[0]


class Streams(CallStreams):
    """What a trace needs to stream its threads (the CallStreams of its events):
    the plan, each thread's events and its scan. The scans run when made, or with lazy=True when first needed
    (stats, or a walk that reads them): a stopped session's trace counts nothing
    until asked."""

    def __init__(self, plan, sources, clock, stop_ticks, min_duration_ns, keep_alive=None,
                 lazy=False):
        self.plan = plan
        self.sources = sources
        self.clock = clock
        self.stop_ticks = stop_ticks
        self.min_duration_ns = min_duration_ns
        self.keep_alive = keep_alive        # the tracer that holds the events
        self._scan_tables = plan.tables(clock, stop_ticks, min_duration_ns, scan=True)
        self._scanned = None    # (scans, stats, calls_begun, emitting tables, open_at_start)
        if not lazy:
            self._scan()

    # The scans' findings, per thread: the scan walks, (calls shown, those open
    # at stop, deepest depth), calls begun; the emitting walks' tables; and the
    # slices running at the start.
    scans = property(lambda self: (self._scanned or self._scan())[0])
    stats = property(lambda self: (self._scanned or self._scan())[1])
    calls_begun = property(lambda self: (self._scanned or self._scan())[2])
    _tables = property(lambda self: (self._scanned or self._scan())[3])
    open_at_start = property(lambda self: (self._scanned or self._scan())[4])

    def _scan(self):
        with _SCAN_LOCK:        # once, whichever thread asks first
            if self._scanned is None:
                self._scanned = self._scan_all()
            return self._scanned

    def _scan_all(self):
        plan = self.plan
        scans, stats_list, calls_begun, open_at_start = [], [], [], []
        base_keys = [NO_KEY] * len(plan.annotation_args)
        out = ffi.new("uint32_t[]", max(1, len(base_keys)))
        for source in self.sources:
            walk = ffi.gc(lib.pt_walk_new(self._scan_tables, ffi.NULL, source.base_ticks),
                          lib.pt_walk_free)
            if walk == ffi.NULL:
                raise MemoryError("pytrace_cffi: out of memory scanning a thread")
            for events, n in source.runs():
                _check(lib.pt_walk_feed(walk, events, n), source, walk)
            _check(lib.pt_walk_finish(walk), source, walk)
            stats = ffi.new("pt_walk_stats *")
            lib.pt_walk_get_stats(walk, stats)
            scans.append(walk)
            stats_list.append((stats.slices, stats.open_at_stop, stats.max_depth))
            calls_begun.append(stats.calls_begun)
            open_at_start.append(stats.open_at_start)
            if base_keys:
                lib.pt_walk_args_keys(walk, out, len(base_keys))
                for index in range(len(base_keys)):
                    if out[index] != NO_KEY:
                        base_keys[index] = out[index]
        plan.set_args_keys(base_keys)
        tables = plan.tables(self.clock, self.stop_ticks, self.min_duration_ns, scan=False)
        return scans, stats_list, calls_begun, tables, open_at_start

    def records(self, index):
        """Thread index's records, in time order: yields (pt_walk_record *, n),
        valid until the next step (encode them before asking for more)."""
        source = self.sources[index]
        walk = _owned(lib.pt_walk_new(self._tables, self.scans[index], source.base_ticks))
        return _emitted(walk, source)

    def stream_records(self, index, stale):
        """Thread index's records as an encoder writing during the trace makes
        them: one walk without a scan (pt_walk_new_stream). The same records as
        records(index) unless it met a tag or args, which only a scan decides:
        then stale[0] is set and the records are not the trace's."""
        source = self.sources[index]
        walk = _owned(lib.pt_walk_new_stream(self._scan_tables, source.base_ticks))
        yield from _emitted(walk, source)
        stale[0] = bool(lib.pt_walk_stale(walk))

    def slices(self, index):
        """Thread index's slices in start order, numbered as the slice table numbers
        them, from a second scan that keeps each call's duration (4 bytes a call,
        freed after): yields (pt_slice *, n, index of the first)."""
        source = self.sources[index]
        scan = ffi.gc(lib.pt_walk_new(self._scan_tables, ffi.NULL, source.base_ticks),
                      lib.pt_walk_free)
        if scan == ffi.NULL or lib.pt_walk_keep_durations(scan, self.calls_begun[index]):
            raise MemoryError("pytrace_cffi: out of memory walking a thread")
        for events, n in source.runs():
            _check(lib.pt_walk_feed(scan, events, n), source, scan)
        _check(lib.pt_walk_finish(scan), source, scan)
        walk = ffi.gc(lib.pt_walk_new(self._tables, scan, source.base_ticks), lib.pt_walk_free)
        if walk == ffi.NULL:
            raise MemoryError("pytrace_cffi: out of memory walking a thread")
        slices, first = ffi.new("pt_slice **"), ffi.new("uint64_t *")
        for events, n in source.runs():
            _check(lib.pt_walk_feed(walk, events, n), source, walk)
            ready = lib.pt_walk_ready_slices(walk, slices, first)
            if ready:
                yield slices[0], ready, first[0]
                lib.pt_walk_consume_slices(walk)
        _check(lib.pt_walk_finish(walk), source, walk)
        ready = lib.pt_walk_ready_slices(walk, slices, first)
        if ready:
            yield slices[0], ready, first[0]

    def table(self):
        """The slice table (Trace.thread_slices): per thread, one emitting walk in
        table mode writes its slices into one array (room for the calls the scan
        saw begin; cut to size when min_duration left far fewer).
        [(pt_slice array, n)]."""
        table = []
        for index, source in enumerate(self.sources):
            cap = max(1, self.calls_begun[index])
            array = _new_uncleared("pt_slice[]", cap)    # the walk writes what is read
            walk = ffi.gc(lib.pt_walk_new(self._tables, self.scans[index], source.base_ticks),
                          lib.pt_walk_free)
            if walk == ffi.NULL or lib.pt_walk_fill_table(walk, array, cap) != lib.PT_OK:
                raise MemoryError("pytrace_cffi: out of memory walking a thread")
            for events, n in source.runs():
                _check(lib.pt_walk_feed(walk, events, n), source, walk)
            _check(lib.pt_walk_finish(walk), source, walk)
            n = lib.pt_walk_table_count(walk)
            if n != self.stats[index][0]:
                raise TraceError(f"pytrace_cffi: thread {index}: the slice table has {n} "
                                 f"calls, the scan counted {self.stats[index][0]}")
            if 2 * n < cap:
                exact = _new_uncleared("pt_slice[]", max(1, n))
                ffi.memmove(exact, array, n * ffi.sizeof("pt_slice"))
                array = exact
            table.append((array, n))
        return table


def _owned(walk):
    """A new walk, freed with its last reference."""
    if walk == ffi.NULL:
        raise MemoryError("pytrace_cffi: out of memory walking a thread")
    return ffi.gc(walk, lib.pt_walk_free)


def _emitted(walk, source):
    """An emitting walk's records over source's events, in time order: yields
    (pt_walk_record *, n), valid until the next step."""
    records = ffi.new("pt_walk_record **")
    for events, n in source.runs():
        _check(lib.pt_walk_feed(walk, events, n), source, walk)
        ready = lib.pt_walk_ready(walk, records)
        if ready:
            yield records[0], ready
            lib.pt_walk_consume(walk, ready)
    _check(lib.pt_walk_finish(walk), source, walk)
    ready = lib.pt_walk_ready(walk, records)
    if ready:
        yield records[0], ready


def dropped_by_thread(trace):
    """{"dropped_by_thread": each thread's dropped events, in thread order} when
    the trace dropped any, else {}: the facts (otherData, the .pftrace's) that
    let a reader split dropped_events among its threads (readers/chrome_events.py)."""
    split = [thread.dropped for thread in trace.threads]
    if not trace.dropped_events or sum(split) != trace.dropped_events:
        return {}           # (a trace made by hand may not say: the total alone)
    return {"dropped_by_thread": split}


PERFETTO_MAX_DEPTH = 512


def warn_if_too_deep(trace, output="export", stacklevel=3):
    """Perfetto (and chrome://tracing) draw at most 512 nested slices per thread and
    drop the deeper ones; say so rather than let calls vanish unnoticed."""
    # (thread_counts: without building the slice table of a streaming trace)
    deepest = max((depth for _, _, _, depth in trace.thread_counts()), default=0)
    if deepest >= PERFETTO_MAX_DEPTH:
        import warnings
        from ..errors import TraceWarning
        warnings.warn(TraceWarning(
            f"calls nest {deepest + 1} deep; Perfetto shows only the outer "
            f"{PERFETTO_MAX_DEPTH} levels. Trace with {{max_depth}} to keep the {output} "
            "within them", options={"max_depth": PERFETTO_MAX_DEPTH}), stacklevel=stacklevel)


_new_uncleared = ffi.new_allocator(should_clear_after_alloc=False)


def _check(rc, source, walk):
    if rc == lib.PT_ERR_NOMEM:
        raise MemoryError("pytrace_cffi: out of memory walking the trace's events")
    if rc == lib.PT_ERR_STATE:
        raise TraceError("pytrace_cffi: the streaming walk dropped records it had handed out")
    if rc != lib.PT_OK:
        stats = ffi.new("pt_walk_stats *")
        lib.pt_walk_get_stats(walk, stats)
        raise TraceFormatError(f"{source.describe()}: call "
                               f"{stats.calls_begun} ends before it starts or outside its "
                               f"parent (damaged deltas)")


def thread_batches(trace):
    """The calls of every thread of trace, the one stream every writer reads:
    (ThreadInfo, batches of (pt_slice *, n, index of the first)) per thread
    (see batches). trace: a Trace (recorded, loaded or joined: its _streams
    a model.streams.CallStreams, or None)."""
    for index, thread in enumerate(trace.threads):
        yield thread, batches(trace, index)


def batches(trace, index):
    """Thread index's calls as batches of (pt_slice *, n, index of the first):
    streamed when the trace can (no slice table: each batch is valid until the
    next is asked for), else its slice table whole."""
    streams = trace._streams          # a model.streams.CallStreams, or None
    if streams is not None and not trace.slices_built():
        return streams.slices(index)
    slices, n = trace._slices[index]
    return [(slices, n, 0)] if n else []
