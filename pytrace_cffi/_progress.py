"""Progress of long exports and conversions, shown on a terminal's stderr only.

Small jobs finish before a percentage is worth reading, and a redirected stderr
(a log, a pipe, a test) must not fill up with carriage returns; so a Progress
stays silent unless the job is big and stderr is a terminal.
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


def counted(n, noun):
    """"1 thread", "2 threads", "0 calls": a count as the lines we print say it
    (noun a regular English noun: calls, threads, processes, events)."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{n} {noun}s"
