"""The Trace.packet entries of a .pftrace, read as a stream, and the protobuf
wire format of the messages our writer (render/perfetto.py) puts in them: what
pftrace.py builds a Trace from.

The file is read a block at a time, compressed_packets inflated a block at a
time (a decompression bomb costs time in proportion to what it inflates to,
never memory); no length field allocates more than MAX_PACKET_BYTES; every read
is bounded by its message's end. Runs of a thread's slice packets are left to C
(pt_pfread.c); packets() hands every other one to Python.
"""
import struct
import threading
import zlib

from .._core import lib

MAX_PACKET_BYTES = 16 << 20     # one packet, inflated: far above any we write
BLOCK_BYTES = 256 << 10         # read, or inflated, at a time
# A compressed_packets field inflates to at most this many times its bytes (plus
# INFLATE_SLACK) and MAX_INFLATED_BYTES: packet batches deflate some 5-20 times; a
# bomb of tiny packets (1000 times) would cost minutes of parsing.
MAX_INFLATE_RATIO = 64
INFLATE_SLACK = 4096
MAX_INFLATED_BYTES = 256 << 20
PACKET_TAG = 0x0a               # Trace.packet: field 1, length-delimited
DOUBLE = struct.Struct("<d")


class Bad(Exception):
    """Malformed or not ours: becomes TraceFormatError with the file's name."""


class Stop(Exception):
    """A replay met the end of its thread's packets."""


# --- protobuf wire format ------------------------------------------------------

def varint(data, pos, end):
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise Bad("a varint is cut short or too long")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7


def signed(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def parse(data):
    """{field number: [values]} of a message: ints for varints and fixed numbers,
    bytes for length-delimited fields."""
    out = {}
    pos, end = 0, len(data)
    while pos < end:
        tag = data[pos]             # one byte, most often: read here, not by varint()
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = varint(data, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            if pos < end and data[pos] < 0x80:
                value, pos = data[pos], pos + 1
            else:
                value, pos = varint(data, pos, end)
        elif wire == 2:
            if pos < end and data[pos] < 0x80:
                size, pos = data[pos], pos + 1
            else:
                size, pos = varint(data, pos, end)
            if size > end - pos:
                raise Bad("a field runs past its message")
            value, pos = bytes(data[pos:pos + size]), pos + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if width > end - pos:
                raise Bad("a field runs past its message")
            value, pos = int.from_bytes(data[pos:pos + width], "little"), pos + width
        else:
            raise Bad(f"wire type {wire} (field {number}) is not one we write")
        if not number:
            raise Bad("field number 0")
        out.setdefault(number, []).append(value)
    return out


def one(fields, number, default=None, kind=int):
    """The field's value (the last, as protobuf merges), checked for its kind."""
    values = fields.get(number)
    if not values:
        return default
    value = values[-1]
    if not isinstance(value, kind):
        raise Bad(f"field {number} has the wrong wire type")
    return value


def text(data):
    if not isinstance(data, bytes):
        raise Bad("a string field has the wrong wire type")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Bad("a string is not UTF-8") from None


def repeated_ints(fields, number):
    """A repeated varint field, packed or not."""
    out = []
    for value in fields.get(number, ()):
        if isinstance(value, bytes):
            pos = 0
            while pos < len(value):
                item, pos = varint(value, pos, len(value))
                out.append(item)
        else:
            out.append(value)
    return out


def annotation(fields, names=None):
    """(name, value) of a DebugAnnotation as render/perfetto.py writes it."""
    if 10 in fields:
        name = text(one(fields, 10, kind=bytes))
    else:
        iid = one(fields, 1)
        if names is None or iid not in names:
            raise Bad(f"a debug annotation names interned name {iid}, not interned")
        name = names[iid]
    return name, annotation_value(fields)


def annotation_value(fields, depth=0):
    if depth > 64:
        raise Bad("debug annotations nest too deep")
    if 2 in fields:
        return bool(one(fields, 2))
    if 4 in fields:
        return signed(one(fields, 4))
    if 3 in fields:
        return one(fields, 3)
    if 5 in fields:
        return DOUBLE.unpack(one(fields, 5).to_bytes(8, "little"))[0]
    if 6 in fields:
        return text(one(fields, 6, kind=bytes))
    if 9 in fields:
        import json
        try:
            return json.loads(text(one(fields, 9, kind=bytes)))
        except ValueError:
            raise Bad("a legacy JSON value is not JSON") from None
    if 12 in fields:
        return [annotation_value(parse(item), depth + 1) for item in fields[12]]
    out = {}
    for entry in fields.get(11, ()):
        if not isinstance(entry, bytes):
            raise Bad("a dict entry has the wrong wire type")
        entry_fields = parse(entry)
        out[text(one(entry_fields, 10, "", bytes))] = annotation_value(entry_fields,
                                                                       depth + 1)
    return out


def annotations(event, names=None):
    args = {}
    for item in event.get(4, ()):
        if not isinstance(item, bytes):
            raise Bad("a debug annotation has the wrong wire type")
        name, value = annotation(parse(item), names)
        args[name] = value
    return args


# --- the file's packets, a block at a time ------------------------------------------

class _Level:
    """Trace bytes (Trace.packet entries) a block at a time: buf[pos:] is still
    to be read; offset is where buf[0] is in this level's bytes."""

    def __init__(self):
        self.buf, self.pos, self.offset = b"", 0, 0

    def _take(self, block):
        self.offset += self.pos
        self.buf = self.buf[self.pos:] + block if self.pos < len(self.buf) else block
        self.pos = 0

    def entry(self):
        """(header length, packet length) of the entry at pos, its header read;
        None at the end. Reads more as needed."""
        while True:
            buf, pos = self.buf, self.pos
            if pos < len(buf):
                if buf[pos] != PACKET_TAG:
                    raise Bad(f"byte {buf[pos]} where a packet should begin (not a "
                              f"Perfetto trace, or damaged)")
                try:
                    size, end = varint(buf, pos + 1, len(buf))
                except Bad:
                    if len(buf) - pos > 11:
                        raise
                else:
                    if size > MAX_PACKET_BYTES and not self.may_be_compressed():
                        raise Bad(f"a packet of {size} bytes (more than {MAX_PACKET_BYTES})")
                    return end - pos, size
            if not self.more():
                if pos < len(self.buf):
                    raise Bad("the file ends inside a packet")
                return None

    def need(self, count):
        """Reads on until buf[pos:pos + count] is there."""
        while len(self.buf) - self.pos < count:
            if not self.more():
                raise Bad("the file ends inside a packet")

    def may_be_compressed(self):
        return False


class _Top(_Level):
    """The file itself."""

    def __init__(self, raw, offset):
        super().__init__()
        self.raw, self.offset = raw, offset

    def more(self):
        self.raw.seek(self.offset + len(self.buf))
        block = self.raw.read(BLOCK_BYTES)
        if not block:
            return False
        self._take(block)
        return True

    def jump(self, offset):
        """Goes on from file offset `offset` (after a compressed packet)."""
        if self.offset <= offset <= self.offset + len(self.buf):
            self.pos = offset - self.offset
        else:
            self.buf, self.pos, self.offset = b"", 0, offset

    def may_be_compressed(self):
        return True


class _Inflated(_Level):
    """A compressed_packets field's bytes inflated a block at a time (a
    decompression bomb costs time in proportion to what it inflates to, never
    memory)."""

    def __init__(self, raw, at, length):
        super().__init__()
        self.raw, self.at, self.left, self.start = raw, at, length, at
        self.inflater, self.tail = zlib.decompressobj(), b""
        self.inflated = 0
        self.limit = min(MAX_INFLATED_BYTES, MAX_INFLATE_RATIO * length + INFLATE_SLACK)

    def more(self):
        while True:
            if self.inflater.eof:
                if self.inflater.unused_data or self.tail or self.left:
                    raise Bad("data after the end of a compressed packet's stream")
                return False
            data = self.tail
            if not data and self.left:
                self.raw.seek(self.at)
                data = self.raw.read(min(self.left, BLOCK_BYTES))
                if not data:
                    raise Bad("the file ends inside a compressed packet")
                self.at += len(data)
                self.left -= len(data)
            try:
                block = self.inflater.decompress(data, BLOCK_BYTES)
            except zlib.error as exc:
                raise Bad(f"a compressed packet does not inflate ({exc})") from None
            self.tail = self.inflater.unconsumed_tail
            self.inflated += len(block)
            if self.inflated > self.limit:
                raise Bad(f"a compressed packet of {self.left + self.at - self.start} bytes "
                          f"inflates to more than {self.limit} (at most {MAX_INFLATE_RATIO} "
                          f"times its size and {MAX_INFLATED_BYTES} bytes: a decompression "
                          "bomb?)")
            if block:
                self._take(block)
                return True
            if not data and not self.inflater.eof:
                raise Bad("a compressed packet's stream is cut short")

    def skip(self, count):
        """Goes to byte `count` of the inflated bytes."""
        while self.offset + len(self.buf) < count:
            self.offset += len(self.buf)
            self.buf, self.pos = b"", 0
            if not self.more():
                raise Bad("a compressed packet is shorter than the first read found")
        self.pos = count - self.offset

    def copy(self, raw):
        """This level as it is, going on independently, reading raw."""
        other = _Inflated.__new__(_Inflated)
        other.__dict__.update(self.__dict__)
        other.raw, other.inflater = raw, self.inflater.copy()
        return other


class Resumes:
    """Places inside compressed packets where reads of a file stopped or began,
    each an inflater's copy: a thread's read that starts inside a compressed
    packet goes on from the nearest one before it instead of inflating the packet
    from its start. A file of many small threads (a thousand asyncio tasks' lanes)
    holds many in one packet: each read would inflate all those before it."""

    KEEP = 4        # a thread's two passes, and where the last one stopped

    def __init__(self):
        self._lock = threading.Lock()
        self._kept = []     # (compressed entry's file offset, _Inflated), newest last

    def nearest(self, start, count, raw):
        """A copy of the kept level of the entry at file offset start whose bytes
        begin at or before inflated byte count, the latest such; else None."""
        with self._lock:
            found = [level for at, level in self._kept if at == start and level.offset <= count]
        if not found:
            return None
        return max(found, key=lambda level: level.offset).copy(raw)

    def keep(self, start, level):
        kept = level.copy(None)
        with self._lock:
            self._kept = [entry for entry in self._kept
                          if entry[0] != start or entry[1].offset != kept.offset]
            self._kept.append((start, kept))
            del self._kept[:-self.KEEP]


def packets(raw, location, reader, resumes=None):
    """Runs over the packets from location ((file offset of a top-level entry,
    offset in its inflated bytes or -1)): reader.fast(buf, pos) takes what C can
    (returns (status, new pos)); reader.packet(bytes, location) each other packet.
    Yields when reader's batch is full. Ends at the file's end or when reader
    raises Stop. resumes: a Resumes of the file, for reads that start inside a
    compressed packet."""
    top = _Top(raw, location[0])
    level, inner_start = top, None
    if location[1] >= 0:
        inner_start = location[0]
        level = resumes and resumes.nearest(inner_start, location[1], raw)
        if not level:
            level = _enter(top)
        level.skip(location[1])
        if resumes is not None:
            resumes.keep(inner_start, level)
    while True:
        if level.pos >= len(level.buf) and not level.more():
            if level is top:
                return
            top.jump(level.end)
            level = top
            continue
        status, level.pos = reader.fast(level.buf, level.pos)
        if status == lib.PT_PF_FULL:
            yield
            continue
        if status == lib.PT_OK:
            continue
        if status != lib.PT_PF_PYTHON:
            reader.failed(status)
        head = level.entry()
        if head is None:
            continue
        header, size = head
        if level is top and _is_compressed(top, header, size):
            inner_start = top.offset + top.pos
            level = _enter(top)
            continue
        if size > MAX_PACKET_BYTES:
            raise Bad(f"a packet of {size} bytes (more than {MAX_PACKET_BYTES})")
        level.need(header + size)
        start = level.pos + header
        packet = level.buf[start:start + size]
        where = ((level.offset + level.pos, -1) if level is top
                 else (inner_start, level.offset + level.pos))
        if reader.full():
            yield
        try:
            reader.packet(packet, where)
        except Stop:
            if resumes is not None and level is not top:
                resumes.keep(inner_start, level)    # the next thread's read starts here
            return
        level.pos = start + size


def _is_compressed(top, header, size):
    """Whether the top-level entry at pos is a packet holding only compressed_packets."""
    top.need(min(header + size, header + 12))
    at = top.pos + header
    if top.buf[at:at + 2] != b"\x92\x03":        # field 50, length-delimited
        return False
    length, after = varint(top.buf, at + 2, len(top.buf))
    if after - at + length != size:
        raise Bad("a compressed packet holds more than its compressed packets")
    return True


def _enter(top):
    """The inflated bytes of the compressed packet at top's pos (its header read)."""
    header, size = top.entry()
    at = top.pos + header + 2
    length, after = varint(top.buf, at, len(top.buf))
    data_at = top.offset + after
    inner = _Inflated(top.raw, data_at, length)
    inner.end = data_at + length
    return inner
