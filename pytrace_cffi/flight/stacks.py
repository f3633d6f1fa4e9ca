"""The calls open at a dump, from its stacks.tsv: what `report` reads of a
dump, never its ring.

The dump's clone walks the ring in C (c_src/pt_flight_files.c) and writes, per
thread, the calls open at the end of it, outermost first, with the clock ticks
each began; stack_sources.tsv names their keys (key_sources.tsv's lines). So a
report of 1,000 processes reads a few KiB of each, not its events.bin (tens of
MiB, compressed). A dump written before stacks.tsv existed has none:
stack_chains returns None and the ring is walked (dumps.open_chains).

Our own frames are left out as traces leave them out (pytrace_cffi's code, with
a built-in it calls right inside), by the file of their code; runpy's by
dumps.without_launcher.
"""
import os

from .. import _clock
from .._hiding import _is_own_file
from ..errors import TraceFormatError
from ..follow.identity import _process_facts
from ..follow.recover import MAX_THREADS, _json_or_none, _key_sources, _name_dumped_threads
from .._safe_read import read_bounded

STACKS_FILE = "stacks.tsv"
STACK_SOURCES_FILE = "stack_sources.tsv"
LINES_FILE = "lines.tsv"
MAX_STACKS_BYTES = 64 << 20     # 1,024 open calls of each thread at most, a line each


# How a gap entry ends: "[1,234 calls open here, not kept in the dump]"
GAP_ENDING = " calls open here, not kept in the dump]"


def gap_name(count):
    """The stack entry that stands for count open calls a dump did not keep (a
    stack deeper than 1,024: its two ends are kept)."""
    return f"[{count:,}{GAP_ENDING}"


def is_gap(name):
    return name.startswith("[") and name.endswith(GAP_ENDING)


def frame_lines(directory):
    """(thread index -> [(key, line)] of its frames, innermost first, why no
    line is known or None) from a dump's lines.tsv (the clone read the frames:
    c_src/pt_flight_lines.c). Lines are a help, the stacks stand without them:
    a missing or damaged lines.tsv gives none, and says so."""
    path = os.path.join(directory, LINES_FILE)
    try:
        text = read_bounded(path, MAX_STACKS_BYTES).decode("ascii")
    except FileNotFoundError:
        return {}, "the dump has no lines.tsv (its frames were not read)"
    except (OSError, UnicodeDecodeError, TraceFormatError):
        return {}, "the dump's lines.tsv could not be read"
    rows = text.splitlines()
    if not rows or rows[-1] != "end":
        return {}, "the dump's lines.tsv is cut short"
    if rows[0].startswith("unknown\t"):
        return {}, rows[0].split("\t", 1)[1]
    found = {}
    for row in rows[:-1]:
        fields = row.split("\t")
        try:
            if fields[0] != "line" or len(fields) != 4:
                raise ValueError
            index, key, line = (int(field) for field in fields[1:])
        except ValueError:
            return {}, "the dump's lines.tsv is damaged"
        found.setdefault(index, []).append((key, line))
    return found, None


def _with_lines(calls, frames, why):
    """calls (kind, key, ticks), outermost first, each with the line its frame
    is on and, without one, why (None for a built-in's call): a thread's open
    Python calls and its frames are matched by key from the innermost end, in
    order (a frame the ring has no call of is passed over)."""
    found, position = [(None, None)] * len(calls), 0
    for q in range(len(calls) - 1, -1, -1):
        kind, key, _ = calls[q]
        if kind in ("c", "deeper"):
            continue
        match = next((p for p in range(position, len(frames)) if frames[p][0] == key), None)
        if match is not None:
            found[q], position = (frames[match][1], None), match + 1
        else:
            found[q] = (None, why or "no frame of this call was found")
    return [call + line for call, line in zip(calls, found)]


def stack_chains(directory):
    """(the threads, as [{"index", "native_id", "name"}], thread index -> its
    calls open at the dump (at its frames' instant), outermost first, as (name,
    start ns, None for a call running when recording began; the line its frame
    is on, from lines.tsv, else None; why it is not known, or None)) of a process
    dump's stacks.tsv; None when it has none (a dump written before it was, or
    one cut short before it). TraceFormatError when it is damaged."""
    path = os.path.join(directory, STACKS_FILE)
    try:
        text = read_bounded(path, MAX_STACKS_BYTES).decode("ascii")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise TraceFormatError(f"{path}: not the text of a stacks file") from None
    facts = _process_facts(directory)[0]
    if facts.get("clock_name") not in ("tsc", "monotonic"):
        raise TraceFormatError(f"{directory}: process.json lacks clock_name")
    ns_per_tick = _clock.ns_per_tick() if facts["clock_name"] == "tsc" else 1.0
    lines = text.splitlines()
    if not lines or lines[-1] != "end":
        raise TraceFormatError(f"{path}: cut short (no end line)")
    clock, opened = None, {}
    for number, line in enumerate(lines[:-1], 1):
        fields = line.split("\t")
        try:
            if fields[0] == "clock" and len(fields) == 3:
                clock = int(fields[1]), int(fields[2])
            elif fields[0] == "open" and len(fields) == 6 and fields[3] in ("p", "c", "s"):
                index = int(fields[1])
                if not 0 <= index < MAX_THREADS:
                    raise ValueError
                opened.setdefault(index, []).append((fields[3], int(fields[4]),
                                                     int(fields[5])))
            elif fields[0] == "deeper" and len(fields) in (3, 4):
                index, count = int(fields[1]), int(fields[2])
                if not 0 <= index < MAX_THREADS or count < 1:
                    raise ValueError
                # (4 fields: between the stack's two ends written, the
                # outermost of them begun at ticks; 3: inside, not followed)
                opened.setdefault(index, []).append(
                    ("deeper", count, int(fields[3]) if len(fields) == 4 else None))
            else:
                raise ValueError
        except ValueError:
            raise TraceFormatError(f"{path} line {number} is not one of a stacks file: "
                                   f"{line[:80]!r}") from None
    if clock is None:
        raise TraceFormatError(f"{path}: no clock line")
    tick0, start_ns = clock

    def _ns(ticks):
        return start_ns + int((ticks - tick0) * ns_per_tick)

    files = {}
    names = _key_sources(directory, STACK_SOURCES_FILE, files)
    known = _json_or_none(os.path.join(directory, "threads.json"))
    indexes = set(opened)
    if isinstance(known, list):
        indexes.update(t["index"] for t in known if isinstance(t, dict)
                       and type(t.get("index")) is int and 0 <= t["index"] < MAX_THREADS)
    threads = [{"index": i, "native_id": i + 1, "ident": i + 1, "name": f"thread {i}"}
               for i in range(max(indexes, default=-1) + 1)]
    _name_dumped_threads(directory, threads)
    chains, (lines, why) = {}, frame_lines(directory)
    for index, calls in opened.items():
        chain, own = [], False
        for kind, key, ticks, line, no_line in _with_lines(calls, lines.get(index, []), why):
            if kind == "deeper":        # (key: how many)
                chain.append((gap_name(key), None if ticks is None else _ns(ticks), None,
                              None))
                continue
            left_out = _is_own_file(files[key]) if key in files else kind == "c" and own
            own = left_out
            if not left_out:        # (s: running when recording began: since before)
                chain.append((names.get(key) or f"<unnamed key {key}>", None if kind == "s"
                              else _ns(ticks), line, no_line))
        chains[index] = chain
    return [t for t in threads if t["index"] in indexes], chains
