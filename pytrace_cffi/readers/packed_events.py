"""A flight recorder dump's compressed events.bin (c_src/pt_flight_files.c
writes it), inflated for the readers of events.bin.

The file: PACKED_HEADER's 16 bytes ("PTEVTZ01", then the largest piece, a
little-endian uint32), then pieces, each its inflated size and its deflated
size (two little-endian uint32) and a zlib stream of that size. The pieces
inflated, in order, are events.bin as a spill writes it. A dump written before
(or with compression off) holds that plain file: read as it is.

Reading is bounded: no piece inflates to more than the header's piece size
(at most MAX_PIECE_BYTES), one piece is in memory at a time, the whole to at
most MAX_INFLATED_BYTES; a piece that does not inflate to exactly its size, a
size beyond those bounds or a file cut inside a piece is a TraceFormatError
naming the file and the byte.
"""
import atexit
import os
import shutil
import struct
import tempfile
import zlib

from ..errors import TraceFormatError
from .._safe_read import open_binary

PACKED_MAGIC = b"PTEVTZ01"
PACKED_HEADER = struct.Struct("<8sII")      # magic, piece bytes, reserved
PIECE = struct.Struct("<II")                # inflated bytes, deflated bytes
MAX_PIECE_BYTES = 1 << 20                   # the writer's pieces (PT_FLIGHT_PIECE)
MAX_INFLATED_BYTES = (1 << 40) + (1 << 30)  # the largest ring (1 TiB) and its blocks' headers

_made = []          # the directories inflated into, removed at exit


def is_packed(path):
    """Whether the events file at path is compressed (PACKED_MAGIC)."""
    try:
        f, _ = open_binary(path)
    except (OSError, TraceFormatError):
        return False
    with f:
        return f.read(len(PACKED_MAGIC)) == PACKED_MAGIC


def inflated_directory(path):
    """A new private directory holding events.bin, the compressed events file at
    path inflated (removed at exit, or by remove()). TraceFormatError when the
    file is damaged or hostile (see the module's doc)."""
    directory = tempfile.mkdtemp(prefix="pytrace_cffi-events-")
    _made.append(directory)
    try:
        with open(os.path.join(directory, "events.bin"), "wb") as out:
            inflate_to(path, out)
    except BaseException:
        remove(directory)
        raise
    return directory


def remove(directory):
    shutil.rmtree(directory, ignore_errors=True)
    if directory in _made:
        _made.remove(directory)


def inflate_to(path, out):
    """Writes the inflated events of the compressed file at path to out."""
    f, st = open_binary(path)
    with f:
        header = f.read(PACKED_HEADER.size)
        if len(header) < PACKED_HEADER.size:
            raise TraceFormatError(f"{path}: cut short in its header")
        magic, piece_bytes, _ = PACKED_HEADER.unpack(header)
        if magic != PACKED_MAGIC or not 0 < piece_bytes <= MAX_PIECE_BYTES:
            raise TraceFormatError(f"{path}: not a compressed events file (its header "
                                   f"says pieces of {piece_bytes} bytes, at most "
                                   f"{MAX_PIECE_BYTES})")
        offset, total = PACKED_HEADER.size, 0
        while offset < st.st_size:
            sizes = f.read(PIECE.size)
            if len(sizes) < PIECE.size:
                raise TraceFormatError(f"{path}: cut short at byte {offset}")
            raw, packed = PIECE.unpack(sizes)
            if not 0 < raw <= piece_bytes or not 0 < packed <= st.st_size - offset - PIECE.size:
                raise TraceFormatError(f"{path}: damaged at byte {offset}: a piece of {raw} "
                                       f"bytes deflated to {packed} (pieces are 1 to "
                                       f"{piece_bytes} bytes, within the file)")
            total += raw
            if total > MAX_INFLATED_BYTES:
                raise TraceFormatError(f"{path}: inflates to more than "
                                       f"{MAX_INFLATED_BYTES} bytes")
            data = f.read(packed)
            if len(data) != packed:
                raise TraceFormatError(f"{path}: changed while it was read")
            inflater = zlib.decompressobj()
            try:
                block = inflater.decompress(data, raw)
            except zlib.error as exc:
                raise TraceFormatError(f"{path}: damaged at byte {offset}: its piece does "
                                       f"not inflate ({exc})") from None
            if len(block) == raw and not inflater.eof:     # (its end and checksum)
                block += inflater.decompress(inflater.unconsumed_tail, 1)
            if (len(block) != raw or not inflater.eof or inflater.unconsumed_tail
                    or inflater.unused_data):
                raise TraceFormatError(f"{path}: damaged at byte {offset}: its piece "
                                       f"does not inflate to the {raw} bytes it says")
            out.write(block)
            offset += PIECE.size + packed


@atexit.register
def _remove_all():
    for directory in list(_made):
        remove(directory)
