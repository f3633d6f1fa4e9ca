"""Reading a job's directory: its processes, their state, and the children
it launched that were not followed."""
import collections
import os
from collections import namedtuple

from ..errors import TraceFormatError
from ..model.saved import load
from .identity import (LAUNCHED_FILE, NOT_PYTHON, PROCESS_FILE, STARTING_AT_FINISH,
                       UNFOLLOWED_FILE, UNNAMED_MP_CHILD, _alive, _is_pid, _pid_of_name,
                       _process_facts, _read_json_file, _read_jsonl)
from .recover import _NothingSpilled, _recover

ProcessResult = namedtuple("ProcessResult", "pid label state calls directory note")
ProcessResult.__doc__ = """One process of a joined trace directory.

state  "complete" (its trace was saved), "running" (still running at the join:
       what it had spilled is joined; nothing yet: note says where its trace
       goes), "recovered" (it died without saving: what
       it had spilled is joined) or "lost" (nothing could be read; note says why)
calls  the calls that began in its trace, as the summary counts them (a forked
       child's frames continued from its parent are shown, not counted)
"""


def process_directories(inputs):
    """The per-process directories of inputs: trace directories (their proc-*),
    saved traces, or single process directories."""
    if isinstance(inputs, (str, bytes, os.PathLike)):
        inputs = [inputs]
    found = []
    for path in inputs:
        path = os.fsdecode(path)
        if not os.path.isdir(path):
            raise TraceFormatError(f"{path!r} is not a directory")
        if os.path.islink(path):
            path = os.path.realpath(path)   # named by the user: a link inside one is not
        if _is_process_dir(path):
            found.append(path)
            continue
        # A proc-* link is listed, to be refused by read_process in words: it may
        # lead out of the job's directory.
        subdirs = sorted(os.path.join(path, d) for d in os.listdir(path)
                         if d.startswith("proc-") and (os.path.isdir(os.path.join(path, d))
                                                       or os.path.islink(os.path.join(path, d))))
        if not subdirs:
            raise TraceFormatError(f"{path!r} holds no process traces (no proc-* directory, "
                                   "no meta.json)")
        found.extend(subdirs)
    return found


def _is_process_dir(path):
    return any(os.path.lexists(os.path.join(path, f)) for f in ("meta.json", PROCESS_FILE))



# facts a process's meta.json or process.json may hold, by their type: one of
# another type (a damaged or hostile file) is left out, as if not known
_TEXT_FACTS = ("host", "label")


def read_process(directory):
    """(Trace or None, facts dict, state, note) for one process directory."""
    trace, facts, state, note = _read_process(directory)
    for name in _TEXT_FACTS:
        if name in facts and not isinstance(facts[name], str):
            del facts[name]
    return trace, facts, state, note


def _read_process(directory):
    if os.path.islink(directory):
        raise TraceFormatError(f"{directory}: a symbolic link, not followed (it may lead out "
                               "of the job's directory)")
    facts, damaged = _process_facts(directory)
    if os.path.lexists(os.path.join(directory, "meta.json")):
        trace = load(directory)
        meta = _read_json_file(os.path.join(directory, "meta.json"))
        for name in ("pid", "ppid", "argv", "host", "label", "rank", "local_rank",
                     "world_size", "root", "worker_id", "num_workers"):
            if name in meta:
                facts[name] = meta[name]
        return trace, facts, "complete", ""
    pid = facts.get("pid")
    if not _is_pid(pid):
        if _pid_of_name(directory) is not None:
            facts["pid"] = _pid_of_name(directory)
        if damaged:
            return None, facts, "lost", f"no meta.json, and {damaged}"
        return None, facts, "lost", ("ended before it recorded anything (no meta.json, no "
                                     "process.json)")
    dumped = _dump_reason(directory)
    state = "dumped" if dumped else "running" if _alive(pid) else "recovered"
    try:
        trace, damage = _recover(directory, facts)
    except _NothingSpilled as exc:
        if state == "running":
            return None, facts, "running", (f"still running, nothing spilled yet: its trace "
                                            f"goes to {directory}")
        return None, facts, "lost", str(exc)
    except TraceFormatError as exc:
        return None, facts, "lost", str(exc)
    note = (dumped if dumped else
            "still running: joined as far as it has spilled" if state == "running" else
            "ended without saving (killed?): joined as far as it had spilled")
    return trace, facts, state, "; ".join([note] + damage)


DUMP_NOTE = "a flight recorder dump"
CUT_SHORT = ", cut short: read as far as it was written"


def _dump_reason(directory):
    """A flight recorder's dump (flight/dumps.py) in words, or None."""
    try:
        facts = _read_json_file(os.path.join(directory, "dump.json"))
    except (OSError, TraceFormatError):
        return None
    reason = facts.get("reason") if isinstance(facts, dict) else None
    whole = os.path.exists(os.path.join(directory, "done.json"))
    return (f"{DUMP_NOTE} ({reason if isinstance(reason, str) else '?'})"
            + ("" if whole else CUT_SHORT))


def status(inputs):
    """ProcessResult per process of inputs, without writing anything."""
    return [result for result, _ in _read_all(inputs)]


def _read_all(inputs):
    from ..render.summary import calls_begun
    out = []
    launch_names = {}
    for directory in process_directories(inputs):
        try:
            trace, facts, state, note = read_process(directory)
        except TraceFormatError as exc:
            trace, facts, state, note = None, {"pid": _pid_of_name(directory)}, "lost", str(exc)
        pid = facts.get("pid")
        if trace is not None:
            pid = trace.pid
        label = facts.get("label") or f"pid {pid}"
        if label == UNNAMED_MP_CHILD or not facts.get("label"):   # (or lost before it said)
            label = _launch_name(os.path.dirname(directory), pid, facts, launch_names) or label
        calls = calls_begun(trace) if trace is not None else 0
        out.append((ProcessResult(pid, label, state, calls, directory, note),
                    (trace, facts)))
    return out


def _launch_name(job_dir, pid, facts, cache):
    """The name the launch of process pid was noted with in job_dir's
    launched.jsonl (a multiprocessing spawn: the Process's name, e.g.
    SpawnPoolWorker-2), or None. A pid launched more than once in the job is
    told apart by its command line; still ambiguous, None. cache: {job_dir:
    {child pid: [launch records with a name]}}, filled here."""
    named = cache.get(job_dir)
    if named is None:
        named = cache[job_dir] = collections.defaultdict(list)
        for record in _child_records(job_dir, LAUNCHED_FILE)[0]:
            if record.get("name") and record.get("child_pid") and record.get("how") != "exec":
                named[record["child_pid"]].append(record)
    records = named.get(pid, []) if _is_pid(pid) else []
    if len(records) > 1:
        records = [r for r in records if r["command"] == facts.get("command")]
    names = {r["name"] for r in records}
    return names.pop() if len(names) == 1 else None


def unfollowed(job_dir):
    """The children a job launched that were not followed: dicts with pid (the
    launcher), command, reason, and how ("subprocess", "posix_spawn", "exec",
    "spawn": multiprocessing's; when known) and child_pid (when known). Those are
    the children noted as they were launched (not Python, started with -I/-E/-S,
    given an environment without PYTRACE_CFFI_FOLLOW, their tracing failed to
    start), and the followed Python children that left no directory: ended before
    their bootstrap ran (a spawned Pool worker terminated while Python started).
    A damaged line of either file is one more dict, with "damaged" saying which
    line and what is wrong (pid None, command [])."""
    noted, damaged = _child_records(job_dir, UNFOLLOWED_FILE)
    launches, more = _child_records(job_dir, LAUNCHED_FILE)
    return (noted + _left_no_trace(job_dir, noted, launches)
            + [{"pid": None, "command": [], "damaged": what,
                "reason": "a damaged line: a child noted there may be missing here"}
               for what in damaged + more])


_CHILD_FIELDS = {"pid": lambda v: v is None or _is_pid(v),
                 "child_pid": lambda v: v is None or _is_pid(v),
                 "command": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
                 "how": lambda v: isinstance(v, str), "name": lambda v: isinstance(v, str),
                 "reason": lambda v: isinstance(v, str)}


NOT_READ_WHOLE = "not every process of"       # the TraceWarning of not_read_whole


def not_read_whole(job_dir, results):
    """The TraceWarning text for a job's trace read as one (summary, export): each
    process not read whole (lost, recovered, running, or damaged: ProcessResult's
    note says what), and each damaged line of the job's launch notes; None when
    there is none."""
    lines = [f"pid {r.pid} ({r.label}): {r.state}, {r.calls} calls"
             + (f" - {r.note}" if r.note else "") + f" [{r.directory}]"
             for r in results if r.state not in ("complete", "dumped") or (
                 r.note and not r.note.startswith(DUMP_NOTE)) or r.note.endswith(CUT_SHORT)]
    for name in (LAUNCHED_FILE, UNFOLLOWED_FILE):
        lines += [f"{what} (a child noted there may be missing from this report)"
                  for what in _child_records(job_dir, name)[1]]
    if not lines:
        return None
    return f"{NOT_READ_WHOLE} {job_dir} was read whole:\n  " + "\n  ".join(lines)


def _child_records(job_dir, name):
    """(the records of launched.jsonl or unfollowed.jsonl whose fields have their
    types, phrases for the lines left out)."""
    numbered, damaged = _read_jsonl(os.path.join(job_dir, name))
    records = []
    for number, record in numbered:
        bad = [field for field, ok in _CHILD_FIELDS.items()
               if field in record and not ok(record[field])]
        if bad or not isinstance(record.get("command"), list):
            damaged.append(f"{name} line {number} has a bad {', '.join(bad) or 'command'}")
        else:
            records.append(record)
    return records, damaged



def _left_no_trace(job_dir, noted, launches):
    """The launches (launched.jsonl's) that no process directory (nor a failed
    bootstrap's note) answers, with the reason. A launch with a pid is answered by
    that pid's directory; one without (subprocess, posix_spawn) by an unanswered
    directory whose command is the launch's (or runs it: a #! script's
    interpreter line comes first)."""
    if not launches:
        return []
    answers = []          # (pid, command) of each process that got as far as tracing
    try:
        directories = process_directories(job_dir)
    except TraceFormatError:
        directories = []
    for directory in directories:
        facts = _process_facts(directory)[0] if not os.path.islink(directory) else {}
        if facts.get("root") or facts.get("forked"):
            continue                      # not launched: the job's own, or forked
        pid = facts.get("pid")
        if not isinstance(pid, int):
            pid = _pid_of_name(directory)
        answers.append([pid, facts.get("command")])
    answers += [[r.get("child_pid"), r.get("command")] for r in noted if r.get("child_pid")]
    missing = []
    for launch in sorted(launches, key=lambda r: r.get("child_pid") is None):
        child = launch.get("child_pid")
        for answer in answers:
            if (answer[0] == child if child is not None and launch.get("how") != "exec"
                    else _runs(answer[1], launch.get("command"))
                    and (child is None or answer[0] == child)):
                answers.remove(answer)
                break
        else:
            missing.append(launch)
    out = []
    running = None
    for launch in missing:
        child = launch.get("child_pid")
        if child is None and running is None:
            running = list(_descendant_commands().values())
        if child is not None and launch.get("how") != "exec" and _alive(child):
            reason = "it left no trace yet (still starting up, or stopped before tracing)"
        elif child is None and any(_runs(command, launch.get("command")) for command in running):
            reason = STARTING_AT_FINISH
        else:
            reason = ("it left no trace: it ended before its bootstrap could start "
                      "tracing (terminated or killed while Python started up?)")
        out.append(dict(launch, reason=reason))
    return out


def _descendant_commands():
    """{pid: argv} of the live processes descending from this one: a child whose
    launch noted no pid (subprocess) is found among them by its command line
    (Linux /proc; {} elsewhere)."""
    parents = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        try:
            with open(f"/proc/{int(name)}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] != b"Z":
                parents[int(name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    mine, newest = set(), {os.getpid()}
    while newest:
        newest = {pid for pid, ppid in parents.items() if ppid in newest} - mine
        mine |= newest
    commands = {}
    for pid in mine:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                commands[pid] = [os.fsdecode(a) for a in f.read().split(b"\0")[:-1]]
        except OSError:
            continue
    return commands


def _runs(command, launched):
    """Whether a process's command line is that of launched (argv lists): the same;
    or, launched through a #! script or a launcher (pyenv's shims), another
    program's path first (the interpreter's; for a #! script its interpreter line
    comes before the script's path) but the same arguments after it."""
    if not isinstance(command, list) or not isinstance(launched, list) or not launched:
        return False
    if command == launched:
        return True
    n = len(launched)
    if len(command) < n:
        return False
    if n > 1:
        return command[len(command) - n + 1:] == launched[1:]
    return os.path.basename(command[-1]) == os.path.basename(launched[0])



def unfollowed_lines(skipped):
    """The lines `run` prints for the children not followed (see unfollowed): one
    per Python child, with why; programs that are not Python (compilers, shells,
    tools: a job may start hundreds) together in one, counted by name."""
    lines, others = [], collections.Counter()
    for child in skipped:
        if child.get("damaged"):
            lines.append(f"{child['damaged']} (a child noted there may be missing here)")
            continue
        command = [str(a) for a in child.get("command") or ()]
        if child.get("reason") == NOT_PYTHON:
            others[os.path.basename(command[0]) if command else "?"] += 1
            continue
        how = ", ".join(filter(None, [child.get("name"), child.get("how"),
                                      child.get("child_pid") and f"pid {child['child_pid']}"]))
        shown = " ".join(command)
        shown = shown if len(shown) <= 100 else shown[:97] + "..."
        lines.append(f"not followed: {shown!r}{f' ({how})' if how else ''} "
                     f"started by pid {child.get('pid')}: {child.get('reason')}")
    if others:
        lines.append(f"not followed (not Python): {sum(others.values())} "
                     f"program{'s' if sum(others.values()) > 1 else ''}: "
                     + ", ".join(name + (f" x{n}" if n > 1 else "")
                                 for name, n in sorted(others.items())))
    return lines

