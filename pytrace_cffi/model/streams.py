"""The one protocol a trace streams its calls through (Trace._streams): what the
writers read, whoever made the trace. Five classes implement it: the walk over a
trace's events (walk.Streams: a stopped session's, a spilled directory's), a
saved directory's slices.bin (model/saved.py), a Chrome JSON and a .pftrace
read back (readers/chrome_lines.py, readers/pftrace.py) and a joined job
(follow/join.py). The writers depend on this class alone, never on theirs.
A walk reads its events from EventSources, one per thread.
"""
from .._core import ffi
from ..errors import TraceFormatError


class CallStreams:
    """A trace's calls, a thread at a time, without a slice table in memory.

    stats          per thread, (calls, calls open at stop, deepest depth), in
                   thread order: known without reading a call again
    open_at_start  per thread, how many of its calls were running when its trace
                   began; None when only a pass over its slices can say
    spans          per thread, (first call's start, last root call's end), or
                   None for a thread without calls; None when not known
    where          what a TraceFormatError from table() begins with (a path)
    clock          the recorder's clock (tick0, ns0, ns_per_tick): how its ticks
                   became ns; None when the trace was not read from ticks
    """

    stats = ()
    open_at_start = None
    spans = None
    where = ""
    clock = None
    # thread index -> a part encoded while its process ran, or None (see
    # encoded_part); None when no thread has one
    encoded_parts = None

    def slices(self, index):
        """Thread index's calls in start order, numbered as the slice table
        numbers them: an iterable of batches (pt_slice *, n, index of the
        first), each valid until the next is asked for."""
        raise NotImplementedError

    def table(self):
        """The slice table (Trace.thread_slices), made whole: per thread
        (pt_slice array, n), its batches copied into one array."""
        return table_from_streams(self, self.where)

    def records(self, index):
        """Thread index's begin and end records in time order, as the walk makes
        them final: an iterable of (pt_walk_record *, n), each valid until the
        next step; None when these streams hand out whole slices only (then
        writers read slices())."""
        return None

    def encoded_part(self, index):
        """Thread index's packets encoded while its process ran (follow/live.py),
        (path, sequence id, clock ns), which a .pftrace writer copies after the
        thread's head instead of encoding its calls; None when it has none."""
        parts = self.encoded_parts
        return None if parts is None else parts[index]


class EventSource:
    """One thread's events as the walk (model/walk.py) reads them: the stopped
    tracer's (walk.HeldEvents) or a saved directory's events.bin
    (saved._FileEvents).

    index       the thread's index in its trace
    base_ticks  the clock ticks its first event counts from
    """

    index = 0
    base_ticks = 0

    def runs(self):
        """The thread's events in order: an iterable of (pt_event *, n), each
        valid until the next is asked for."""
        raise NotImplementedError

    def describe(self):
        """Whose events these are, as a TraceFormatError about them begins: where
        they are and which thread (by index and name)."""
        return f"events: thread {self.index} ('')"      # (the tracer's: no name at hand)


def table_from_streams(streams, where=""):
    """The slice table (Trace.thread_slices) of streams that hand out whole slices
    (a loaded slices.bin, a joined job, a JSON read back): per thread, its
    batches copied into one array. [(pt_slice array, n)]."""
    table = []
    for index, (n, _, _) in enumerate(streams.stats):
        array = ffi.new("pt_slice[]", max(1, n))
        for batch, count, first in streams.slices(index):
            if first + count > n:
                raise TraceFormatError(f"{where}thread {index}: more calls than counted")
            ffi.memmove(array + first, batch, count * ffi.sizeof("pt_slice"))
        table.append((array, n))
    return table
