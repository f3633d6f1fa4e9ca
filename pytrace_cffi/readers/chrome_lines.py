"""Our Chrome JSON read line by line (the layout pytrace_cffi writes: one event
per line): runs of call lines are checked and counted in C (pt_jsonlines.c),
never kept; the trace reads each thread's calls again from the file when an
export or the summary asks (_JsonStreams). A file laid out otherwise raises
OtherLayout, and chrome.py parses it whole."""
import gzip
import io
import json
import os
import re
import weakref
import zlib

from .._core import ffi, lib
from .._jsontext import too_deep
from .._progress import Progress
from ..errors import TraceFormatError
from ..model.streams import CallStreams
from .chrome_events import (STANDARD_ARGS, Changed, Keys, check_other, chrome_trace, other_int,
                            read_call, read_lane, read_mark, read_thread_name,
                            take_open_at_start)

BLOCK_BYTES = 1 << 20                        # read at a time (three blocks at most held)
# The longest line read (a name or args of megabytes fit many times over): a
# longer one is refused, not gathered (a .json.gz of kilobytes can hold a line
# of gigabytes).
LINE_LIMIT = 64 << 20
STREAM_BATCH_SLICES = 1 << 16                # slices a thread's later reads hand out at once


class OtherLayout(Exception):
    """The file is not laid out as pytrace_cffi writes it: parse it whole."""


# A call exactly as pt_format_slices writes it; anything else on a line goes
# through json.loads and the checks of the whole-file path. The name ends at the
# first '","ts":', as a quote inside a JSON string is always escaped; whether the
# name and the extra args are valid JSON is checked once per function (_line_key).
_CALL_LINE = re.compile(
    rb'\{"ph":"X","pid":(\d+),"tid":(\d+),"cat":"(python_function|user_annotation)",'
    rb'"name":(".*?"),"ts":(\d{1,13})\.(\d{3}),"dur":(\d{1,13})\.(\d{3}),'
    rb'"args":\{"Python id":(\d+),"Python parent id":(\d+|null),"Python thread":(\d+)'
    rb'(.*)\}\}\Z', re.S)


_HEAD_END = b'"traceEvents":['


class LineThread:
    """One thread's calls while they are read (pt_line_thread): checked and
    counted, and with batch_cap, handed out in batches of that many slices."""

    def __init__(self, index, tid, name, first_id, start_ns, batch_cap=0):
        self.index, self.tid, self.name, self.first_id = index, tid, name, first_id
        self.tid_text, self.index_text = str(tid).encode(), str(index).encode()
        self.state = ffi.gc(lib.pt_line_thread_new(), lib.pt_line_thread_free)
        if self.state == ffi.NULL:
            raise MemoryError("out of memory while reading a trace")
        self.state.start_ns, self.state.first_id = start_ns, first_id
        self.state.thread_index = index
        self.batch = None
        if batch_cap:
            self.batch = ffi.new("pt_slice[]", batch_cap)
            self.state.slices, self.state.cap = self.batch, batch_cap
        # A tid C cannot compare leaves every line of the thread to Python.
        self.fast = 0 <= tid < 2 ** 64
        if self.fast:
            self.state.tid = tid

    def add(self, path, call_id, parent_id, key, flags, start, end):
        """Takes a call given its id, parent id (None for a root) and key."""
        count = self.state.n
        if call_id != self.first_id + count:
            raise OtherLayout(f"call {call_id} is out of order")
        parent = -1
        if parent_id is not None:
            parent = parent_id - self.first_id
            if not 0 <= parent < count:
                raise TraceFormatError(f"{path}: call {call_id}: parent {parent_id} is not an "
                                       f"earlier call on its thread")
        if not -2 ** 63 <= start <= end < 2 ** 63:
            raise OverflowError
        status = lib.pt_line_thread_push(self.state, start, end, key, flags, parent)
        if status == lib.PT_ERR_NOMEM:
            raise MemoryError("out of memory while reading a trace")
        if status != lib.PT_OK:
            raise TraceFormatError(f"{path}: thread {self.index}: call {call_id} does not nest "
                                   f"inside its parent")

    def stats(self):
        """(calls, calls open at stop, deepest depth): the JSON marks no call as
        open at stop, so as read back none is (as in the slice table)."""
        return self.state.n, 0, self.state.max_depth


class _Text:
    """A file's text a block at a time: text[start:] is still to be read, and
    offset is where text[0] is in the file (in the decompressed text of a .gz)."""

    def __init__(self, stream, offset, on_read=None):
        self.stream, self.on_read = stream, on_read
        self.text, self.buffer, self.offset = b"", None, None
        self.at(offset)

    def at(self, offset):
        """Goes to offset: within the text read, or by seeking (a .gz decompresses
        up to it, from its start when it is behind)."""
        if not (self.text and self.offset <= offset <= self.offset + len(self.text)):
            self.stream.seek(offset)
            self.text, self.buffer, self.offset = b"", None, offset
        self.start = offset - self.offset

    def more(self):
        """Reads the next block; False at the end of the file. A line longer than a
        block (a name of megabytes) is read in blocks as long as what is pending, so
        it costs time in proportion to its length, not its square."""
        block = self.stream.read(max(BLOCK_BYTES, len(self.text) - self.start))
        if self.on_read is not None:
            self.on_read()
        if not block:
            return False
        self.offset += self.start
        self.text = self.text[self.start:] + block if self.start < len(self.text) else block
        self.start = 0
        self.buffer = ffi.from_buffer(self.text)
        return True


def read_chrome_lines(path, compressed):
    """The Trace in a file of pytrace_cffi's layout: the head on its first line,
    "traceEvents":[ on the second, then one event per line (a comma after all but
    the last) and "]}" (gzip-compressed when compressed). Raises OtherLayout as
    soon as the file is laid out otherwise.
    The calls are checked and counted, not kept: the trace reads each thread's
    again when it is asked for (_JsonStreams), from the file opened here (kept
    open: a file removed after reading, like a job's joined JSON, still reads)."""
    raw_file = None
    try:
        raw_file = open(path, "rb")
        identity = file_identity(os.fstat(raw_file.fileno()))
        stream = gzip.GzipFile(fileobj=raw_file, mode="rb") if compressed else raw_file
        with Progress(f"reading {path}", os.path.getsize(path)) as progress:
            reader = _LineReader(path)
            reader.read(stream, raw_file, progress)
        trace = reader.trace(FileSource(path, raw_file, identity, compressed))
        raw_file = None                       # the trace's now
        return trace
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc})") from None
    finally:
        if raw_file is not None:
            raw_file.close()


def file_identity(stat):
    """What tells a file from itself changed in place: its size and mtime."""
    return stat.st_size, stat.st_mtime_ns


class FileSource:
    """The file a trace was read from, open, for reading it again: each reader
    has its own position (os.pread), so threads can be read at the same time.
    compressed: whether its text is gzip."""

    def __init__(self, path, raw_file, identity, compressed=False):
        self.path, self.raw_file, self.identity = path, raw_file, identity
        self.compressed = compressed

    def check(self):
        """Changed when the file is no longer what the first read met."""
        if file_identity(os.fstat(self.raw_file.fileno())) != self.identity:
            raise Changed("its size or time differs")

    def open(self):
        """A new reader of the file's text (decompressed for a .gz) at its start."""
        if hasattr(os, "pread"):
            raw = _PositionedFile(self.raw_file.fileno())
        else:
            raw = open(self.path, "rb")       # no pread (Windows): the path again
        return gzip.GzipFile(fileobj=raw, mode="rb") if self.compressed else raw

    def close(self):
        self.raw_file.close()


class _PositionedFile(io.RawIOBase):
    """A file descriptor read with os.pread at a position of this object's own."""

    def __init__(self, fd):
        super().__init__()
        self._fd, self._position = fd, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, buffer):
        data = os.pread(self._fd, len(buffer), self._position)
        buffer[:len(data)] = data
        self._position += len(data)
        return len(data)

    def seek(self, offset, whence=io.SEEK_SET):
        if whence == io.SEEK_CUR:
            offset += self._position
        elif whence == io.SEEK_END:
            offset += os.fstat(self._fd).st_size
        if offset < 0:
            raise OSError("negative seek position")
        self._position = offset
        return offset

    def tell(self):
        return self._position


class _LineReader:
    """Reads the events after the head: runs of call lines in C (pt_read_call_lines),
    each line C leaves here, with the checks of the whole-file path. The first
    read goes through the whole file; a replay (see replayer) reads one thread's
    calls again."""

    def __init__(self, path):
        self.path = path
        self.keys = Keys()
        self.line_keys = ffi.gc(lib.pt_line_keys_new(), lib.pt_line_keys_free)
        if self.line_keys == ffi.NULL:
            raise MemoryError("out of memory while reading a trace")
        self.key_of_text = {}                 # (category, name, extra args) text -> key
        self.threads, self.marks, self.thread_of_tid = [], [], {}
        self.stats, self.digests = [], []     # per thread
        self.starts = []                      # per thread: (offset, event number) of its calls
        self.thread, self.pid, self.number, self.first_id = None, 0, -1, 0
        self.lanes = {}                       # pid -> process_name, process_sort_index
        self.ended = False                    # None after the last event, True after "]}"
        self.replay = False
        self.next_offset = 0                  # of the line after the one being read
        self.position = ffi.new("uint64_t *")

    def replayer(self):
        """A reader of one thread's calls again, with this one's keys and threads."""
        again = _LineReader.__new__(_LineReader)
        again.__dict__.update(self.__dict__)
        again.marks, again.lanes = [], {}
        again.position = ffi.new("uint64_t *")
        again.replay, again.ended = True, False
        return again

    def read(self, stream, raw_file, progress):
        path = self.path
        head = stream.readline(LINE_LIMIT + 1).rstrip()
        if len(head) > LINE_LIMIT:
            raise TraceFormatError(f"{path}: a line longer than {LINE_LIMIT >> 20} MiB")
        if not (head.startswith(b"{") and head.endswith(b",")
                and stream.readline(len(_HEAD_END) + 2).rstrip() == _HEAD_END):
            raise OtherLayout("the head is not on its own lines")
        try:
            self.other = json.loads(head[:-1] + b"}").get("otherData")
        except (ValueError, AttributeError):
            raise OtherLayout("the head is not JSON on its own") from None
        except RecursionError:
            raise TraceFormatError(f"{path}: the head is not valid JSON (nested too "
                                   "deeply)") from None
        check_other(path, self.other)
        self.start_ns = other_int(path, self.other, "start_monotonic_ns")
        done = [raw_file.tell()]

        def advance():
            progress.advance(raw_file.tell() - done[0])
            done[0] = raw_file.tell()

        for _ in self.scan(_Text(stream, stream.tell(), advance)):
            raise AssertionError("the first read keeps no slices")
        if not self.ended:
            raise TraceFormatError(f"{path}: not valid JSON (it ends before the closing ]}})")
        self.end_thread()
        self.keys.frozen = True

    def scan(self, text, want=None):
        """Reads the lines of text: to the end of the file, or until the current
        thread has taken want calls. Yields whenever its batch is full (the caller
        empties it)."""
        position = self.position
        while True:
            thread = self.thread
            if thread is not None:
                state = thread.state
                if want is not None and state.n >= want:
                    return
                if thread.batch is not None and state.count == state.cap:
                    yield
                    continue
                if thread.fast and self.ended is False and text.buffer is not None:
                    position[0] = text.start
                    taken = lib.pt_read_call_lines(self.line_keys, state, text.buffer,
                                                   len(text.text), position)
                    if taken:
                        self.number += taken
                        self.pid = state.pid
                        text.start = position[0]
                        continue
            newline = text.text.find(b"\n", text.start)
            if newline < 0:
                if len(text.text) - text.start > LINE_LIMIT:
                    raise TraceFormatError(f"{self.path}: event {self.number + 1}: a line "
                                           f"longer than {LINE_LIMIT >> 20} MiB")
                if text.more():
                    continue
                break
            line = text.text[text.start:newline]
            text.start = self.next_offset = newline + 1
            self.next_offset += text.offset
            self.line(line)
        pending = text.text[text.start:]
        text.start = len(text.text)
        if pending and want is None:
            self.line(pending)

    def line(self, line):
        path = self.path
        line = line.rstrip()
        if not line:
            return
        if self.ended:
            raise TraceFormatError(f"{path}: not valid JSON (text after the closing ]}})")
        if line == b"]}":
            if self.replay:
                raise Changed("it ends before the calls of a thread")
            self.ended = True
            return
        if self.ended is None:
            raise TraceFormatError(f"{path}: not valid JSON (no comma after event "
                                   f"{self.number})")
        if line.endswith(b","):
            line = line[:-1]
        else:
            self.ended = None                 # the last event: "]}" must follow
        self.number += 1
        number, thread = self.number, self.thread
        match = _CALL_LINE.match(line)
        if (match is not None and thread is not None and match[2] == thread.tid_text
                and match[11] == thread.index_text):
            category, name, extra = match.group(3, 4, 12)
            found = self.key_of_text.get((category, name, extra))
            if found is None:
                found = _line_key(self.keys, category, name, extra)
                # (a replay meets no new text; the table C reads is shared)
                if found is not None and not self.replay:
                    self._new_line_key(line[match.start(3) - len(b'"cat":"'):match.end(4)],
                                       (category, name, extra), found)
            if found is not None:
                key, opened = found
                parent_id = match[10]
                start = self.start_ns + int(match[5] + match[6])
                thread.add(path, int(match[9]), None if parent_id == b"null" else int(parent_id),
                           key, self.flags_of(key) | opened, start,
                           start + int(match[7] + match[8]))
                self.pid = match[1]
                return
        # Not a call as we write them (or its name or args need a closer look):
        # parsed and checked like an event of the whole file.
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise TraceFormatError(f"{path}: event {number}: not valid JSON ({exc})") from None
        except RecursionError:
            raise TraceFormatError(f"{path}: event {number}: not valid JSON (nested too "
                                   "deeply)") from None
        if type(event) is not dict:
            raise TraceFormatError(f"{path}: event {number} is not an object")
        phase = event.get("ph")
        if phase == "M" and event.get("name") == "thread_name":
            if self.replay:
                raise Changed("a thread starts among the calls of another")
            tid, name = read_thread_name(path, number, event)
            self.end_thread()
            self.thread_of_tid[tid] = len(self.threads)
            self.thread = LineThread(len(self.threads), tid, name, self.first_id,
                                     self.start_ns)
            self.thread.pid = event.get("pid")
            self.starts.append((self.next_offset, number))
        elif phase == "X":
            index, (call_id, parent_id, name, category, ts_ns, dur_ns, extra, opened) = \
                read_call(path, number, event, self.thread_of_tid)
            if thread is None or index != thread.index:
                raise OtherLayout(f"event {number} is not with its thread's calls")
            key = self.keys.key(name, category, extra)
            thread.add(path, call_id, parent_id, key, self.flags_of(key) | opened,
                       self.start_ns + ts_ns, self.start_ns + ts_ns + dur_ns)
            self.pid = event.get("pid")
            if type(self.pid) is not int:
                raise TraceFormatError(f"{path}: event {number}: pid must be an integer")
        elif phase in ("i", "C"):
            self.marks.append(read_mark(path, number, event))
        elif phase == "M" and event.get("name") in ("process_name", "process_sort_index"):
            read_lane(path, number, event, self.lanes)
        else:
            raise TraceFormatError(f"{path}: event {number}: unexpected phase {phase!r}")

    def flags_of(self, key):
        return lib.PT_SLICE_C if self.keys.kinds[key] == "c" else 0

    def _new_line_key(self, ident, text, found):
        """Tells C the function text of a key (found: the key and the flags its
        args add), so its next calls are read there."""
        self.key_of_text[text] = found
        key, opened = found
        extra = text[2]
        if len(ident) < 2 ** 32 and len(extra) < 2 ** 32:
            if lib.pt_line_keys_add(self.line_keys, ident, len(ident), extra, len(extra), key,
                                    self.flags_of(key) | opened) != lib.PT_OK:
                raise MemoryError("out of memory while reading a trace")

    def end_thread(self):
        thread = self.thread
        if thread is not None:
            from ..model.trace import ThreadInfo
            self.threads.append(ThreadInfo(thread.index, thread.tid, 0, thread.name, 0, 0,
                                           thread.pid))
            self.stats.append(thread.stats())
            self.digests.append(thread.state.digest)
            self.first_id += thread.state.n
            self.thread = None

    def trace(self, source):
        streams = _JsonStreams(self, source)
        return chrome_trace(self.path, self.other, self.keys, self.threads, None, self.marks,
                            int(self.pid), self.lanes, streams=streams,
                            build_slices=streams.table)


class _JsonStreams(CallStreams):
    """The calls of a Chrome JSON read line by line, read again a thread at a
    time when an export or the summary asks for them (the trace's _streams):
    from the offset of the thread's calls, in batches of STREAM_BATCH_SLICES.
    Threads are asked for in order, so the file stays open from one thread to the
    next (a .gz is not decompressed again for each). A file that changed since
    the first read raises TraceFormatError."""

    def __init__(self, reader, source):
        self.stats = reader.stats
        self._reader = reader
        self._source = source
        self.where = f"{reader.path}: "       # for table()
        self._first_ids = []
        first_id = 0
        for n, _, _ in self.stats:
            self._first_ids.append(first_id)
            first_id += n
        self._last_with_calls = max((i for i, (n, _, _) in enumerate(self.stats) if n),
                                    default=-1)
        self._text = [None]                   # a reader where the last thread ended
        weakref.finalize(self, _close_source, self._text, source)

    def slices(self, index):
        """Thread index's slices in start order: yields (pt_slice *, n, index of the
        first), each batch valid until the next is asked for."""
        n = self.stats[index][0]
        if not n:
            return
        reader = self._reader
        path = reader.path
        text, self._text[0] = self._text[0], None    # taken: back only if read through
        keep = False
        try:
            self._source.check()
            offset, number = reader.starts[index]
            if text is None:
                text = _Text(self._source.open(), offset)
            else:
                text.at(offset)
            again = reader.replayer()
            thread_info = reader.threads[index]
            thread = LineThread(index, thread_info.native_id, thread_info.name,
                                self._first_ids[index], reader.start_ns,
                                min(n, STREAM_BATCH_SLICES))
            thread.state.limit = n
            again.thread, again.number = thread, number
            first = 0
            for _ in again.scan(text, want=n):
                count = thread.state.count
                yield thread.batch, count, first
                first += count
                thread.state.count = 0
            if thread.state.n != n or thread.state.digest != reader.digests[index]:
                raise Changed(f"thread {index} has other calls")
            keep = index < self._last_with_calls
            if thread.state.count:
                yield thread.batch, thread.state.count, first
        except Changed as exc:
            raise TraceFormatError(f"{path}: changed since it was read ({exc.args[0]})") \
                from None
        except (OtherLayout, OverflowError):
            raise TraceFormatError(f"{path}: changed since it was read (thread {index} "
                                   f"has other calls)") from None
        except TraceFormatError as exc:       # what the first read found right
            raise TraceFormatError(f"{path}: changed since it was read ({exc})") from None
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"{path}: cannot read ({exc})") from None
        finally:
            if text is not None:
                if keep and self._text[0] is None:
                    self._text[0] = text
                else:
                    text.stream.close()


def _close_source(holder, source):
    if holder[0] is not None:
        holder[0].stream.close()
        holder[0] = None
    source.close()


def _line_key(keys, category, name, extra):
    """(key, flags its args add) of a call's category, JSON name and extra args
    text (a comma, then members of the args object), or None when those args
    name a standard arg."""
    try:
        args = json.loads(b"{" + extra[1:] + b"}") if extra else None
        name = json.loads(name)
    except (ValueError, RecursionError):
        return None
    if args is not None and (type(args) is not dict or too_deep(args) or
                             any(arg in args for arg in STANDARD_ARGS)):
        return None         # read by line(), which says what is wrong
    category = category.decode()
    opened = take_open_at_start(category, args)
    return keys.key(name, category, args or None), opened
