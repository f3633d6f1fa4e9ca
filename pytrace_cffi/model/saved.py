"""The one owner of a saved-trace directory (its format: saved_format.py and
docs/FORMAT.md): save() writes a trace's (slices.bin), save_spilled() completes
the directory a session spilled to under max_events (events.bin, spill.py), and
load() (load_parts() from JSON parts already read) reads either back as a Trace.
Every other module saves and loads through these.

Loading: nothing is executed and nothing outside the directory is read; a
damaged or hostile directory raises TraceFormatError. The data files are read
a batch at a time, never whole, and checked as read."""
import collections
import json
import os
import sys
import threading
import weakref

from .realtime import checked_anchor
from .._core import ffi, lib
from .._files import replaced_atomically
from .._jsontext import MAX_ARGS_DEPTH, finite_number, too_deep
from .._safe_read import open_binary, read_bounded
from .._torch import TAG_KINDS
from ..errors import TraceFormatError
from .saved_format import (EVENT_BLOCK, EVENT_RECORD_SIZE, EVENTS_HEADER, EVENTS_MAGIC,
                           EVENTS_VERSIONS_READ, FORMAT_NAME, FORMAT_VERSION, INT64, KINDS,
                           SLICE_RECORD_SIZE, SLICES_HEADER, SLICES_MAGIC, TICKS_MASK, UINT64,
                           hash_id,
                           meta as _meta, names_file, thread_meta, write_json, write_names)
from .streams import CallStreams, EventSource


def save(trace, directory):
    """Writes trace as a saved directory: meta.json, hashes.json, params.json and
    slices.bin (its calls streamed as its walk makes them: no slice table)."""
    if sys.byteorder != "little":
        raise TraceFormatError("saving needs a little-endian host")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    meta = _meta(trace.pid, trace.python_version, trace.backend, trace.clock, trace.start_ns,
                 trace.stop_ns, trace.dropped_events, trace.names, trace.key_kinds,
                 trace.key_args, trace.marks, realtime_anchor=trace.realtime_anchor)
    # the counts without the slice table: a streaming trace writes its slices as
    # its walk makes them (walk.thread_batches), the same records
    from .walk import thread_batches
    counts = [(thread, n) for thread, n, _, _ in trace.thread_counts()]
    several = bool(trace.processes)
    meta["threads"] = [thread_meta(t, n, trace.thread_pid(t) if several else None)
                       for t, n in counts]
    if several:
        meta["processes"] = [dict(facts, pid=pid) for pid, facts in trace.processes.items()]
    if trace.label is not None:
        meta["label"] = trace.label
    write_names(directory, trace.names, trace.params)
    total = sum(n for _, n in counts)
    with replaced_atomically(os.path.join(directory, "slices.bin"),
                             lambda tmp: open(tmp, "wb")) as out:
        out.write(SLICES_HEADER.pack(SLICES_MAGIC, FORMAT_VERSION, SLICE_RECORD_SIZE, total))
        written = 0
        for _, batches in thread_batches(trace):
            for slices, n, _ in batches:
                out.write(ffi.buffer(slices, n * SLICE_RECORD_SIZE))
                written += n
        if written != total:
            raise TraceFormatError(f"slices.bin: {written} calls written, {total} counted")
    # A spilled trace saved over its own directory read its events.bin until now.
    if os.path.exists(os.path.join(directory, "events.bin")):
        os.unlink(os.path.join(directory, "events.bin"))
    # meta.json last: a directory without it is an incomplete save.
    write_json(os.path.join(directory, "meta.json"), meta)


def save_spilled(directory, facts, threads, events_length, process_meta=None):
    """Completes a spill directory whose events.bin holds every event (spill.py's
    finish_spill): hashes.json, params.json, then meta.json. facts: the stopped
    session's (_stopped.session_facts); threads: its ThreadInfos, n_events what
    events.bin holds for each; events_length: events.bin's whole blocks in bytes.
    Returns (meta, None), or (meta, OSError) when the JSON files could not be
    written (a full disk): load_parts(directory, *spilled_parts(meta, facts))
    then reads events.bin with what they would hold."""
    names = facts["names"]
    meta = _meta(facts["pid"], facts["python"], facts["backend"], facts["clock_name"],
                 facts["start_ns"], facts["stop_ns"], sum(t.dropped for t in threads),
                 names, facts["key_kinds"], {}, facts["marks"],
                 realtime_anchor=facts["realtime_anchor"])
    meta["threads"] = [thread_meta(t, None) for t in threads]
    for entry, hide in zip(meta["keys"], facts["hidden"]):
        entry.append(hide)
    # length: the whole blocks (a block a full disk cut short is not one of them)
    meta["events"] = dict(facts["clock"], file="events.bin",
                          min_duration_ns=facts["min_duration_ns"], length=events_length)
    meta["tags"] = facts["tags"]
    meta["annotation_args"] = facts["annotation_args"]
    meta["label"] = facts["label"]
    meta.update(process_meta or {})     # processes.py: who is who
    try:
        write_names(directory, names, facts["params"])
        write_json(os.path.join(directory, "meta.json"), meta)
    except OSError as exc:
        return meta, exc
    return meta, None


def spilled_parts(meta, facts):
    """(meta, hashes, params): what a spilled directory's JSON files would hold,
    for load_parts when they could not be written (save_spilled)."""
    return meta, names_file(facts["names"]), facts["params"]


def _read_json(directory, name):
    path = os.path.join(directory, name)
    try:
        return json.loads(read_bounded(path).decode("utf-8"))
    except FileNotFoundError:
        raise TraceFormatError(f"{directory!r} is not a saved trace: {name} is missing") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from None


def _expect(condition, message):
    if not condition:
        raise TraceFormatError(message)


def _int(value, what, bounds=INT64):
    """An integer the C core can take: times, ticks and counts are int64, thread
    ids uint64."""
    _expect(isinstance(value, int) and not isinstance(value, bool),
            f"meta.json: {what} must be an integer")
    _expect(bounds[0] <= value <= bounds[1], f"meta.json: {what} {value} is out of range")
    return value


def _mark(mark, thread_ids):
    """A meta.json mark as a Mark, its payload in the one shape the writer gives:
    an instant's args map names to str/int/float/bool or a list of integer sizes, a
    counter's map series names to numbers. An instant's null args (written by
    pytrace_cffi before marks were always objects) read as {}."""
    from .trace import Mark

    def bad(detail=""):         # the message made only for a mark that is bad
        raise TraceFormatError(f"meta.json: bad mark {mark!r:.80}{detail}")
    if not (isinstance(mark, list) and len(mark) == 5 and mark[0] in ("i", "C")
            and isinstance(mark[3], str)):
        bad()
    kind, ns, thread, name, args = mark
    if kind == "i" and args is None:
        args = {}
    if not isinstance(args, dict):
        bad()
    if kind == "i":
        if not all(isinstance(v, (str, int, float)) or (
                isinstance(v, list) and all(_is_int(size) for size in v))
                for v in args.values()):
            bad(": args values must be str, int, float, bool or a list of integer sizes")
    elif not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                 for v in args.values()):
        # a non-finite value is written as its string ("NaN", see _jsontext)
        args = {series: finite_number(v) for series, v in args.items()}
        if None in args.values():
            bad(": a counter's values must be numbers")
    _int(ns, "mark time")
    if _int(thread, "mark thread", UINT64) not in thread_ids:
        raise TraceFormatError(f"meta.json: mark {name!r} names thread {thread}, which "
                               "meta.json's threads lack")
    return Mark(kind, ns, thread, name, args)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def load(directory):
    directory = os.fspath(directory)
    _expect(os.path.isdir(directory), f"{directory!r} is not a directory")
    _expect(sys.byteorder == "little", "loading needs a little-endian host")
    meta = _read_json(directory, "meta.json")
    _expect(isinstance(meta, dict) and meta.get("format") == FORMAT_NAME,
            f"{directory}: meta.json does not describe a {FORMAT_NAME}")
    _expect(meta.get("version") == FORMAT_VERSION,
            f"{directory}: format version {meta.get('version')!r}, this pytrace_cffi reads "
            f"version {FORMAT_VERSION}")
    hashes = _read_json(directory, "hashes.json")
    params = _read_json(directory, "params.json")
    try:
        return load_parts(directory, meta, hashes, params)
    except TraceFormatError as exc:
        raise _in_directory(directory, exc) from None


def _in_directory(directory, exc):
    """exc, its message naming the file by its path when it names one of ours."""
    message = str(exc)
    if message.startswith(("meta.json", "hashes.json", "params.json")):
        return TraceFormatError(os.path.join(directory, message))
    return exc


def load_parts(directory, meta, hashes, params):
    """load() from its JSON parts already read (processes.recover builds them)."""
    from .trace import ThreadInfo
    _expect(isinstance(hashes, dict) and all(isinstance(v, str) for v in hashes.values()),
            "hashes.json must map ids to names")
    _expect(isinstance(params, dict), "params.json must be an object")

    spilled = "events" in meta
    keys = meta.get("keys")
    _expect(isinstance(keys, list) and keys, "meta.json: keys missing")
    names, key_kinds, key_args, hidden = [], [], {}, bytearray()
    # A spilled trace's keys carry a fourth value, whether the walk hides them; a
    # slices.bin trace was walked already and its keys have three.
    entry_len = 4 if spilled else 3
    for key, entry in enumerate(keys):
        _expect(isinstance(entry, list) and len(entry) == entry_len,
                f"meta.json: key {key} must be a list of {entry_len} values")
        hid, kind, args = entry[:3]
        hide = entry[3] if spilled else 0
        _expect(isinstance(hid, str), f"meta.json: key {key} has a bad hash id")
        _expect(_int(hide, "hide") in (0, 1, 2, 3, 4, lib.PT_HIDE_STARTUP),
                f"meta.json: key {key} has a bad hide value")
        hidden.append(hide)
        _expect(hid in hashes, f"meta.json: key {key} has no name in hashes.json")
        _expect(str(hash_id(hashes[hid])) == hid,
                f"hashes.json: id {hid} is not the hash of its name {hashes[hid]!r:.80}")
        _expect(kind in KINDS, f"meta.json: key {key} has kind {kind!r}")
        _expect(isinstance(args, dict), f"meta.json: key {key} args must be an object")
        _expect(not too_deep(args), f"meta.json: key {key} args nest deeper than "
                                    f"{MAX_ARGS_DEPTH} levels")
        names.append(hashes[hid])
        key_kinds.append(kind)
        if args:
            key_args[key] = args

    processes = _processes(meta)
    threads_meta = meta.get("threads")
    _expect(isinstance(threads_meta, list), "meta.json: threads missing")
    threads, counts = [], []
    for index, t in enumerate(threads_meta):
        _expect(isinstance(t, dict), f"meta.json: bad thread {index}")
        name = t.get("name")
        _expect(isinstance(name, str), f"meta.json: thread {index} has no name")
        _expect(t.get("index") == index,
                f"meta.json: thread {index} has index {t.get('index')!r:.20}")
        for count in ("n_events", "dropped"):
            _expect(_int(t.get(count), count) >= 0,
                    f"meta.json: thread {index} ({name!r}) has a negative {count}")
        pid = t.get("pid")
        if processes is None:
            _expect(pid is None, f"meta.json: thread {index} ({name!r}) has a pid, but "
                                 "meta.json lists no processes")
        else:
            _expect(_is_int(pid) and pid in processes,
                    f"meta.json: thread {index} ({name!r}) has pid {pid!r:.20}, which "
                    "meta.json's processes lack")
        threads.append(ThreadInfo(index, _int(t.get("native_id"), "native_id", UINT64),
                                  _int(t.get("ident"), "ident", UINT64), name,
                                  t["n_events"], t["dropped"], pid))
        if spilled:
            _expect("n_slices" not in t, f"meta.json: thread {index} ({name!r}) has n_slices, "
                                         "but the trace is spilled (events.bin)")
        else:
            counts.append(_int(t.get("n_slices"), "n_slices"))
            _expect(counts[-1] >= 0, f"meta.json: thread {index} ({name!r}) has a negative "
                                     "n_slices")
    dropped = _int(meta.get("dropped_events"), "dropped_events")
    _expect(dropped == sum(t.dropped for t in threads),
            f"meta.json: dropped_events is {dropped}, its threads' dropped add up to "
            f"{sum(t.dropped for t in threads)}")

    marks = meta.get("marks", [])
    _expect(isinstance(marks, list), "meta.json: marks must be a list")
    thread_ids = {t.native_id for t in threads}
    marks = [_mark(mark, thread_ids) for mark in marks]

    if spilled:
        streams = _spilled_streams(directory, meta, threads, names, key_kinds, key_args,
                                   bytes(hidden))
        return _trace(meta, names, key_kinds, key_args, threads, None, params, marks,
                      processes, streams=streams, build_slices=streams.table)
    slices_file = _SlicesFile(os.path.join(directory, "slices.bin"), counts, len(names))
    return _trace(meta, names, key_kinds, key_args, threads, None, params, marks, processes,
                  streams=slices_file, build_slices=slices_file.table)


class HeldFile:
    """A saved trace's data file (slices.bin or events.bin), opened by load() and
    held while the trace lives: exports read it again, and saving the trace over
    its own directory replaces the name, not the data held here. At most
    MAX_HELD files stay open in a process (a job of thousands of processes must
    not run out of descriptors): the least recently read is closed, and opened
    again by its name when it is read next, which must then still be the same
    file (device and inode) and no shorter, else TraceFormatError.
    One lock serves every held file: a read is a seek and a read, and a file
    may be closed for another."""

    MAX_HELD = 64
    _held = collections.OrderedDict()       # id -> weakref to an open one, least recent first
    _lock = threading.RLock()               # reentrant: __del__ may run inside a read

    def __init__(self, path):
        self.path = path
        self._file = None
        self._identity = None
        with self._lock:
            self._open()
        self.size = self._identity[2]

    def _open(self):
        """Opens the file (again), checks it is the one loaded, and holds it; the
        least recently read file beyond MAX_HELD is closed. Under _lock."""
        try:
            file, st = open_binary(self.path)       # a regular file, not through a link
        except OSError as exc:
            raise TraceFormatError(f"{self.path}: {exc}") from None
        # The same file, no shorter: a running process's events.bin grows (only its
        # blocks complete when it was read count); what is read is checked as read.
        identity = (st.st_dev, st.st_ino, st.st_size)
        if self._identity is not None and (identity[:2] != self._identity[:2]
                                           or identity[2] < self._identity[2]):
            file.close()
            raise TraceFormatError(f"{self.path}: replaced or changed since it was loaded")
        if self._identity is None:
            self._identity = identity
        self._file = file
        self._held[id(self)] = weakref.ref(self)
        while len(self._held) > self.MAX_HELD:
            _, oldest = self._held.popitem(last=False)
            oldest = oldest()
            if oldest is not None and oldest._file is not None:
                oldest._file.close()
                oldest._file = None

    def read_into(self, offset, view):
        """Fills view from offset; returns how many bytes there were."""
        view = memoryview(view).cast("B")
        got = 0
        with self._lock:
            if self._file is None:
                self._open()
            else:
                self._held.move_to_end(id(self))
            try:
                self._file.seek(offset)
                while got < len(view):
                    n = self._file.readinto(view[got:])
                    if not n:
                        break
                    got += n
            except OSError as exc:
                raise TraceFormatError(f"{self.path}: {exc}") from None
        return got

    def read(self, offset, size):
        data = bytearray(size)
        return bytes(data[:self.read_into(offset, memoryview(data))])

    def __del__(self):
        try:
            with self._lock:
                entry = self._held.get(id(self))
                if entry is not None and entry() in (None, self):
                    del self._held[id(self)]
                if self._file is not None:
                    self._file.close()
                    self._file = None
        except Exception:       # noqa: BLE001 - at interpreter exit, what is left may be gone
            pass


SLICE_BATCH = 1 << 16       # slices read at a time: 2.5 MB
BLOCK_READ_EVENTS = 1 << 18  # events read at a time: 2 MB
# The event kinds a file may hold (pt_record.h): the others are reserved.
KNOWN_KINDS = (lib.PT_EV_PY_CALL, lib.PT_EV_PY_RETURN, lib.PT_EV_C_CALL, lib.PT_EV_C_RETURN,
               lib.PT_EV_PY_SEED, lib.PT_EV_AUX)


class _SlicesFile(CallStreams):
    """A saved trace's slices.bin as the streams a Trace exports from (see
    walk.Streams): each thread is read a batch at a time, never whole, and checked
    as it is read (pt_slice_check) - once by load(), which counts it, and again by
    every pass after, so a file damaged since cannot hand the encoders bad
    slices. thread_slices() still gets the whole table (table())."""

    def __init__(self, path, counts, n_keys):
        self.path, self.counts, self.n_keys = path, counts, n_keys
        self.where = f"{path}: "              # for table(): read (and checked) as exports read
        self.file = HeldFile(path)
        header = self.file.read(0, SLICES_HEADER.size)
        _expect(len(header) == SLICES_HEADER.size, f"{path}: truncated header")
        magic, version, record_size, total = SLICES_HEADER.unpack(header)
        _expect(magic == SLICES_MAGIC, f"{path}: not a slices file")
        _expect(version == FORMAT_VERSION and record_size == SLICE_RECORD_SIZE,
                f"{path}: version {version}, record size {record_size} unsupported")
        _expect(total == sum(counts), f"{path}: {total} slices, meta.json says {sum(counts)}")
        expected = SLICES_HEADER.size + total * SLICE_RECORD_SIZE
        _expect(self.file.size == expected, f"{path}: {self.file.size} bytes, expected "
                                            f"{expected} (truncated or padded)")
        self.offsets = []
        offset = SLICES_HEADER.size
        for n in counts:
            self.offsets.append(offset)
            offset += n * SLICE_RECORD_SIZE
        self.stats = []
        count, open_at_stop = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        depth = ffi.new("uint32_t *")
        for index in range(len(counts)):
            checker = self._checker()
            for _ in self._batches(index, checker):
                pass
            lib.pt_slice_check_stats(checker, count, open_at_stop, depth)
            self.stats.append((count[0], open_at_stop[0], depth[0]))

    @staticmethod
    def _checker():
        checker = lib.pt_slice_check_new()
        if checker == ffi.NULL:
            raise MemoryError("pytrace_cffi: out of memory reading slices.bin")
        return ffi.gc(checker, lib.pt_slice_check_free)

    def _batches(self, index, checker):
        n = self.counts[index]
        batch = ffi.new("pt_slice[]", max(1, min(SLICE_BATCH, n)))
        done = 0
        while done < n:
            count = min(SLICE_BATCH, n - done)
            size = count * SLICE_RECORD_SIZE
            got = self.file.read_into(self.offsets[index] + done * SLICE_RECORD_SIZE,
                                      ffi.buffer(batch, size))
            _expect(got == size, f"{self.path}: truncated")
            bad = lib.pt_slice_check_feed(checker, batch, count, self.n_keys)
            if bad == -2:
                raise MemoryError("pytrace_cffi: out of memory reading slices.bin")
            _expect(bad == -1, f"{self.path}: thread {index}, slice {bad} is inconsistent")
            yield batch, count, done
            done += count

    def slices(self, index):
        """Thread index's slices in batches (pt_slice *, n, index of the first),
        each valid until the next is asked for."""
        return self._batches(index, self._checker())


def _processes(meta):
    """meta.json's "processes" (a trace of several processes: a job's, joined) as
    Trace.processes, pid -> facts, in lane order; None when absent."""
    listed = meta.get("processes")
    if listed is None:
        return None
    _expect(isinstance(listed, list) and listed, "meta.json: processes must be a non-empty "
                                                 "list")
    processes = {}
    for number, entry in enumerate(listed):
        _expect(isinstance(entry, dict) and _is_int(entry.get("pid"))
                and isinstance(entry.get("label"), str),
                f"meta.json: process {number} needs an integer pid and a label")
        _expect(not too_deep(entry), f"meta.json: process {number} nests deeper than "
                                     f"{MAX_ARGS_DEPTH} levels")
        _int(entry["pid"], "process pid")
        _expect(entry["pid"] not in processes,
                f"meta.json: process {number}: pid {entry['pid']} is listed twice")
        processes[entry["pid"]] = {k: v for k, v in entry.items() if k != "pid"}
    _expect(_is_int(meta.get("pid")) and meta["pid"] in processes,
            f"meta.json: pid {meta.get('pid')!r:.20} is not among its processes")
    return processes


def _trace(meta, names, key_kinds, key_args, threads, slices, params, marks, processes=None,
           streams=None, build_slices=None):
    from .trace import Trace
    trace = Trace(names=names, key_kinds=key_kinds, key_args=key_args, threads=threads,
                  streams=streams, build_slices=build_slices,
                  slices=slices, start_ns=_int(meta.get("start_ns"), "start_ns"),
                  stop_ns=_int(meta.get("stop_ns"), "stop_ns"), pid=_int(meta.get("pid"), "pid"),
                  python_version=str(meta.get("python")), backend=str(meta.get("backend")),
                  clock=str(meta.get("clock")), params=params, marks=marks,
                  dropped_events=_int(meta.get("dropped_events"), "dropped_events"),
                  realtime_anchor=_anchor(meta.get("realtime_anchor")))
    trace.processes = processes
    trace.label = meta["label"] if isinstance(meta.get("label"), str) else None
    return trace


def _anchor(value):
    try:
        return checked_anchor(value)
    except ValueError as exc:
        raise TraceFormatError(f"meta.json: {exc}") from None


def _spilled_streams(directory, meta, threads, names, key_kinds, key_args, hidden):
    """A spilled trace's events.bin, read block by block: each thread is scanned
    (and checked) once now; exports stream from the file again, and the slice
    table is walked from it only when something needs it (Streams.table)."""
    from .walk import KeyPlan, Streams
    events_meta = meta["events"]
    _expect(isinstance(events_meta, dict) and events_meta.get("file") == "events.bin",
            "meta.json: bad events entry")
    tick0 = _int(events_meta.get("tick0"), "tick0")
    ns0 = _int(events_meta.get("ns0"), "ns0")
    stop_ticks = _int(events_meta.get("stop_ticks"), "stop_ticks")
    ns_per_tick = events_meta.get("ns_per_tick")
    min_duration_ns = max(0, _int(events_meta.get("min_duration_ns", 0), "min_duration_ns"))
    _expect(isinstance(ns_per_tick, float) and 0 < ns_per_tick < 1e6, "meta.json: bad clock")
    tags = meta.get("tags", [None])
    annotation_args = meta.get("annotation_args", [])
    # Index 0 means "no tag"; a module's tag carries its id (its call's args).
    _expect(isinstance(tags, list) and tags and tags[0] is None
            and all(isinstance(t, dict) and isinstance(t.get("name"), str)
                    and t.get("kind") in TAG_KINDS
                    and (t.get("kind") != "module" or _is_int(t.get("module_id")))
                    for t in tags[1:]), "meta.json: bad tags")
    _expect(isinstance(annotation_args, list) and all(isinstance(a, dict)
                                                      for a in annotation_args),
            "meta.json: bad annotation args")
    _expect(not too_deep(annotation_args, MAX_ARGS_DEPTH + 1),
            f"meta.json: annotation args nest deeper than {MAX_ARGS_DEPTH} levels")
    path = os.path.join(directory, "events.bin")
    length = _int(events_meta["length"], "events length") if "length" in events_meta else None
    events_file = HeldFile(path)
    version = events_version(events_file)
    blocks = _index_blocks(events_file, threads, length)
    n_names = len(names)
    sources = [_FileEvents(events_file, thread, thread_blocks, tick0, n_names, len(tags),
                           len(annotation_args), version)
               for thread, thread_blocks in zip(threads, blocks)]
    plan = KeyPlan(names, key_kinds, key_args, hidden, tags, annotation_args)
    clock = {"tick0": tick0, "ns0": ns0, "ns_per_tick": ns_per_tick}
    streams = Streams(plan, sources, clock, stop_ticks, min_duration_ns)   # reads and checks
    for source in sources:
        _expect(source.n_events == source.thread.n_events,
                f"{source.describe()} has {source.n_events} events, meta.json says "
                f"{source.thread.n_events}")
    return streams


def events_version(events_file):
    """The version of events.bin's events (one of EVENTS_VERSIONS_READ), from its
    header."""
    path = events_file.path
    header = events_file.read(0, EVENTS_HEADER.size)
    _expect(len(header) == EVENTS_HEADER.size, f"{path}: truncated header")
    magic, version, record_size = EVENTS_HEADER.unpack(header)
    _expect(magic == EVENTS_MAGIC and record_size == EVENT_RECORD_SIZE,
            f"{path}: not an events file")
    _expect(version in EVENTS_VERSIONS_READ,
            f"{path}: events of version {version} (this pytrace_cffi reads versions "
            f"{', '.join(map(str, EVENTS_VERSIONS_READ))})")
    return version


def _index_blocks(events_file, threads, length):
    """Per thread, its blocks' (offset of the events, count, base ticks), read from
    the block headers alone."""
    path = events_file.path
    size = events_file.size
    if length is not None:          # a recovered process: its complete blocks only
        size = min(size, length)
    blocks = [[] for _ in threads]
    _expect(size >= EVENTS_HEADER.size, f"{path}: truncated header")
    offset = EVENTS_HEADER.size
    while offset < size:
        _expect(size - offset >= EVENT_BLOCK.size, f"{path}: truncated block header")
        at = offset
        index, reserved, count, base = EVENT_BLOCK.unpack(events_file.read(offset,
                                                                           EVENT_BLOCK.size))
        offset += EVENT_BLOCK.size
        _expect(index < len(threads), f"{path}: block at byte {at} for unknown thread {index}")
        _expect(reserved == 0, f"{path}: block at byte {at} is damaged (reserved field set)")
        # (the writer never writes an empty block: a file of them would be walked
        # 24 bytes at a time)
        _expect(count > 0, f"{path}: block at byte {at} is damaged (it holds no events)")
        _expect(count <= (size - offset) // EVENT_RECORD_SIZE,
                f"{path}: block at byte {at} is truncated")
        blocks[index].append((at, offset, count, base))
        offset += count * EVENT_RECORD_SIZE
    return blocks


class _FileEvents(EventSource):
    """A thread's events in events.bin, read a block at a time and checked as read:
    known keys, tags and args, and each block continuing the one before."""

    def __init__(self, events_file, thread, blocks, tick0, n_keys, n_tags, n_args, version):
        self.file, self.path = events_file, events_file.path
        self.version = version
        self.thread, self.index, self.blocks = thread, thread.index, blocks
        self.limits = (n_keys, n_tags, n_args)
        self.base_ticks = blocks[0][3] if blocks else tick0
        self.n_events = sum(count for _, _, count, _ in blocks)

    def describe(self):
        return f"{self.path}: thread {self.index} ({self.thread.name!r})"

    def runs(self):
        clock = None
        seen = 0
        most = max((count for _, _, count, _ in self.blocks), default=0)
        buffer = ffi.new("pt_event[]", max(1, min(most, BLOCK_READ_EVENTS)))
        for at, offset, count, base in self.blocks:
            # A thread's blocks continue one another: a block that starts
            # elsewhere means one between them is missing.
            _expect(clock is None or clock == base & TICKS_MASK,
                    f"{self.describe()}: the block at byte {at} does not continue the "
                    f"one before it (a block is missing)")
            clock = base & TICKS_MASK
            for first in range(0, count, BLOCK_READ_EVENTS):
                n = min(BLOCK_READ_EVENTS, count - first)
                size = n * EVENT_RECORD_SIZE
                _expect(self.file.read_into(offset + first * EVENT_RECORD_SIZE,
                                            ffi.buffer(buffer, size)) == size,
                        f"{self.path}: block at byte {at} is truncated")
                where = f"{self.describe()}, event"
                if self.version == 1:
                    bad = lib.pt_events_from_v1(buffer, n)     # made aux events, in place
                    _expect(bad < 0, f"{where} {seen + bad} (version 1) names a tag or "
                                     f"annotation args past 2^26, or a pause past 2^58 ticks")
                bad = lib.pt_validate_events(buffer, n, *self.limits)
                if bad >= 0:
                    kind = buffer[bad].key_kind & lib.PT_KIND_MASK
                    _expect(kind in KNOWN_KINDS, f"{where} {seen + bad} has kind {kind}, "
                                                 f"which is reserved")
                    raise TraceFormatError(f"{where} {seen + bad} names an unknown key, "
                                           f"tag or annotation args")
                seen += n
                clock = (clock + lib.pt_events_ticks(buffer, n)) & TICKS_MASK
                yield buffer, n
