"""The protobuf wire format, as the writers that encode it themselves need it
(.pftrace, pprof): no protobuf library is a dependency."""
import struct

from .._jsontext import utf8_text


def varint(value):
    value &= (1 << 64) - 1          # negative int64: ten bytes, two's complement
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def int_field(field, value):
    return varint(field << 3) + varint(value)


def bytes_field(field, data):
    if isinstance(data, str):
        # A path undecodable in the file system's encoding keeps its bytes as lone
        # surrogates, which UTF-8 cannot hold: each is written as U+FFFD.
        data = utf8_text(data).encode("utf-8")
    return varint(field << 3 | 2) + varint(len(data)) + data


def double_field(field, value):
    return varint(field << 3 | 1) + struct.pack("<d", value)


def packed_field(field, values):
    """A packed repeated integer field (int64 and uint64 alike)."""
    return bytes_field(field, b"".join(varint(value) for value in values))
