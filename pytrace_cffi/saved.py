"""The saved-trace directory: JSON and one raw little-endian file, nothing executable.

    meta.json    format name and version, process and clock facts, threads, keys
    hashes.json  hash id -> name for every function, module and step seen, plus
                 torch_npu's exit entry
    params.json  parameter metadata (record_params=True), else empty lists
    slices.bin   the calls, in the C core's pt_slice layout (see FORMAT.md)

A hash id is the first 8 bytes of BLAKE2b (digest_size=8) of the UTF-8 name, read
little-endian: the same name gives the same id in every run and process.
"""
import hashlib
import json
import os
import struct
import sys

from ._core import ffi, lib
from ._torch import EXIT_EVENT_NAME
from .errors import TraceFormatError

FORMAT_NAME = "pytrace_cffi-trace"
FORMAT_VERSION = 1
SLICES_MAGIC = b"PTSLICES"
SLICES_HEADER = struct.Struct("<8sIIQ")      # magic, version, record size, record count
SLICE_RECORD_SIZE = 40
KINDS = ("python", "c", "annotation")


def hash_id(name):
    """The stable 64-bit id of a name."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(),
                          "little")


def save(trace, directory):
    if sys.byteorder != "little":
        raise TraceFormatError("saving needs a little-endian host")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    hashes = {str(hash_id(name)): name for name in trace.names}
    hashes[str(hash_id(EXIT_EVENT_NAME))] = EXIT_EVENT_NAME
    meta = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "pid": trace.pid,
        "python": trace.python_version,
        "backend": trace.backend,
        "clock": trace.clock,
        "start_ns": trace.start_ns,
        "stop_ns": trace.stop_ns,
        "dropped_events": trace.dropped_events,
        "hash": "blake2b-64-le",
        "threads": [{"index": t.index, "native_id": t.native_id, "ident": t.ident,
                     "name": t.name, "n_events": t.n_events, "dropped": t.dropped,
                     "n_slices": n} for t, _, n in trace.thread_slices()],
        # key -> [hash id, kind, extra args]; key 0 is "unknown"
        "keys": [[str(hash_id(name)), kind, trace.key_args.get(key, {})]
                 for key, (name, kind) in enumerate(zip(trace.names, trace.key_kinds))],
        # instants ("i") and counter samples ("C"): [kind, ns, thread id, name, args]
        "marks": [list(mark) for mark in trace.marks],
    }
    _write_json(os.path.join(directory, "hashes.json"), hashes)
    _write_json(os.path.join(directory, "params.json"), trace.params)
    total = sum(n for _, _, n in trace.thread_slices())
    tmp = os.path.join(directory, "slices.bin.tmp")
    with open(tmp, "wb") as out:
        out.write(SLICES_HEADER.pack(SLICES_MAGIC, FORMAT_VERSION, SLICE_RECORD_SIZE, total))
        for _, slices, n in trace.thread_slices():
            out.write(ffi.buffer(slices, n * SLICE_RECORD_SIZE))
    os.replace(tmp, os.path.join(directory, "slices.bin"))
    # meta.json last: a directory without it is an incomplete save.
    _write_json(os.path.join(directory, "meta.json"), meta)


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.replace(tmp, path)


def _read_json(directory, name):
    path = os.path.join(directory, name)
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise TraceFormatError(f"{directory!r} is not a saved trace: {name} is missing") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from None


def _expect(condition, message):
    if not condition:
        raise TraceFormatError(message)


def _int(value, what):
    _expect(isinstance(value, int) and not isinstance(value, bool), f"{what} must be an integer")
    return value


def load(directory):
    from .trace import Mark, ThreadInfo, Trace
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
    _expect(isinstance(hashes, dict) and all(isinstance(v, str) for v in hashes.values()),
            "hashes.json must map ids to names")
    _expect(isinstance(params, dict), "params.json must be an object")

    keys = meta.get("keys")
    _expect(isinstance(keys, list) and keys, "meta.json: keys missing")
    names, key_kinds, key_args = [], [], {}
    for key, entry in enumerate(keys):
        _expect(isinstance(entry, list) and len(entry) == 3, f"meta.json: bad key {key}")
        hid, kind, args = entry
        _expect(hid in hashes, f"meta.json: key {key} has no name in hashes.json")
        _expect(kind in KINDS, f"meta.json: key {key} has kind {kind!r}")
        _expect(isinstance(args, dict), f"meta.json: key {key} args must be an object")
        names.append(hashes[hid])
        key_kinds.append(kind)
        if args:
            key_args[key] = args

    threads_meta = meta.get("threads")
    _expect(isinstance(threads_meta, list), "meta.json: threads missing")
    threads, counts = [], []
    for index, t in enumerate(threads_meta):
        _expect(isinstance(t, dict), f"meta.json: bad thread {index}")
        name = t.get("name")
        _expect(isinstance(name, str), f"meta.json: thread {index} has no name")
        threads.append(ThreadInfo(index, _int(t.get("native_id"), "native_id"),
                                  _int(t.get("ident"), "ident"), name,
                                  _int(t.get("n_events"), "n_events"),
                                  _int(t.get("dropped"), "dropped")))
        counts.append(_int(t.get("n_slices"), "n_slices"))
        _expect(counts[-1] >= 0, "n_slices must not be negative")

    marks = meta.get("marks", [])
    _expect(isinstance(marks, list), "meta.json: marks must be a list")
    for mark in marks:
        _expect(isinstance(mark, list) and len(mark) == 5 and mark[0] in ("i", "C")
                and isinstance(mark[3], str) and isinstance(mark[4], dict),
                f"meta.json: bad mark {mark!r:.80}")
        _int(mark[1], "mark time")
        _int(mark[2], "mark thread")
    marks = [Mark(*mark) for mark in marks]

    path = os.path.join(directory, "slices.bin")
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            header = f.read(SLICES_HEADER.size)
            _expect(len(header) == SLICES_HEADER.size, f"{path}: truncated header")
            magic, version, record_size, total = SLICES_HEADER.unpack(header)
            _expect(magic == SLICES_MAGIC, f"{path}: not a slices file")
            _expect(version == FORMAT_VERSION and record_size == SLICE_RECORD_SIZE,
                    f"{path}: version {version}, record size {record_size} unsupported")
            _expect(total == sum(counts), f"{path}: {total} slices, meta.json says {sum(counts)}")
            _expect(size == SLICES_HEADER.size + total * SLICE_RECORD_SIZE,
                    f"{path}: {size} bytes, expected "
                    f"{SLICES_HEADER.size + total * SLICE_RECORD_SIZE} (truncated or padded)")
            slices = []
            for index, n in enumerate(counts):
                array = ffi.new("pt_slice[]", max(1, n))
                data = f.read(n * SLICE_RECORD_SIZE)
                _expect(len(data) == n * SLICE_RECORD_SIZE, f"{path}: truncated")
                ffi.memmove(array, data, len(data))
                bad = lib.pt_validate_slices(array, n, len(names))
                _expect(bad < 0, f"{path}: thread {index}, slice {bad} is inconsistent")
                slices.append((array, n))
    except OSError as exc:
        raise TraceFormatError(f"{path}: {exc}") from None

    return Trace(names=names, key_kinds=key_kinds, key_args=key_args, threads=threads,
                 slices=slices, start_ns=_int(meta.get("start_ns"), "start_ns"),
                 stop_ns=_int(meta.get("stop_ns"), "stop_ns"), pid=_int(meta.get("pid"), "pid"),
                 python_version=str(meta.get("python")), backend=str(meta.get("backend")),
                 clock=str(meta.get("clock")), params=params, marks=marks,
                 dropped_events=_int(meta.get("dropped_events"), "dropped_events"))
