"""pprof's profile.proto (.pprof, .pb.gz), gzip-compressed as pprof writes it
(`go tool pprof` reads it compressed or not; both names are written compressed).

Field numbers are those of github.com/google/pprof/proto/profile.proto, encoded
here (render/protobuf.py). Two sample types, ("calls", "count") and ("wall",
"nanoseconds"), the default: one sample per distinct stack of a thread, its
values the calls whose innermost frame it is (frames running when the trace
began are none) and their self time (less direct callees); its locations leaf
first, one Location per function (one Line: the function, its first line; all in
one Mapping named after the program, its functions known), and
labels "thread" (its thread's label, see stacks.thread_labels) and, in a job,
"process". A function's name is its name as the other outputs show it, its
filename and start line those a Python function's name says. period_type is
wall/nanoseconds, duration_nanos the trace's span, time_nanos its wall-clock
start when the trace knows it.
"""
import contextlib
import gzip

from .._files import replaced_atomically
from .._progress import Progress
from .protobuf import bytes_field, int_field, packed_field
from .stacks import aggregate

SAMPLE_TYPES = (("calls", "count"), ("wall", "nanoseconds"))
LABEL_KEYS = ("process", "thread")     # a thread's labels (stacks.thread_labels), the last
# Profile's fields
SAMPLE_TYPE, SAMPLE, MAPPING, LOCATION, FUNCTION, STRING_TABLE = 1, 2, 3, 4, 5, 6
MAPPING_ID = 1
TIME_NANOS, DURATION_NANOS, PERIOD_TYPE, PERIOD, COMMENT, DEFAULT_SAMPLE_TYPE = range(9, 15)


class Strings:
    """The string table: "" at index 0, each string once."""

    def __init__(self):
        self.index = {"": 0}

    def __call__(self, text):
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.index)
        return found

    def fields(self):
        return b"".join(bytes_field(STRING_TABLE, text) for text in self.index)


def _value_type(strings, kind, unit):
    return int_field(1, strings(kind)) + int_field(2, strings(unit))


def _samples(tree, strings, used):
    """The Sample fields of tree's stacks that hold calls or time; adds the
    frames of the functions they name to used."""
    frames = tree.frames
    for index, node in enumerate(tree.nodes):
        if not frames.is_function(node.frame) or not (node.calls or node.self_ns):
            continue
        path = tree.path(index)
        labels = [frame for frame in path if not frames.is_function(frame)]
        functions = path[len(labels):]
        used.update(functions)
        sample = (packed_field(1, [frame + 1 for frame in reversed(functions)])
                  + packed_field(2, [node.calls, node.self_ns])
                  + b"".join(bytes_field(3, int_field(1, strings(key))
                                         + int_field(2, strings(frames.names[label])))
                             for key, label in zip(LABEL_KEYS[-len(labels):], labels)))
        yield bytes_field(SAMPLE, sample)


def _functions(frames, used, strings):
    """Location and Function fields of the used frames (ids frame + 1)."""
    parts = []
    for frame in sorted(used):
        number = frame + 1
        parts.append(bytes_field(LOCATION, int_field(1, number) + int_field(2, MAPPING_ID)
                                 + bytes_field(4, int_field(1, number))))
        name = strings(frames.names[frame])
        file, line = frames.location(frame)
        # no system_name: pprof would take a name holding "<" or "(" (<module>, a
        # first line) for C++ and strip them from it
        function = int_field(1, number) + int_field(2, name)
        if file is not None:
            function += int_field(4, strings(file)) + int_field(5, line)
        parts.append(bytes_field(FUNCTION, function))
    return b"".join(parts)


def _wall_clock_start(trace):
    """The trace's start in ns since the epoch, or None when it does not say."""
    anchor = (trace.realtime_anchor or {}).get("start") or {}
    realtime, monotonic = anchor.get("realtime_ns"), anchor.get("monotonic_ns")
    if not isinstance(realtime, int) or not isinstance(monotonic, int):
        return None
    return realtime + trace.start_ns - monotonic


def write_pprof(trace, path):
    """Writes trace to path as a gzip-compressed pprof profile (see the module's doc)."""
    with Progress(f"writing {path}", len(trace)) as progress:
        tree = aggregate(trace, progress)
    strings = Strings()
    head = b"".join(bytes_field(SAMPLE_TYPE, _value_type(strings, kind, unit))
                    for kind, unit in SAMPLE_TYPES)
    head += bytes_field(PERIOD_TYPE, _value_type(strings, *SAMPLE_TYPES[-1]))
    head += int_field(PERIOD, 1)
    head += int_field(DURATION_NANOS, max(0, trace.stop_ns - trace.start_ns))
    started = _wall_clock_start(trace)
    if started is not None:
        head += int_field(TIME_NANOS, started)
    head += packed_field(COMMENT, [strings("pytrace_cffi")])
    head += int_field(DEFAULT_SAMPLE_TYPE, strings(SAMPLE_TYPES[-1][0]))
    # One mapping, the program, whose functions are all known: pprof then names the
    # program and looks for no binary to symbolize with.
    head += bytes_field(MAPPING, int_field(1, MAPPING_ID)
                        + int_field(5, strings(trace.label or "python"))
                        + int_field(7, 1) + int_field(8, 1) + int_field(9, 1))

    with replaced_atomically(path, _gzipped) as out:
        out.write(head)
        used = set()
        for sample in _samples(tree, strings, used):
            out.write(sample)
        out.write(_functions(tree.frames, used, strings))
        out.write(strings.fields())


@contextlib.contextmanager
def _gzipped(path):
    """path open for writing through gzip, with no file name or time in its header
    (the same trace, the same bytes); closes both."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", compresslevel=6,
                                                mtime=0, fileobj=raw) as out:
        yield out
