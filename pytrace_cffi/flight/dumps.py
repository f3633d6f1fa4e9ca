"""Reading the flight recorder's dumps (recorder.py writes them).

A dump of one process, DUMPDIR/proc-<pid>/, is a process directory that
follow/recover.py reads (events.bin, keys.jsonl, process.json, threads.json), so
a DUMPDIR is a job directory: `export DUMPDIR -o x.pftrace` joins its processes.
dump.json says why and when, and each thread's Python stack from its frames;
done.json is written last (a dump without it was cut short, read as far as it
goes).

dump_facts completes dump.json's stacks from the trace: each call still open
at the dump gets the time it began (when the ring still holds its beginning),
and the calls frames do not show (a built-in such as time.sleep, innermost)
are added. A dump written by C (a thread stuck holding the GIL) has no frames:
its stacks are the open calls the ring holds. runpy's frames below the program
(`python -m MODULE`) are left out of the stacks.
"""
import os
import re

from ..errors import TraceFormatError
from ..follow.identity import _read_json_file
from ..follow.recover import recover
from .stacks import is_gap, stack_chains

DUMP_FILE = "dump.json"
DONE_FILE = "done.json"
PROCESS_PREFIX = "proc-"
OPEN_AT_STOP = 4            # pt_slice flags: PT_SLICE_OPEN_AT_STOP
SEEDED = 2                  # PT_SLICE_SEEDED: running when the trace began
PYTHON_NAME = re.compile(r"^.*\(\d+\): .+$", re.S)     # (as hang_report's)


def process_dumps(path):
    """The process dumps path holds: a process dump itself, a DUMPDIR (its
    proc-* dumps), or a dumps directory (the newest DUMPDIR's, plus each other
    process's newest dump). Sorted by path."""
    path = os.path.abspath(path)
    if os.path.isfile(os.path.join(path, DUMP_FILE)):
        return [path]
    here = _process_dirs(path)
    if here:
        return here
    newest = {}
    for name in os.listdir(path) if os.path.isdir(path) else ():
        if os.path.islink(os.path.join(path, name)):
            continue                # (may lead out of the directory)
        for proc in _process_dirs(os.path.join(path, name)):
            when = _dumped_at(proc)
            pid = os.path.basename(proc)
            if pid not in newest or newest[pid][0] < when:
                newest[pid] = (when, proc)
    return sorted(proc for _, proc in newest.values())


def _dumped_at(process_dir):
    """When a process dump was made, to choose the newest: dump.json's realtime_ns,
    else the file's modification time. Not the time alone: two dumps within one
    tick of the file system's clock share it, and a dump's clone may finish
    writing after a later dump's."""
    path = os.path.join(process_dir, DUMP_FILE)
    try:
        data = _read_json_file(path)
    except (OSError, TraceFormatError):
        data = None
    stamp = data.get("realtime_ns") if isinstance(data, dict) else None
    return stamp if type(stamp) is int else os.stat(path).st_mtime_ns


def _process_dirs(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(os.path.join(directory, n) for n in names
                  if n.startswith(PROCESS_PREFIX)
                  and not os.path.islink(os.path.join(directory, n))    # (may lead out)
                  and os.path.isfile(os.path.join(directory, n, DUMP_FILE)))


def read_dump(directory):
    """(dump.json's facts, the Trace of the ring) of one process dump."""
    facts = _read_json_file(os.path.join(directory, DUMP_FILE))
    if not isinstance(facts, dict):
        raise TraceFormatError(f"{directory}: dump.json is not an object")
    facts["whole"] = os.path.isfile(os.path.join(directory, DONE_FILE))
    return facts, recover(directory)


def dump_facts(directory):
    """dump.json's facts with every thread's stack completed from the calls open
    at the dump's frames' instant (see the module's docstring): from its
    stacks.tsv (stacks.py; the clone cut it at dump.json's frames_ticks), else
    from its ring; monotonic_ns, when C wrote the dump without it, is the ring's
    last event."""
    facts = _read_json_file(os.path.join(directory, DUMP_FILE))
    quick = stack_chains(directory) if isinstance(facts, dict) and isinstance(
        facts.get("monotonic_ns"), int) else None
    if quick is None:
        facts, trace = read_dump(directory)
        chains = open_chains(trace, frames_instant(trace, facts.get("frames_ticks")))
        if not isinstance(facts.get("monotonic_ns"), int):
            facts["monotonic_ns"] = trace.stop_ns
        ring_threads = [{"index": t.index, "native_id": t.native_id, "name": t.name}
                        for t in trace.threads]
    else:
        ring_threads, chains = quick
        facts["whole"] = os.path.isfile(os.path.join(directory, DONE_FILE))
    threads = facts.get("threads")
    by_id = {}
    if isinstance(threads, list):
        by_id = {t.get("native_id"): t for t in threads if isinstance(t, dict)}
    completed = []
    for thread in ring_threads:
        known = by_id.pop(thread["native_id"], None)
        frames = known.get("stack") if known else None
        stack, ring_only = merged_stack(frames, chains.get(thread["index"], []))
        completed.append({"native_id": thread["native_id"], "name": thread["name"],
                          "stack": without_launcher(stack),
                          **({"ring_only": ring_only} if ring_only else {})})
    for known in by_id.values():        # a thread the ring holds nothing of
        completed.append(dict(known, stack=without_launcher(
            merged_stack(known.get("stack"), [])[0])))
    facts["threads"] = completed
    return facts


def frames_instant(trace, ticks):
    """The ns on trace's timeline of dump.json's frames_ticks (the event clock's
    reading taken with the frames, in one hold of the GIL: recorder.py), as the
    trace's times are made from ticks (pt_walk.c); None when unknown (a dump of
    before, or C's)."""
    streams = trace._streams
    clock = streams.clock if streams is not None else None
    if type(ticks) is not int or not -1 << 62 < ticks < 1 << 62 or not clock:
        return None
    return clock["ns0"] + int(float(ticks - clock["tick0"]) * clock["ns_per_tick"])


def open_chains(trace, at_ns=None):
    """Thread index -> its calls open at the end of the trace (at_ns: at that
    instant, the frames' own: a call begun after it is left out, one ended
    after it was open), outermost first, as (name, start ns)."""
    from ..model.walk import thread_batches
    chains = {}
    for thread, batches in thread_batches(trace):
        open_calls = []
        for slices, n, _ in batches:
            for i in range(n):
                call = slices[i]
                if at_ns is None:
                    open_then = call.flags & OPEN_AT_STOP
                else:
                    open_then = call.start <= at_ns and (call.flags & OPEN_AT_STOP
                                                         or call.end > at_ns)
                if open_then:       # (a call running when recording began: since before)
                    open_calls.append((call.depth, trace.names[call.key],
                                       None if call.flags & SEEDED else call.start))
        open_calls.sort(key=lambda call: call[0])
        chains[thread.index] = [(name, start) for _, name, start in open_calls]
    return chains


def without_launcher(stack):
    """A stack without the frames that launched the program below it: runpy's
    (`python -m MODULE`, a followed child's too), with the exec of the program's
    module they made, as `run` leaves its own launcher out."""
    outermost = 0
    while outermost < len(stack) and _is_runpy(stack[outermost].get("name")):
        outermost += 1
    if outermost and outermost < len(stack) and stack[outermost].get("name") == "builtins.exec":
        outermost += 1
    return stack[outermost:] if outermost < len(stack) else stack


def _launched(chain):
    """chain without the launcher below the program (without_launcher's)."""
    outermost = 0
    while outermost < len(chain) and _is_runpy(chain[outermost][0]):
        outermost += 1
    if outermost and outermost < len(chain) and chain[outermost][0] == "builtins.exec":
        outermost += 1
    return chain[outermost:]


def _is_runpy(name):
    return isinstance(name, str) and (name.startswith("<frozen runpy>")
                                      or name.startswith("runpy.py("))


def merged_stack(frames, chain):
    """A thread's stack, outermost first, as [{"name", "since_ns"}]: its frames
    (or, without them, the chain of open calls) with since_ns from the chain
    (a frame keeps its "line", the line it was on),
    matched from the innermost end (a recursion's frames keep their own times);
    a built-in call of the chain no frame shows goes in where it ran. Frames and
    chain are of one instant (frames_instant), so they agree; where they do
    not, neither is made up from the other: a Python call of the chain no frame
    shows is left out (ring_only), and a frame the chain has no start for
    inside one it has (its start cannot be before the window) gets
    "start_seen": false. Returns (stack, ring_only names, innermost first)."""
    if not isinstance(frames, list) or not frames:
        return [_chain_frame(*call) for call in chain], []
    if all(isinstance(f, dict) and f.get("raised") for f in frames):
        return frames, []   # a traceback: the calls open now handle its exception
    stack = [dict(f, name=f.get("name"), since_ns=f.get("since_ns"), line=f.get("line"))
             for f in frames if isinstance(f, dict)]    # (what else a frame says stays)
    position = len(stack)               # the chain's calls go inside of it
    chain = _launched(chain)            # (dumps' frames leave the launcher out)
    matched, ring_only = [], []
    for name, start, *_ in reversed(chain):
        if is_gap(name):
            continue                    # (the frames have the calls it stands for)
        match = next((q for q in range(position - 1, -1, -1) if stack[q]["name"] == name),
                     None)
        if match is None and _is_python(name):
            ring_only.append(name)      # (the frames would show it)
        elif match is None:
            stack.insert(position, {"name": name, "since_ns": start})
            matched = [q + 1 if q >= position else q for q in matched]
        else:
            stack[match]["since_ns"] = start
            matched.append(match)
            position = match
    for q in range(min(matched, default=len(stack)) + 1, len(stack)):
        if q not in matched and "line" in stack[q]:         # a frame's (not inserted)
            stack[q]["start_seen"] = False
    return stack, ring_only


def _chain_frame(name, since_ns, line=None, line_not_known=None):
    """A stack's frame of a chain's call: with the line its frame is on (from the
    dump's lines.tsv: stacks.py), or why that is not known."""
    frame = {"name": name, "since_ns": since_ns}
    if line is not None:
        frame["line"] = line
    elif line_not_known is not None:
        frame["line_not_known"] = line_not_known
    return frame


def _is_python(name):
    """Whether a call's name is a Python function's (file(first line): name)."""
    return isinstance(name, str) and bool(PYTHON_NAME.match(name))
