"""The pieces of a .pftrace every writer of one needs (render/perfetto.py, the
live windows of follow/live.py, merge_perfetto.py): TracePacket entries, debug
annotations made of JSON-like args, and PacketSink, which writes packets as they
are or deflated into compressed_packets on threads of its own."""
import collections
import math
import queue
import threading

from .._core import ffi, lib
from .._jsontext import MAX_ARGS_DEPTH
from .protobuf import bytes_field as _bytes, double_field as _double, int_field as _int

# Input of one compressed_packets packet: well under 512 KiB, so a reader inflates
# the file in small pieces; more would not help deflate, whose window is 32 KiB.
COMPRESSED_INPUT_BYTES = 256 << 10
# libdeflate level 1 (c_src/pt_deflate.c; docs/PERFORMANCE.md, "Compression"): one
# thread deflates at 1.6-3.2x zlib level 3's speed (what this wrote before), about as
# fast as the packets are encoded, for 16-30% more bytes (~3.1 a call on fib), fewer
# than zlib level 1's. Level 4: 4-6% under zlib 3's size at 1.0-1.8x its speed.
COMPRESS_LEVEL = 1
COMPRESS_THREADS = 2
CLOCK_MONOTONIC = 3                 # BuiltinClock BUILTIN_CLOCK_MONOTONIC
CLOCK_REALTIME = 1                  # BuiltinClock BUILTIN_CLOCK_REALTIME
SEQ_INCREMENTAL_STATE_CLEARED = 1
TYPE_INSTANT, TYPE_COUNTER = 3, 4    # TrackEvent.Type (SLICE_BEGIN/END: in C)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def packet(*fields):
    """A Trace.packet entry made of TracePacket fields."""
    return _bytes(1, b"".join(fields))


def annotation_value(value, depth=0):
    """DebugAnnotation value fields for a JSON-like value (loaded traces refuse
    args nested deeper than MAX_ARGS_DEPTH: deeper ones are cut, never recursed)."""
    if isinstance(value, bool):
        return _int(2, int(value))
    if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        return _int(4, value)
    if isinstance(value, float) and math.isfinite(value):
        return _double(5, value)
    if isinstance(value, str):
        return _bytes(6, value)
    if isinstance(value, (dict, list, tuple)) and depth >= MAX_ARGS_DEPTH:
        return _bytes(6, "<nested too deeply>")
    if isinstance(value, dict):
        return b"".join(_bytes(11, _bytes(10, str(k)) + annotation_value(v, depth + 1))
                        for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return b"".join(_bytes(12, annotation_value(v, depth + 1)) for v in value)
    if value is None:
        return _bytes(9, "null")    # legacy_json_value: what the JSON says
    return _bytes(6, repr(value))   # inf, nan, huge ints: as Python writes them


def counter_value(value):
    """A COUNTER TrackEvent's value field: an int64 as an int, else a double."""
    if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        return _int(30, value)
    return _double(44, float(value))


class AnnotationNames:
    """Interned debug annotation names (iid per name), shared by every sequence."""

    def __init__(self):
        self.iids = {}

    def annotations(self, args):
        """TrackEvent debug_annotations fields (4) for a dict of args, names interned."""
        out = []
        for name, value in args.items():
            iid = self.iids.setdefault(str(name), len(self.iids) + 1)
            out.append(_bytes(4, _int(1, iid) + annotation_value(value)))
        return b"".join(out)

    @staticmethod
    def plain(args):
        """The same with names spelled out (sequence 1 interns nothing)."""
        return b"".join(_bytes(4, _bytes(10, str(name)) + annotation_value(value))
                        for name, value in args.items())

    def interned(self):
        """InternedData debug_annotation_names fields (3)."""
        return b"".join(_bytes(3, _int(1, iid) + _bytes(2, name))
                        for name, iid in self.iids.items())


class Deflater:
    """One pt_deflater (c_src/pt_deflate.c) and its output buffer: used by one
    thread at a time. cffi lets go of the GIL while it deflates."""

    def __init__(self, level):
        deflater = lib.pt_deflater_new(level)
        if deflater == ffi.NULL:
            raise MemoryError(f"pytrace_cffi: no deflater of level {level}")
        self.deflater = ffi.gc(deflater, lib.pt_deflater_free)
        self.cap = 0
        self.out = None

    def compress(self, data):
        """data (bytes) as one zlib stream, in bytes."""
        bound = lib.pt_deflate_bound(self.deflater, len(data))
        if bound > self.cap:
            self.cap = max(bound, lib.pt_deflate_bound(self.deflater, COMPRESSED_INPUT_BYTES))
            self.out = ffi.new("char[]", self.cap)
        size = lib.pt_deflate_zlib(self.deflater, data, len(data), self.out, self.cap)
        if size == 0:
            raise RuntimeError("pytrace_cffi: deflate's output did not fit its bound")
        return ffi.buffer(self.out, size)[:]


class PacketSink:
    """Writes whole Trace.packet entries, or deflates them into compressed_packets
    packets of at most COMPRESSED_INPUT_BYTES input each, with libdeflate at
    COMPRESS_LEVEL (a deflater per thread that deflates). The deflate lets go of
    the GIL while it works, so pieces are deflated on COMPRESS_THREADS threads
    while the next ones are encoded; at most twice that many wait, and they are
    written in order. While a trace records (an export from a traced program)
    they are deflated here instead: threads of ours must not show in a trace."""

    def __init__(self, out, compress):
        self.out = out
        self.compress = compress
        self.pending = []
        self.pending_bytes = 0
        self.finishing = False
        self.in_flight = collections.deque()
        self.deflaters = threading.local()
        # made for the second piece: a small file (an empty run's) starts no threads
        self.pool = None
        self.pooled = compress and not _recording()

    def _deflate(self, data):
        deflater = getattr(self.deflaters, "deflater", None)
        if deflater is None:
            deflater = self.deflaters.deflater = Deflater(COMPRESS_LEVEL)
        return deflater.compress(data)

    def write(self, data):
        """data may be a view of a buffer about to be reused: written or copied now."""
        if not self.compress:
            self.out.write(data)
            return
        if self.pending_bytes + len(data) > COMPRESSED_INPUT_BYTES:
            self._submit()
        self.pending.append(bytes(data))
        self.pending_bytes += len(data)

    def _submit(self):
        if self.pending and self.pool is None and self.pooled and not self.finishing:
            try:
                self.pool = _DeflatePool(self._deflate, COMPRESS_THREADS)
            except RuntimeError:        # 3.12+ at the interpreter's exit: no new threads
                self.pooled = False
        if self.pending and self.pool is None:
            self.out.write(packet(_bytes(50, self._deflate(b"".join(self.pending)))))
            self.pending, self.pending_bytes = [], 0
        elif self.pending:
            self.in_flight.append(self.pool.submit(b"".join(self.pending)))
            self.pending, self.pending_bytes = [], 0
        while len(self.in_flight) > 2 * COMPRESS_THREADS:
            self._write_oldest()

    def _write_oldest(self):
        self.out.write(packet(_bytes(50, self.in_flight.popleft().result())))

    def finish(self):
        if self.compress:
            self.finishing = not self.in_flight    # one piece in all: deflated here
            self._submit()
            self.finishing = False
            while self.in_flight:
                self._write_oldest()

    def close(self):
        """Stops the threads (their deflaters go with them); on failure the
        pieces still waiting are dropped."""
        if self.pool is not None:
            for piece in self.in_flight:
                piece.cancel()
            self.pool.shutdown()
        self.deflaters = None


class _Piece:
    """A piece handed to a _DeflatePool: its deflated bytes once done."""
    __slots__ = ("data", "done", "deflated", "error")

    def __init__(self, data):
        self.data = data
        self.done = threading.Event()
        self.deflated = self.error = None

    def cancel(self):
        self.data = None            # (a worker that has not taken it skips it)

    def result(self):
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.deflated


class _DeflatePool:
    """Threads that deflate the pieces queued to them, in any order (each piece
    says when it is done). Not concurrent.futures: importing it registers an
    exit hook (threading._register_atexit) that a trace of the interpreter's
    exit would show as the program's, and imports logging (~5 ms)."""

    def __init__(self, deflate, count):
        self.queue = queue.SimpleQueue()
        self.threads = []
        for _ in range(count):
            thread = threading.Thread(target=self._work, args=(deflate,), daemon=True,
                                      name="pytrace_cffi-deflate")
            try:
                thread.start()
            except RuntimeError:        # (the interpreter's exit: said by the caller)
                self.shutdown()
                raise
            self.threads.append(thread)

    def _work(self, deflate):
        while True:
            piece = self.queue.get()
            if piece is None:
                return
            data, piece.data = piece.data, None
            try:
                if data is not None:
                    piece.deflated = deflate(data)
            except BaseException as exc:    # noqa: B902 - handed to whoever waits for it
                piece.error = exc
            finally:
                piece.done.set()

    def submit(self, data):
        piece = _Piece(data)
        self.queue.put(piece)
        return piece

    def shutdown(self):
        for _ in self.threads:
            self.queue.put(None)
        for thread in self.threads:
            thread.join()


def _recording():
    """Whether this process is tracing now (start() without its stop())."""
    from .._running import has_session
    return has_session()
