"""torch.profiler's Chrome trace (its export_chrome_trace file), read as a stream
for merge.py and merge_perfetto.py: any JSON layout, in memory bounded by its
largest single event."""
import gzip
import json
import os
import re
import zlib

from .._jsontext import NON_FINITE
from ..errors import TraceFormatError

READ_CHARS = 1 << 20
# A single JSON value (an event, a head entry) longer than this is taken for a
# broken file rather than read on: what a stream cannot finish is bounded.
MAX_VALUE_CHARS = 64 << 20
_SPACE = re.compile(r"[ \t\n\r]*")


class TorchChromeReader:
    """Reads a Chrome trace ({..., "traceEvents": [...], ...}) as a stream: the
    entries before traceEvents, then one event at a time (each parsed by json's C
    scanner, with its text), then the entries after. Any JSON layout is read, in
    memory bounded by the largest single event. compressed: whether it is gzip
    (merge asks formats.torch_compressed: any NAME.gz)."""

    def __init__(self, path, what, compressed):
        self.path, self.what, self.compressed = os.fspath(path), what, compressed
        try:
            opener = gzip.open if compressed else open
            self._file = opener(self.path, "rt", encoding="utf-8")
        except FileNotFoundError:
            raise TraceFormatError(f"{what} {self.path!r} does not exist") from None
        except OSError as exc:
            raise TraceFormatError(f"{what} {self.path!r}: {exc}") from None
        self._decoder = json.JSONDecoder(parse_constant=self._non_finite)
        self.non_finite = False     # a bare NaN or Infinity was read since taken
        self._buf, self._pos, self._eof = "", 0, False
        self.head, self.tail = {}, {}

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _non_finite(self, name):
        self.non_finite = True
        return NON_FINITE[name]

    def take_non_finite(self):
        """Whether a bare NaN / Infinity / -Infinity (not JSON, which a strict reader
        refuses) was read since the last call."""
        found, self.non_finite = self.non_finite, False
        return found

    def _bad(self, detail):
        return TraceFormatError(f"{self.what} {self.path!r}: not valid JSON ({detail})")

    def _more(self):
        if self._eof:
            return False
        try:
            # as long as what is pending: a value of megabytes (a long name) is read
            # in time proportional to its length, not its square
            chunk = self._file.read(max(READ_CHARS, len(self._buf) - self._pos))
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
            raise self._bad(exc) from None
        if not chunk:
            self._eof = True
            return False
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        return True

    def _peek(self):
        while True:
            self._pos = _SPACE.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._more():
                return ""

    def _expect(self, char):
        found = self._peek()
        if found != char:
            raise self._bad(f"expected {char!r}, found {found or 'the end'!r}")
        self._pos += 1

    def _value(self):
        """The next JSON value and its text."""
        self._peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buf, self._pos)
            except ValueError as exc:        # maybe cut by the read: read on, then retry
                if len(self._buf) - self._pos > MAX_VALUE_CHARS or not self._more():
                    raise self._bad(exc) from None
                continue
            except RecursionError:
                raise self._bad("nested too deeply") from None
            if end == len(self._buf) and self._more():
                continue                    # a number may go on in the next read
            text = self._buf[self._pos:end]
            self._pos = end
            return value, text

    def _entries(self, into, stop_at_events):
        """Reads "key": value entries into `into` until traceEvents' "[" (True) or
        the closing "}" (False)."""
        while True:
            if self._peek() == "}":
                self._pos += 1
                if self._peek():
                    raise self._bad("data after the end")
                return False
            key, _ = self._value()
            if not isinstance(key, str):
                raise self._bad("an object key is not a string")
            self._expect(":")
            if key == "traceEvents" and stop_at_events:
                if self._peek() != "[":
                    raise TraceFormatError(f"{self.where()}: not a Chrome trace "
                                           "(no traceEvents list)")
                self._pos += 1
                return True
            into[key], _ = self._value()
            if self._peek() == ",":
                self._pos += 1
            elif self._peek() != "}":
                raise self._bad("expected ',' or '}' between entries")

    def where(self):
        return self.path

    def read_head(self):
        """The entries before traceEvents (all of them if there is none)."""
        if self._peek() != "{":
            if not self._peek():
                raise self._bad("empty file")
            raise TraceFormatError(f"{self.path}: not a Chrome trace (no traceEvents list)")
        self._pos += 1
        if not self._entries(self.head, True):
            raise TraceFormatError(f"{self.path}: not a Chrome trace (no traceEvents list)")
        return self.head

    def events(self):
        """(event, its JSON text) of each event; then reads the entries after."""
        if self._peek() == "]":
            self._pos += 1
        else:
            decode, space = self._decoder.raw_decode, _SPACE.match
            while True:
                # the common case inline: a whole event, then "," or "]", in the buffer
                buf = self._buf
                pos = space(buf, self._pos).end()
                # (a failing decode costs O(pos): JSONDecodeError counts the lines
                # before it; the slow path below takes the rest of the buffer along)
                try:
                    event, end = decode(buf, pos)
                except (ValueError, RecursionError):
                    end = len(buf)
                after = space(buf, end).end() if end < len(buf) else len(buf)
                if after < len(buf) and buf[after] in ",]":
                    self._pos = after + 1
                    yield event, buf[pos:end]
                    if buf[after] == "]":
                        break
                    continue
                yield self._value()          # near the buffer's end, or malformed
                found = self._peek()
                self._pos += 1
                if found == "]":
                    break
                if found != ",":
                    raise self._bad(f"expected ',' or ']' after an event, found "
                                    f"{found or 'the end'!r}")
        if self._peek() == ",":
            self._pos += 1
        if self._entries(self.tail, False):
            raise self._bad("a second traceEvents")

    def whole_head(self, needed):
        """The head, with the entries after traceEvents too when one of `needed` is
        not before it (read through once more: still a stream)."""
        head = dict(self.read_head())
        if all(key in head for key in needed):
            return head
        with TorchChromeReader(self.path, self.what, self.compressed) as again:
            again.read_head()
            for _ in again.events():
                pass
            for key, value in again.tail.items():
                head.setdefault(key, value)
        return head


def check_torch(head, where):
    """baseTimeNanoseconds of a torch.profiler trace's head; TraceFormatError for
    one of ours or a bad base."""
    if isinstance(head.get("otherData"), dict) and \
            head["otherData"].get("generator") == "pytrace_cffi":
        raise TraceFormatError(f"{where}: is a pytrace_cffi trace, not torch.profiler's")
    base = head.get("baseTimeNanoseconds", 0)
    if type(base) is not int or base < 0:
        raise TraceFormatError(f"{where}: baseTimeNanoseconds must be a non-negative integer")
    return base
