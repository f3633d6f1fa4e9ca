"""Recovery of a process that ended without saving its trace (killed), or is
still running: its Trace from process.json, keys.jsonl and events.bin's
complete blocks, losing at most one chunk per thread."""
import os
import weakref

from .. import _clock
from .._core import ffi, lib
from .._torch import TAG_KINDS
from ..readers import packed_events
from .._safe_read import read_bounded
from ..model.saved import (BLOCK_READ_EVENTS, HeldFile as _HeldFile, events_version,
                           load_parts as _load_parts)
from ..model.saved_format import (EVENT_BLOCK, EVENT_RECORD_SIZE, EVENTS_HEADER, FORMAT_NAME,
                                  FORMAT_VERSION, INT64, KINDS, hash_id)
from ..errors import TraceFormatError
from .identity import (KEYS_FILE, _host, _is_pid, _process_facts, _read_json_file,
                       _read_jsonl)

def recover(directory, facts=None):
    """The Trace of a process directory that has no meta.json (its process was
    killed, or is still running), from process.json, keys.jsonl and events.bin's
    complete blocks. Nothing in the directory is changed. A damaged keys.jsonl
    costs the names (or the clock's start) it held, not the calls: read_process's
    note says what was damaged."""
    if facts is None:
        facts = _process_facts(directory)[0]
    return _recover(directory, facts)[0]


MAX_THREADS = 1 << 16       # a block for a thread index beyond: events.bin is damaged


class _NothingSpilled(TraceFormatError):
    """A process directory whose events.bin holds no block yet."""


def _recover(directory, facts):
    """(recover's Trace, phrases saying what was damaged and what it cost)."""
    facts = dict(facts)
    if not _is_pid(facts.get("pid")):
        raise TraceFormatError(f"{directory}: process.json lacks pid")
    if facts.get("clock_name") not in ("tsc", "monotonic"):
        raise TraceFormatError(f"{directory}: process.json lacks clock_name")
    records, damage = _key_records(os.path.join(directory, KEYS_FILE))
    path = os.path.join(directory, "events.bin")
    if not os.path.lexists(path):
        raise _NothingSpilled(f"{path}: nothing was spilled (no such file)")
    events_dir = directory
    if packed_events.is_packed(path):       # a flight recorder's dump: inflated aside
        events_dir = packed_events.inflated_directory(path)
        try:
            trace, damage = _recover_events(directory, facts, records, damage, events_dir)
        except BaseException:
            packed_events.remove(events_dir)
            raise
        weakref.finalize(trace, packed_events.remove, events_dir)
        return trace, damage
    return _recover_events(directory, facts, records, damage, events_dir)


def _recover_events(directory, facts, records, damage, events_dir):
    """_recover's Trace of directory, its events.bin in events_dir."""
    path = os.path.join(events_dir, "events.bin")
    events_file = _HeldFile(path)
    if events_file.size < EVENTS_HEADER.size:
        raise _NothingSpilled(f"{path}: nothing was spilled")
    sources = _key_sources(directory)
    blocks = _spilled_blocks(events_file, damage, _index_limits(records, sources),
                             events_version(events_file))
    if not blocks.threads:      # (a block cut short, or damaged: said in damage)
        raise _NothingSpilled("; ".join([f"{path}: no whole block of events"] + damage))
    start = next((r for r in records if r.get("first") == 0 and "start_ns" in r), None)
    if start is not None:
        tick0, start_ns = start["tick0"], start["start_ns"]
    elif blocks.threads:
        tick0 = blocks.first_base
        start_ns, how = _estimated_start(facts, tick0)
        damage.append(f"the clock's start was lost with {KEYS_FILE}'s first line: {how}")
    else:
        raise _NothingSpilled(f"{directory}: nothing was spilled yet")
    end_ticks = max(tick0, blocks.end_ticks if blocks.threads else tick0)
    keys, names, tags, unnamed = _recovered_keys(records, blocks.max_key, blocks.max_tag,
                                                 sources)
    if unnamed:
        damage.append(f"{unnamed} function{'s' if unnamed > 1 else ''} unnamed (no name in "
                      f"{KEYS_FILE})")
    # A region's args are known only at stop: a recovered region keeps its name.
    annotation_args = [{} for _ in range(blocks.max_args + 1)]
    ns_per_tick = _clock.ns_per_tick() if facts["clock_name"] == "tsc" else 1.0
    stop_ns = start_ns + int(float(end_ticks - tick0) * ns_per_tick)
    # OS thread ids are known only at stop (or in a flight recorder's dump):
    # lanes 1, 2, ... stand in for them.
    thread_list = [{"index": i, "native_id": i + 1, "ident": i + 1, "name": f"thread {i}",
                    "n_events": blocks.threads.get(i, 0), "dropped": 0}
                   for i in range(max(blocks.threads, default=-1) + 1)]
    _name_dumped_threads(directory, thread_list)
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "pid": facts["pid"],
            "python": facts.get("python", "?"), "backend": facts.get("backend", "?"),
            "clock": facts["clock_name"], "start_ns": start_ns, "stop_ns": stop_ns,
            "dropped_events": sum(t["dropped"] for t in thread_list), "keys": keys,
            "marks": [], "threads": thread_list, "tags": tags,
            "annotation_args": annotation_args,
            "events": {"file": "events.bin", "tick0": tick0, "ns0": start_ns,
                       "ns_per_tick": float(ns_per_tick), "stop_ticks": end_ticks,
                       "min_duration_ns": 0, "length": blocks.length}}
    return _load_parts(events_dir, meta, names, {"modules": [], "optimizer_steps": []}), damage


def _name_dumped_threads(directory, thread_list):
    """A flight recorder's dump knows its threads: threads.json (written by C:
    index, ident, OS id, the events its ring dropped), their names in dump.json
    (when Python wrote it) or else in journal.json (the recorder's). An asyncio
    task's lane (log_async) has no ident: journal.json names it by its OS id's
    stand-in."""
    known = _json_or_none(os.path.join(directory, "threads.json"))
    if not isinstance(known, list):
        return
    dumped = _json_or_none(os.path.join(directory, "dump.json"))
    journal = _json_or_none(os.path.join(directory, JOURNAL_FILE))
    names = _names_in(journal, "threads")           # ident -> name
    lanes = _names_in(journal, "lanes")             # native id -> name
    if isinstance(dumped, dict) and isinstance(dumped.get("threads"), list):
        names.update((str(t.get("ident")), t.get("name")) for t in dumped["threads"]
                     if isinstance(t, dict) and isinstance(t.get("name"), str))
    for entry in known:
        if not isinstance(entry, dict):
            continue
        index, native_id, ident = entry.get("index"), entry.get("native_id"), entry.get("ident")
        if not (type(index) is int and 0 <= index < len(thread_list) and _is_pid(native_id)
                and type(ident) is int and 0 <= ident < 2 ** 64):
            continue
        if ident:
            name = names.get(str(ident)) or f"thread {native_id}"
        else:       # (a lane first seen since the journal was last written: unnamed)
            name = lanes.get(str(native_id)) or "task (not named yet at the dump)"
        thread_list[index].update(native_id=native_id, ident=ident, name=name)
        dropped = entry.get("dropped")
        if type(dropped) is int and 0 <= dropped < 2 ** 63:
            thread_list[index]["dropped"] = dropped


def _names_in(journal, field):
    """journal.json's field: a dict of str -> name (empty when damaged)."""
    found = journal.get(field) if isinstance(journal, dict) else None
    if not isinstance(found, dict):
        return {}
    return {key: name for key, name in found.items() if isinstance(name, str)}


def _json_or_none(path):
    try:
        return _read_json_file(path)
    except (OSError, TraceFormatError):
        return None


class _Blocks:
    """What events.bin's complete blocks hold: events per thread index, the
    earliest block's base and the latest clock, the highest key, tag and
    annotation args index the events name, and the length read."""

    def __init__(self):
        self.threads, self.first_base, self.end_ticks = {}, None, None
        self.max_key = self.max_tag = 0
        self.max_args = -1
        self.length = 0


# How far past the keys (tags) keys.jsonl and key_sources.tsv name an event's key
# (tag) may be: those first seen since the last line was written (0.25 s of a
# recorder's journal, a chunk of a spill). Beyond it the block is damaged: its
# index would size the tables read back (a flipped byte: billions of entries).
MAX_UNNAMED_INDEXES = 1 << 16
MAX_ANNOTATION_ARGS = 1 << 20       # regions' arg sets: known only at stop, none named


def _index_limits(records, sources):
    """The highest key, tag and annotation args index + 1 events may name
    (pt_events_extent's `needed`), from what keys.jsonl's records and
    key_sources.tsv name."""
    named_keys = max([r["first"] + len(r["keys"]) for r in records] + [max(sources, default=0)
                                                                       + 1])
    named_tags = max([r.get("tags_first", 0) + len(r.get("tags", [])) for r in records] + [1])
    return (named_keys + MAX_UNNAMED_INDEXES, named_tags + MAX_UNNAMED_INDEXES,
            MAX_ANNOTATION_ARGS)


def _spilled_blocks(events_file, damage, limits, version):
    """_Blocks of events_file, read a piece at a time up to its last complete block
    (a running or killed process's last one may be cut), or up to a block that is
    damaged (said in damage): a bad header, or an index past limits (see
    _index_limits). version: the file's events' (version 1's are made aux events
    as read)."""
    path = events_file.path
    blocks = _Blocks()
    offset = EVENTS_HEADER.size
    needed = ffi.new("uint64_t[3]")         # keys, tags, annotation args
    piece = ffi.new("pt_event[]", BLOCK_READ_EVENTS)
    while events_file.size - offset >= EVENT_BLOCK.size:
        index, reserved, count, base = EVENT_BLOCK.unpack(events_file.read(offset,
                                                                           EVENT_BLOCK.size))
        body = offset + EVENT_BLOCK.size
        if index >= MAX_THREADS or reserved or not count:     # (never written empty)
            damage.append(f"{path} is damaged at byte {offset}: the "
                          f"{events_file.size - offset} bytes from there are left out")
            break
        if count > (events_file.size - body) // EVENT_RECORD_SIZE:
            break
        ticks = base
        before = list(needed)
        for first in range(0, count, BLOCK_READ_EVENTS):
            n = min(BLOCK_READ_EVENTS, count - first)
            size = n * EVENT_RECORD_SIZE
            if events_file.read_into(body + first * EVENT_RECORD_SIZE,
                                     ffi.buffer(piece, size)) != size:
                raise TraceFormatError(f"{path}: changed while it was read")
            if version == 1:    # (one that cannot be made aux: load() says which)
                lib.pt_events_from_v1(piece, n)
            ticks += lib.pt_events_ticks(piece, n)
            lib.pt_events_extent(piece, n, needed)
        if any(needed[i] > limits[i] for i in range(3)):
            needed[0:3] = before
            damage.append(f"{path} is damaged at byte {offset}: its events name a function, "
                          f"tag or region far beyond those named; the "
                          f"{events_file.size - offset} bytes from there are left out")
            break
        if index not in blocks.threads:
            blocks.first_base = base if blocks.first_base is None else min(blocks.first_base,
                                                                           base)
        blocks.end_ticks = ticks if blocks.end_ticks is None else max(blocks.end_ticks, ticks)
        blocks.threads[index] = blocks.threads.get(index, 0) + count
        offset = body + count * EVENT_RECORD_SIZE
    blocks.max_key, blocks.max_tag = max(0, needed[0] - 1), max(0, needed[1] - 1)
    blocks.max_args = needed[2] - 1
    blocks.length = offset
    return blocks


def _estimated_start(facts, tick0):
    """(CLOCK_MONOTONIC ns at tick0, how that was found) for a process whose
    clock start was lost: the same clock (monotonic ticks are its ns), or this
    host's TSC read now (the same host and boot: the TSC is invariant)."""
    if facts["clock_name"] == "monotonic":
        return tick0, "its times are kept (CLOCK_MONOTONIC)"
    if _clock.USE_TSC and facts.get("host") in (None, _host()):
        ticks, ns = _clock.reading()
        return (ns - int(float(ticks - tick0) * _clock.ns_per_tick()),
                "its times are mapped through this host's TSC now, exact unless it rebooted "
                "since")
    return 0, "its times could not be placed (another host's TSC): they count from 0"


def _key_records(path):
    """(the well-formed records of a process's keys.jsonl, phrases for the lines
    that are not, each left out)."""
    records = []
    numbered, damage = _read_jsonl(path)
    name = os.path.basename(path)
    for number, record in numbered:
        problem = _key_record_problem(record, KINDS, TAG_KINDS, INT64)
        if problem:
            damage.append(f"{name} line {number} has {problem}")
            continue
        names = {hid: text for hid, text in record["names"].items()
                 if str(hash_id(text)) == hid}
        if len(names) < len(record["names"]):
            damage.append(f"{name} line {number}: {len(record['names']) - len(names)} "
                          "names do not match their hash ids")
        records.append(dict(record, names=names))
    return records, damage


def _key_record_problem(record, kinds, tag_kinds, int64):
    """What is wrong with a keys.jsonl record (see _KeyNames), or None."""
    def integer(value, low=0, high=int64[1]):
        return type(value) is int and low <= value <= high
    if not integer(record.get("first")) or not integer(record.get("tags_first", 0)):
        return "a bad first or tags_first"
    keys, names, tags = record.get("keys"), record.get("names"), record.get("tags", [])
    if not isinstance(keys, list) or not all(
            isinstance(k, list) and len(k) == 3 and isinstance(k[0], str) and k[1] in kinds
            and integer(k[2], 0, lib.PT_HIDE_STARTUP) for k in keys):
        return "bad keys"
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        return "bad names"
    if not isinstance(tags, list) or not all(
            (t is None and record.get("tags_first", 0) + i == 0)     # index 0: no tag
            or isinstance(t, dict) and isinstance(t.get("name"), str)
            and t.get("kind") in tag_kinds
            and (t.get("kind") != "module" or integer(t.get("module_id"), *int64))
            for i, t in enumerate(tags)):
        return "bad tags"
    if ("start_ns" in record or "tick0" in record) and not (
            record["first"] == 0 and integer(record.get("start_ns"), *int64)
            and integer(record.get("tick0"), *int64)):
        return "bad start_ns or tick0"
    return None


MAX_KEY_SOURCES_BYTES = 64 << 20
JOURNAL_FILE = "journal.json"       # a flight recorder's (flight/recorder.py)


def _key_sources(directory, name="key_sources.tsv", files=None):
    """A flight recorder dump's key_sources.tsv (written by C, pt_keys.c): key ->
    "file(line): name" of the code keys (the file trimmed as the process trimmed
    its paths: journal.json) and the names of the built-ins, for those keys.jsonl
    does not name. files: a dict given is filled with key -> the code's file,
    untrimmed."""
    path = os.path.join(directory, name)
    try:        # (a FIFO, a link out of the dump, a huge file: their names are lost)
        data = read_bounded(path, MAX_KEY_SOURCES_BYTES)
    except (OSError, TraceFormatError):
        return {}
    from .._names import trim_path
    journal = _json_or_none(os.path.join(directory, JOURNAL_FILE))
    prefixes = journal.get("path_prefixes") if isinstance(journal, dict) else None
    if not isinstance(prefixes, list) or not all(isinstance(p, str) for p in prefixes):
        prefixes = ()
    sources = {}
    for line in data.decode("utf-8", "replace").splitlines():
        fields = line.split("\t")
        if len(fields) == 4 and fields[0].isdigit():
            sources[int(fields[0])] = f"{trim_path(fields[1], prefixes)}({fields[2]}): {fields[3]}"
            if files is not None:
                files[int(fields[0])] = fields[1]
        elif len(fields) == 2 and fields[0].isdigit():     # a built-in's
            sources[int(fields[0])] = fields[1]
    return sources


def _recovered_keys(records, max_key, max_tag, sources=None):
    """(meta.json's keys, hashes.json's names, the tags, how many keys the events
    use have no name) from keys.jsonl's records, each key and tag placed at its own
    index (a damaged line costs its own names only)."""
    by_key, names, by_tag = {}, {}, {}
    for record in records:
        for offset, entry in enumerate(record["keys"]):
            by_key.setdefault(record["first"] + offset, entry)
        names.update(record["names"])
        for offset, tag in enumerate(record.get("tags", [])):
            by_tag.setdefault(record.get("tags_first", 0) + offset, tag)
    keys, unnamed = [], 0
    for key in range(max(max(by_key, default=0), max_key) + 1):
        hid, kind, hide = by_key.get(key, [None, "python", 0])
        if hid not in names:
            name = ("<unknown>" if key == 0 else (sources or {}).get(key)
                    or f"<unnamed key {key}>")
            unnamed += key != 0 and key <= max_key
            hid = str(hash_id(name))
            names[hid] = name
        keys.append([hid, kind, {}, hide])
    tags = [None] + [by_tag.get(t) or {"kind": "module", "name": f"<unnamed tag {t}>",
                                       "module_id": t}
                     for t in range(1, max(max(by_tag, default=0), max_tag) + 1)]
    return keys, names, tags, unnamed

