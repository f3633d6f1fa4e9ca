"""A .pftrace made of parts encoded while the program ran (c_src/pt_live.c,
follow/live.py): the file's head (process and thread tracks, clocks, interned
categories and annotation names) written here, then each thread's part as the
encoder wrote it (packets, or compressed_packets), so each thread's sequence is
whole, as write_perfetto writes it. The calls decode the same as that export's;
only the packet boundaries and the annotation names' iids may differ."""
import os
import shutil

from .._files import replaced_atomically
from .perfetto import (OPEN_AT_START, OPEN_AT_STOP, _AnnotationNames, _Sink,
                       _process_sequence, _thread_head, interned_head, track_uuids)


def live_marks():
    """(annotation names, what a call open at stop says on its end, what one open
    at start says on its begin): the encoder's and the head's, made in this
    order on both sides so their iids agree."""
    names = _AnnotationNames()
    stop = names.annotations({OPEN_AT_STOP: True})
    start = names.annotations({OPEN_AT_START: True})
    return names, stop, start


def write_perfetto_parts(trace, path, part_prefix, compress, first_sequence):
    """Writes trace's head and thread i's part (part_prefix + str(i); absent: a
    thread with no call; its packets on sequence first_sequence + i) to path,
    beside it and renamed. compress: the head deflated as the parts are (or not)."""
    path = os.fspath(path)
    uuids = {}
    track_uuids(trace, uuids)
    head = interned_head(live_marks()[0])
    with replaced_atomically(path, lambda tmp: open(tmp, "wb")) as out:
        sink = _Sink(out, compress)
        try:
            sink.write(b"".join(_process_sequence(trace, uuids)))
            for index in range(len(trace.threads)):
                sink.write(_thread_head(uuids["descriptors"]["threads"][index],
                                        uuids["threads"][index], first_sequence + index,
                                        head, trace.start_ns))
                sink.finish()
                try:
                    part = open(part_prefix + str(index), "rb")
                except FileNotFoundError:
                    continue
                with part:
                    out.flush()
                    shutil.copyfileobj(part, out, 1 << 20)
            sink.finish()
        finally:
            sink.close()
    return path
