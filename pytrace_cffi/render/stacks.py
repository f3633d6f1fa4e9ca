"""What the flame-graph outputs share: the frames, and the calls aggregated per
distinct stack.

A function's frame is its name as every other output shows it (trimmed path and
first line, "builtins.len", "nn.Module: Linear_0", a region's name); keys that
share a name share a frame. Above a thread's calls stand the frames of its
thread (its name; "#2" and on when several threads of a process share it) and,
in a job, of its process first ("rank 0 (pid 12)"), so that threads stay apart.

aggregate() streams every thread's calls (walk.thread_batches: no slice table,
no Python object per call) through pt_stacks (c_src/pt_summary.c), which keeps
per distinct stack the calls ending in it and their self time as the summary
counts them: memory follows the distinct stacks, not the calls. A writer that
streams the calls anyway feeds a StackAggregator in its own pass.
"""
import re
import struct
from collections import Counter, namedtuple

from .._core import ffi, lib
from .summary import _process_title, check_feed

# "<path>(<first line>): <function>", what a Python function's name says
_PYTHON_NAME = re.compile(r"(?P<file>.+)\((?P<line>\d+)\): (?P<function>.+)", re.S)
_NODE = struct.Struct("=IIQq")      # pt_stack_node: parent, frame, calls, self_ns
NO_NODE = 0xFFFFFFFF

StackNode = namedtuple("StackNode", "parent frame calls self_ns")
StackNode.__doc__ = """One distinct stack: its parent's node (None for a root),
its innermost frame, the calls whose innermost frame it is (frames running when
the trace began are none) and their self time in ns."""


class Frames:
    """The functions' frames (0 .. n_functions - 1, in name order), then the
    threads' and processes' frames (labels) after them."""

    def __init__(self, trace):
        self.names = sorted(set(trace.names))
        frame_of_name = {name: frame for frame, name in enumerate(self.names)}
        self.n_functions = len(self.names)
        self.frame_of_key = ffi.new("uint32_t[]",
                                    [frame_of_name[name] for name in trace.names] or [0])
        self.n_keys = len(trace.names)
        self._kind = {}
        for name, kind in zip(trace.names, trace.key_kinds):
            self._kind.setdefault(name, kind)
        self._label_frame = {}

    def label(self, text):
        """The frame of a thread's or process's label, made on first use."""
        frame = self._label_frame.get(text)
        if frame is None:
            frame = self._label_frame[text] = len(self.names)
            self.names.append(text)
        return frame

    def is_function(self, frame):
        return frame < self.n_functions

    def is_builtin(self, frame):
        """Whether a function's frame is a built-in's (a C function's)."""
        return frame < self.n_functions and self._kind.get(self.names[frame]) == "c"

    def first_keys(self):
        """Per function frame, the first key of its name."""
        keys = [None] * self.n_functions
        for key in range(self.n_keys - 1, -1, -1):
            keys[self.frame_of_key[key]] = key
        return keys

    def location(self, frame):
        """(file, first line) of a Python function's frame, else (None, None)."""
        name = self.names[frame]
        if frame < self.n_functions and self._kind.get(name) == "python":
            found = _PYTHON_NAME.fullmatch(name)
            if found:
                return found.group("file"), int(found.group("line"))
        return None, None


def thread_labels(trace):
    """Per thread of trace, in order: the labels above its calls, outermost first:
    (its process's title, its name) in a job, else (its name,). A name several
    threads of one process share is numbered after the first: "worker #2"."""
    seen = Counter()
    labels = []
    for thread in trace.threads:
        pid = trace.thread_pid(thread)
        seen[pid, thread.name] += 1
        count = seen[pid, thread.name]
        name = thread.name if count == 1 else f"{thread.name} #{count}"
        labels.append(((_process_title(trace, pid),) if trace.processes else ()) + (name,))
    return labels


class StackTree:
    """Every distinct stack of a trace: nodes (StackNode, a parent before its
    children; the roots are the threads' and processes' labels) over frames."""

    def __init__(self, frames, nodes, thread_roots):
        self.frames = frames
        self.nodes = nodes
        self.thread_roots = thread_roots        # per thread, its own label's node

    def path(self, node):
        """The frames from the root down to node."""
        frames = []
        while node is not None:
            entry = self.nodes[node]
            frames.append(entry.frame)
            node = entry.parent
        frames.reverse()
        return frames


class StackAggregator:
    """Calls fed thread by thread (in trace.threads' order) into pt_stacks, so a
    writer that already streams every call (the HTML page's survey) aggregates
    them in the same pass; aggregate() is the pass of its own."""

    def __init__(self, trace):
        self.frames = Frames(trace)
        self._labels = iter(thread_labels(trace))
        self._roots = []
        self._c = ffi.gc(lib.pt_stacks_new(self.frames.frame_of_key, self.frames.n_keys),
                         lib.pt_stacks_free)
        if self._c == ffi.NULL:
            raise MemoryError("out of memory aggregating the trace's stacks")

    def begin_thread(self):
        """The next thread's calls go under its labels' node."""
        node = NO_NODE
        for label in next(self._labels):
            node = lib.pt_stacks_node(self._c, node, self.frames.label(label))
            if node == NO_NODE:
                raise MemoryError("out of memory aggregating the trace's stacks")
        self._roots.append(node)
        lib.pt_stacks_begin_thread(self._c, node)

    def add(self, thread, slices, n, first_index):
        """One batch of the current thread's slices."""
        check_feed(lib.pt_stacks_feed(self._c, slices, n, first_index), thread,
                   "aggregating the trace's stacks")

    def end_thread(self):
        lib.pt_stacks_end_thread(self._c)

    @property
    def thread_roots(self):
        """Per thread fed, its own label's node."""
        return list(self._roots)

    def columns(self):
        """(parents, frames, calls, self times) of the nodes so far, by node (a
        root's parent is NO_NODE): the nodes without a tuple each."""
        found = ffi.new("pt_stack_node **")
        n = lib.pt_stacks_nodes(self._c, found)
        if n == 0:
            return (), (), (), ()
        return tuple(zip(*_NODE.iter_unpack(ffi.buffer(found[0], n * _NODE.size))))

    def preorder(self):
        """pt_stacks_preorder's arrays as lists: per position the node, its depth,
        span (the positions its subtree takes after it) and total time; per node its
        position."""
        found = ffi.new("pt_stack_node **")
        n = lib.pt_stacks_nodes(self._c, found)
        arrays = [ffi.new(f"{kind}[]", max(1, n)) for kind in
                  ("uint32_t", "uint32_t", "uint32_t", "int64_t", "uint32_t")]
        if lib.pt_stacks_preorder(self._c, *arrays) != lib.PT_OK:
            raise MemoryError("out of memory ordering the trace's stacks")
        return [ffi.unpack(array, n) for array in arrays]

    def tree(self):
        """The StackTree of the threads fed so far."""
        found = ffi.new("pt_stack_node **")
        n = lib.pt_stacks_nodes(self._c, found)
        nodes = [StackNode(None if parent == NO_NODE else parent, frame, calls, self_ns)
                 for parent, frame, calls, self_ns
                 in _NODE.iter_unpack(ffi.buffer(found[0], n * _NODE.size))] if n else []
        return StackTree(self.frames, nodes, list(self._roots))


def aggregate(trace, progress=None):
    """The StackTree of trace, its threads' calls streamed through pt_stacks.
    progress: advanced by the calls as they are added."""
    return aggregated(trace, progress).tree()


def aggregated(trace, progress=None):
    """A StackAggregator fed every call of trace (see aggregate)."""
    from ..model.walk import thread_batches
    aggregator = StackAggregator(trace)
    for thread, batches in thread_batches(trace):
        aggregator.begin_thread()
        for slices, n, first_index in batches:
            aggregator.add(thread, slices, n, first_index)
            if progress is not None:
                progress.advance(n)
        aggregator.end_thread()
    return aggregator
