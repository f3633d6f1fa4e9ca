"""Progress of long exports and conversions, shown on a terminal's stderr only.

Small jobs finish before a percentage is worth reading, and a redirected stderr
(a log, a pipe, a test) must not fill up with carriage returns; so a Progress
stays silent unless the job is big and stderr is a terminal. `run` says in one
line when writing OUT starts and in one when it ends, with its size and time,
wherever stderr goes (announce_writing, written_note).
"""
import sys

PROGRESS_MIN_SLICES = 1_000_000


class Progress:
    """``with Progress("writing out.html", total) as progress: progress.advance(n)``
    shows "writing out.html: 42%" on one line, rewritten in place."""

    def __init__(self, label, total, stream=None):
        stream = sys.stderr if stream is None else stream
        self._stream = stream if total > PROGRESS_MIN_SLICES and _is_terminal(stream) else None
        self._label = label
        self._total = total
        self._done = 0
        self._shown = -1

    def advance(self, count):
        """Counts `count` more items done."""
        if self._stream is None:
            return
        self._done += count
        percent = min(100, self._done * 100 // self._total)
        if percent != self._shown:
            self._shown = percent
            self._stream.write(f"\r{self._label}: {percent}%")
            self._stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        if self._shown >= 0:
            self._stream.write("\n")
            self._stream.flush()
        return False


def _is_terminal(stream):
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:           # a closed stream
        return False


# -- `run` writing OUT: said in a line when it starts and one when it ends ---------

def announce_writing(path, stream=None):
    """Says that writing path starts (on any stderr: a big trace takes seconds,
    and a log should show where they went); returns the clock to time it by."""
    import time
    _say(f"pytrace_cffi: writing {path} ...", stream)
    return time.monotonic()


def written_note(path, started):
    """" (12.3 MB, 0.41 s)": the size of what was written at path (a file, or a
    directory's files) and the time since announce_writing."""
    import time
    seconds = time.monotonic() - started
    return f" ({size_text(_size(path))}, {seconds:.2f} s)"


def size_text(n):
    """12345678 -> "12.3 MB"."""
    if n < 1000:
        return f"{n} bytes"
    for unit in ("kB", "MB", "GB", "TB"):
        n /= 1000
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}"


# A Chrome JSON past this size is worth telling about the .pftrace of the same
# trace: one call takes ~190 bytes of JSON, 2-10 of .pftrace (docs/OUTPUTS.md).
BIG_JSON_BYTES = 200_000_000


def suggest_smaller(path, stream=None):
    """After a big Chrome JSON (.json, .json.gz) was written to path: one line
    naming the smaller format and the command that converts it."""
    from .formats import find, suffix_of
    fmt = find(path)
    if fmt is None or not fmt.chrome_json or fmt.gzip:
        return
    size = _size(path)
    if size > BIG_JSON_BYTES:
        import shlex
        base = str(path)[:-len(suffix_of(str(path)))]
        _say(f"pytrace_cffi: {path} is {size_text(size)} of JSON; as .pftrace (Perfetto's "
             f"own format) the same trace is some 20 to 80 times smaller: python -m "
             f"pytrace_cffi export {shlex.quote(str(path))} -o "
             f"{shlex.quote(base + '.pftrace')}", stream)


def _size(path):
    import os
    try:
        if not os.path.isdir(path):
            return os.path.getsize(path)
        return sum(os.path.getsize(os.path.join(top, name))
                   for top, _, names in os.walk(path) for name in names)
    except OSError:
        return 0


def finish_command(sources, path):
    """The command that writes the traces in sources (directories) to path."""
    import shlex
    sources = [shlex.quote(str(s)) for s in sources]
    verb = "export" if len(sources) == 1 else "merge"
    return f"python -m pytrace_cffi {verb} {' '.join(sources)} -o {shlex.quote(str(path))}"


def _say(text, stream=None):
    stream = sys.stderr if stream is None else stream
    try:
        print(text, file=stream, flush=True)
    except (OSError, ValueError):       # a closed or broken stderr: nothing to say it on
        pass
def counted(n, noun):
    """"1 thread", "2 threads", "12,505,385 calls": a count as the lines we print
    say it, with thousands separators (noun a regular English noun: calls,
    threads, processes, events)."""
    if n == 1:
        return f"1 {noun}"
    return f"{n:,} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{n:,} {noun}s"


def ranges(numbers):
    """Sorted integers as "0-2, 4-7" (a run of two or more as a range)."""
    numbers = sorted(set(numbers))
    parts, start = [], None
    for index, number in enumerate(numbers):
        if start is None:
            start = number
        if index + 1 == len(numbers) or numbers[index + 1] != number + 1:
            parts.append(str(start) if start == number else f"{start}-{number}")
            start = None
    return ", ".join(parts)
