"""The saved-trace directory's format: what its owner (model/saved.py: save,
save_spilled, load), the spill of a running session (spill.py) and the
recovery of a process that did not save its own (follow/recover.py) share.

    meta.json    format name and version, process and clock facts, threads, keys
    hashes.json  hash id -> name for every function, module and step seen, plus
                 torch_npu's exit entry
    params.json  parameter metadata (record_params=True), else empty lists
    slices.bin   the calls, in the C core's pt_slice layout (see docs/FORMAT.md)
    events.bin   instead of slices.bin when tracing spilled under max_events: the
                 raw 8-byte events in per-thread blocks, walked by load(); its
                 header has a version of its own (EVENTS_VERSION)

A hash id is the first 8 bytes of BLAKE2b (digest_size=8) of the UTF-8 name, read
little-endian: the same name gives the same id in every run and process (a name
from a path that is not UTF-8: of its bytes, see name_bytes).
"""
import json
import os
import struct

try:
    # hashlib's own BLAKE2b, without hashlib: importing hashlib loads OpenSSL's
    # module too, a few ms of every `run`'s start for a hash it does not need
    from _blake2 import blake2b
except ImportError:                 # an interpreter built without _blake2
    from hashlib import blake2b

from .._core import ffi, lib
from .._files import replaced_atomically
from .._jsontext import dump
from .._torch import EXIT_EVENT_NAME

FORMAT_NAME = "pytrace_cffi-trace"
FORMAT_VERSION = 1
SLICES_MAGIC = b"PTSLICES"
SLICES_HEADER = struct.Struct("<8sIIQ")      # magic, version, record size, record count
SLICE_RECORD_SIZE = 40
EVENTS_MAGIC = b"PTEVENTS"
EVENTS_HEADER = struct.Struct("<8sII")          # magic, version, record size
# events.bin's own version: what its events mean (pt_record.h's kinds). Written:
# always the C core's; read: that and version 1 (TAG, ARGS and TIME as kinds 5-7,
# made aux events as read: pt_events_from_v1).
EVENTS_VERSION = lib.PT_EVENTS_VERSION
EVENTS_VERSIONS_READ = (1, EVENTS_VERSION)
EVENT_BLOCK = struct.Struct("<IIQq")            # thread index, reserved, count, base ticks
EVENT_RECORD_SIZE = 8
TICKS_MASK = (1 << 64) - 1                      # block clocks compare mod 2^64
KINDS = ("python", "c", "annotation")

INT64 = (-2 ** 63, 2 ** 63 - 1)
UINT64 = (0, 2 ** 64 - 1)
# What makes a directory a saved trace: written last, so a directory without it is
# an incomplete save.
META_FILE = "meta.json"

# pt_slice as packed native-order bytes: start, end, key, flags, parent, tag, depth
# (slices.bin's records; the JSON reader packs its calls so, the page reads them so).
SLICE_RECORD = struct.Struct("=qqIIqII")
_SLICE_FIELDS = ("start", "end", "key", "flags", "parent", "tag", "depth")
# Reading slices as raw bytes is only right while the C struct keeps this layout.
if (ffi.sizeof("pt_slice") != SLICE_RECORD.size or SLICE_RECORD.size != SLICE_RECORD_SIZE or
        [ffi.offsetof("pt_slice", field) for field in _SLICE_FIELDS] != [0, 8, 16, 20, 24, 32, 36]):
    raise ImportError("pytrace_cffi.model.saved_format: the pt_slice layout changed; "
                      "update SLICE_RECORD")


def hash_id(name):
    """The stable 64-bit id of a name."""
    return int.from_bytes(blake2b(name_bytes(name), digest_size=8).digest(), "little")


def name_bytes(name):
    """A name's UTF-8 bytes. A name from a path that is not UTF-8 holds its
    undecodable bytes as lone surrogates (surrogateescape, as Python shows it): those
    are its bytes again; any other lone surrogate is kept as surrogatepass spells it."""
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogatepass")


def meta(pid, python, backend, clock, start_ns, stop_ns, dropped, names, key_kinds,
         key_args, marks, realtime_anchor=None):
    """meta.json's facts common to a saved and a spilled trace (threads: the caller's)."""
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "pid": pid,
        "python": python,
        "backend": backend,
        "clock": clock,
        "start_ns": start_ns,
        "stop_ns": stop_ns,
        "dropped_events": dropped,
        "realtime_anchor": realtime_anchor,
        "hash": "blake2b-64-le",
        # key -> [hash id, kind, extra args]; key 0 is "unknown"
        "keys": [[str(hash_id(name)), kind, key_args.get(key, {})]
                 for key, (name, kind) in enumerate(zip(names, key_kinds))],
        # instants ("i") and counter samples ("C"): [kind, ns, thread id, name, args],
        # args always an object (see docs/FORMAT.md)
        "marks": [list(mark) for mark in marks],
    }


def thread_meta(thread, n_slices, pid=None):
    entry = {"index": thread.index, "native_id": thread.native_id, "ident": thread.ident,
             "name": thread.name, "n_events": thread.n_events, "dropped": thread.dropped}
    if pid is not None:
        entry["pid"] = pid          # a trace of several processes: whose thread
    if n_slices is not None:
        entry["n_slices"] = n_slices
    return entry


def names_file(names):
    """hashes.json's content: hash id -> name."""
    hashes = {str(hash_id(name)): name for name in names}
    hashes[str(hash_id(EXIT_EVENT_NAME))] = EXIT_EVENT_NAME
    return hashes


def write_names(directory, names, params):
    write_json(os.path.join(directory, "hashes.json"), names_file(names))
    write_json(os.path.join(directory, "params.json"), params)


def update_meta(directory, extra):
    """Adds extra's fields to directory's meta.json (a saved trace's)."""
    path = os.path.join(directory, "meta.json")
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    meta.update(extra)
    write_json(path, meta)


def write_json(path, data):
    # No bare NaN (see _jsontext); a name's lone surrogates stay (\udcXX escapes).
    with replaced_atomically(path, lambda tmp: open(tmp, "w", encoding="utf-8")) as out:
        dump(data, out)
