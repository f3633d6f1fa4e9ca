"""Collapsed stacks (.folded, .collapsed): the input of flamegraph.pl, inferno,
speedscope and most flame-graph tools.

One line per distinct stack, "frame;frame;frame count": the frames root first,
from the thread's label ("MainThread"; in a job "rank 0 (pid 12);MainThread")
down to the innermost function, and count the stack's self time in whole
microseconds, rounded to the nearest; a stack whose self time rounds to 0 has no
line (so the counts sum to the trace's self time within half a microsecond per
distinct stack). Lines come in the order their stacks were first met.

Frame names are the other outputs' names made safe for the format: ";" (the
separator) becomes ",", line breaks and tabs become spaces, and whitespace before
digits that end a name becomes "_" ("step 3" -> "step_3"), since a line whose
stack ended in " 3" would read as a differential line of two counts.
"""
import re

from .._files import replaced_atomically
from .._jsontext import utf8_text
from .._progress import Progress
from .stacks import aggregate

_TRAILING_NUMBER = re.compile(r"\s+(?=\d+$)")
_BREAKS = str.maketrans({";": ",", "\n": " ", "\r": " ", "\t": " "})


def frame_text(name):
    """name as a collapsed-stack frame (see the module's doc)."""
    return _TRAILING_NUMBER.sub("_", utf8_text(name).translate(_BREAKS)) or "?"


def folded_lines(tree):
    """The lines of tree (a stacks.StackTree), each ending in a newline; one line
    held at a time (a stack's text is made from its path, not kept for its
    children: deep recursion would hold the whole file)."""
    texts = [frame_text(name) for name in tree.frames.names]
    for index, node in enumerate(tree.nodes):
        micros = (node.self_ns + 500) // 1000
        if micros > 0:
            yield ";".join([texts[frame] for frame in tree.path(index)]) + f" {micros}\n"


def write_folded(trace, path):
    """Writes trace's collapsed stacks to path (see the module's doc)."""
    with Progress(f"writing {path}", len(trace)) as progress:
        tree = aggregate(trace, progress)
    with replaced_atomically(path, lambda tmp: open(tmp, "w", encoding="utf-8",
                                                    newline="\n")) as out:
        out.writelines(folded_lines(tree))
