"""zlib-format deflate through the vendored libdeflate (c_src/pt_deflate.c), and
the .pftrace writer that uses it: whatever goes in, zlib.decompress gives back;
a cap too small is 0, never an overrun; levels outside 0..12 are refused; a
compressed .pftrace holds the bytes of the uncompressed one and reads back as
the same calls."""
import os
import threading
import zlib

import pytest
from hypothesis import given, settings, strategies as st

import pytrace_cffi
from pytrace_cffi._core import ffi, lib
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render import perfetto_packets

LEVELS = range(lib.PT_DEFLATE_MIN_LEVEL, lib.PT_DEFLATE_MAX_LEVEL + 1)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def deflater(level):
    d = lib.pt_deflater_new(level)
    assert d != ffi.NULL
    return ffi.gc(d, lib.pt_deflater_free)


def deflate(d, data, cap=None):
    """pt_deflate_zlib's output (bytes), b"" when it returned 0."""
    cap = lib.pt_deflate_bound(d, len(data)) if cap is None else cap
    out = ffi.new("char[]", max(cap, 1))
    n = lib.pt_deflate_zlib(d, data, len(data), out, cap)
    assert n <= cap
    return ffi.buffer(out, n)[:]


def test_the_level_range_is_libdeflates():
    assert (lib.PT_DEFLATE_MIN_LEVEL, lib.PT_DEFLATE_MAX_LEVEL) == (0, 12)
    assert perfetto_packets.COMPRESS_LEVEL in LEVELS


@pytest.mark.parametrize("level", [-1, 13, 100, -(1 << 31), (1 << 31) - 1])
def test_a_level_out_of_range_is_refused_not_clamped(level):
    assert lib.pt_deflater_new(level) == ffi.NULL
    with pytest.raises(MemoryError, match=f"level {level}"):
        perfetto_packets.Deflater(level)


def test_freeing_null_is_nothing_and_a_null_deflater_deflates_nothing():
    lib.pt_deflater_free(ffi.NULL)
    out = ffi.new("char[]", 64)
    assert lib.pt_deflate_zlib(ffi.NULL, b"abc", 3, out, 64) == 0
    # the bound of no deflater holds for every level
    assert all(lib.pt_deflate_bound(ffi.NULL, n) >= lib.pt_deflate_bound(deflater(level), n)
               for level in LEVELS for n in (0, 1, 1000, 1 << 20))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("data", [b"", b"x", b"ab" * 3, bytes(range(256))],
                         ids=["empty", "one byte", "tiny", "256 distinct"])
def test_small_inputs_round_trip_at_every_level(level, data):
    out = deflate(deflater(level), data)
    assert out and zlib.decompress(out) == data
    assert zlib.decompressobj().decompress(out) == data     # one whole stream


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=70000), level=st.sampled_from(LEVELS))
def test_random_bytes_round_trip(data, level):
    assert zlib.decompress(deflate(deflater(level), data)) == data


@pytest.mark.parametrize("level", [0, 1, 4, 6, 12])
def test_incompressible_input_fits_its_bound(level):
    data = os.urandom(1 << 20)
    d = deflater(level)
    out = deflate(d, data)
    assert zlib.decompress(out) == data
    assert len(data) < len(out) <= lib.pt_deflate_bound(d, len(data))


@pytest.mark.parametrize("level", [1, 4, 6, 9, 12])
def test_large_repetitive_input_shrinks(level):
    data = b"".join(b"\x0a\x0e\x40%c\x50\x02\x5a\x06\x48\x01\x50\x01\x18\x01" % (i % 251)
                    for i in range(1 << 17)) * 4            # 7 MiB of packet-like bytes
    out = deflate(deflater(level), data)
    assert zlib.decompress(out) == data
    assert len(out) * 50 < len(data)


@pytest.mark.parametrize("level", [0, 1, 4, 12])
def test_a_cap_too_small_returns_0(level):
    d = deflater(level)
    data = os.urandom(3000) + bytes(5000)
    whole = deflate(d, data)
    assert deflate(d, data, cap=len(whole)) == whole          # exactly enough
    for cap in (0, 1, 5, len(whole) // 2, len(whole) - 1):
        assert deflate(d, data, cap=cap) == b"", cap
    # the deflater still works after a refusal
    assert deflate(d, data) == whole


def test_deflaters_on_threads_of_their_own_give_the_same_bytes():
    """A deflater per thread, the GIL let go around each call: the output is the
    same as on one thread (libdeflate is deterministic)."""
    pieces = [bytes(range(256)) * 1000 + os.urandom(2000) for _ in range(8)]
    expected = [deflate(deflater(4), p) for p in pieces]
    got = [None] * len(pieces)

    def work(parity):
        d = deflater(4)
        for i in range(parity, len(pieces), 2):
            got[i] = deflate(d, pieces[i])
    threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == expected


# --- the .pftrace writer -------------------------------------------------------

def varint(data, at):
    """The varint at data[at:] and where it ends."""
    value, shift = 0, 0
    while True:
        byte = data[at]
        value, shift, at = value | (byte & 0x7F) << shift, shift + 7, at + 1
        if byte < 0x80:
            return value, at


def fields(data):
    """(tag, length-delimited bytes) of a message made of such fields only."""
    out, at = [], 0
    while at < len(data):
        tag, at = varint(data, at)
        assert tag & 7 == 2
        length, at = varint(data, at)
        out.append((tag, data[at:at + length]))
        at += length
    assert at == len(data)
    return out


def inflated(path):
    """A compressed .pftrace's compressed_packets (its only packets), each inflated."""
    out = []
    for tag, packet in fields(open(path, "rb").read()):
        assert tag == 1 << 3 | 2                         # Trace.packet
        [(tag, body)] = fields(packet)
        assert tag == 50 << 3 | 2                        # compressed_packets, nothing else
        out.append(zlib.decompress(body))
    return out


def work():
    worker = threading.Thread(target=fib, args=(14,), name="worker")
    worker.start()
    with pytrace_cffi.record_function("region", {"n": 3}):
        fib(18)
        sorted(str(i) for i in range(3000))
    pytrace_cffi.counter("queue", 3)
    worker.join()


@pytest.fixture(scope="module")
def traced():
    with pytrace_cffi.trace() as t:
        work()
    return t.trace


def assert_compressed_is_uncompressed(trace, tmp_path):
    plain, packed = tmp_path / "plain.pftrace", tmp_path / "packed.pftrace"
    trace.export_perfetto(plain, compress=False)
    trace.export_perfetto(packed)
    pieces = inflated(packed)
    assert len(pieces) >= 2
    assert all(len(p) <= perfetto_packets.COMPRESSED_INPUT_BYTES for p in pieces)
    assert b"".join(pieces) == plain.read_bytes()
    assert os.path.getsize(packed) * 4 < os.path.getsize(plain)
    ours, theirs = read_trace(packed), read_trace(plain)
    assert list(ours) == list(theirs) == list(trace)
    assert ours.marks == theirs.marks == trace.marks
    assert [t.name for t in ours.threads] == [t.name for t in theirs.threads]


def test_a_compressed_pftrace_holds_the_uncompressed_bytes_and_calls(traced, tmp_path):
    assert_compressed_is_uncompressed(traced, tmp_path)


def test_written_while_tracing_without_threads_of_ours(traced, tmp_path):
    """While a trace records, the writer deflates on the exporting thread."""
    with pytrace_cffi.trace() as t:
        assert_compressed_is_uncompressed(traced, tmp_path)
    assert {th.name for th in t.trace.threads} == {threading.current_thread().name}


@pytest.mark.parametrize("level", [1, 12])
def test_the_writer_at_other_levels(traced, tmp_path, monkeypatch, level):
    monkeypatch.setattr(perfetto_packets, "COMPRESS_LEVEL", level)
    assert_compressed_is_uncompressed(traced, tmp_path)
