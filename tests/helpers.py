"""Shared checks: calls by (name, parent name, kind), and exact nesting; a small
disk that fills up; a signal at a chosen line of our code."""
import contextlib
import os
import subprocess
from collections import Counter, defaultdict

import pytest

import pytrace_cffi

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
# Source for a traced program: signal_at_our_line(signum, k), called where the
# program chooses, has the handler of signum run just before the k-th line (from
# 0) of pytrace_cffi's own code that runs next on this thread (signal.raise_signal
# from a sys.settrace function). A race made to land where a test says.
SIGNAL_AT_OUR_LINE = f"""
import os, signal, sys
OURS = {os.path.dirname(pytrace_cffi.__file__) + os.sep!r}
def signal_at_our_line(signum, k):
    seen = -1
    def line(frame, event, arg):
        nonlocal seen
        if event == "line":
            seen += 1
            if seen == k:
                sys.settrace(None)
                signal.raise_signal(signum)
        return line
    def call(frame, event, arg):
        return line if frame.f_code.co_filename.startswith(OURS) else None
    sys.settrace(call)
"""


def trimmed(path):
    """A test file's name as traces show it, worked out without the tracer's own
    trimming code: the tests directory is on sys.path (conftest.py) and is the
    deepest entry holding the tests' files, so their names are relative to it
    ("test_api.py", "workloads/threads.py")."""
    path = os.path.abspath(path)
    assert path.startswith(TESTS_DIR + os.sep), f"{path} is not a test file"
    return path[len(TESTS_DIR) + 1:]


def in_files(files):
    """keep(name, parent, kind): Python calls of functions in `files`, and built-in
    calls made directly by them. Names start with the file path."""
    prefixes = tuple(f"{trimmed(path)}(" for path in files)

    def keep(name, parent, kind):
        if kind == "python":
            return name.startswith(prefixes)
        return parent is not None and parent.startswith(prefixes)
    return keep


def trace_counts(trace, keep):
    """The same Counter as ReferenceTracer.counts, from one of our traces. Only
    calls made while tracing count: a frame seeded at start is no call."""
    calls = list(trace)
    by_id = {call.id: call for call in calls}
    counts = Counter()
    for call in calls:
        parent = by_id[call.parent].name if call.parent is not None else None
        if keep(call.name, parent, call.kind):
            counts[(call.name, parent, call.kind)] += 1
    return counts


def strip_outside_parents(counts, keep_parent):
    """Parents outside the compared files become None: the oracle starts in the
    test harness, we seed the harness's frames."""
    out = Counter()
    for (name, parent, kind), n in counts.items():
        out[(name, parent if parent is not None and keep_parent(parent) else None, kind)] += n
    return out


def diff(ours, reference):
    lines = []
    for key in sorted(set(ours) | set(reference), key=str):
        if ours[key] != reference[key]:
            lines.append(f"  {key}: ours {ours[key]}, oracle {reference[key]}")
    return "\n".join(lines)


def assert_nested(trace):
    """On each thread every call lies inside its parent, and siblings never overlap."""
    calls = list(trace)
    by_id = {call.id: call for call in calls}
    children = defaultdict(list)
    for call in calls:
        assert call.start_ns <= call.end_ns, call
        if call.parent is not None:
            parent = by_id[call.parent]
            assert parent.thread == call.thread, (parent, call)
            assert parent.start_ns <= call.start_ns and call.end_ns <= parent.end_ns, (parent, call)
        children[(call.thread, call.parent)].append(call)
    for siblings in children.values():
        siblings.sort(key=lambda c: (c.start_ns, c.id))
        for before, after in zip(siblings, siblings[1:]):
            assert before.end_ns <= after.start_ns, (before, after)


def chrome_crossings(events):
    """Pairs (earlier, later) of a Chrome trace's complete events on one (pid, tid)
    that overlap without nesting, as names; [] when every track nests strictly.
    Each track's events in start order (the longer first at a tie), times in whole
    nanoseconds; a stack holds the chain of events still open: an event that ends
    after the innermost one open at its start crosses it."""
    tracks = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            start = round(e["ts"] * 1000)
            tracks[(e["pid"], e["tid"])].append((start, start + round(e["dur"] * 1000),
                                                 e["name"]))
    crossings = []
    for spans in tracks.values():
        spans.sort(key=lambda span: (span[0], -span[1]))
        open_spans = []
        for start, end, name in spans:
            while open_spans and open_spans[-1][1] <= start:
                open_spans.pop()
            if open_spans and end > open_spans[-1][1]:
                crossings.append((open_spans[-1][2], name))
            open_spans.append((start, end, name))
    return crossings


def pftrace_thread_events(decoded, our_tracks):
    """A decoded .pftrace's slices (test_perfetto.decode) as Chrome complete events
    on their thread's (pid, tid), ts and dur in µs: the tracks of one thread (ours
    and those a merge puts beside them) as one track, for chrome_crossings. Each
    has "ours": whether it lies on one of our_tracks (uuids)."""
    events = []
    for s in decoded["slices"]:
        if s["track"] not in decoded["threads"]:
            continue                        # (a merge's named track: no thread's)
        pid, tid, _ = decoded["threads"][s["track"]]
        events.append({"ph": "X", "pid": pid, "tid": tid, "name": s["name"],
                       "cat": ",".join(s["categories"]), "ts": s["start"] / 1000,
                       "dur": (s["end"] - s["start"]) / 1000, "args": s["args"],
                       "ours": s["track"] in our_tracks})
    return events


# The start of a memory test's script (run in a subprocess, on Linux): status(field)
# is a /proc/self/status size in bytes, e.g. VmRSS, or VmHWM, the peak since the
# process began or since "5" was written to /proc/self/clear_refs.
PROC_STATUS = """
def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
"""


@contextlib.contextmanager
def small_disk(path, size):
    """A tmpfs of `size` (e.g. "4m") mounted at path (made here) for the block: a
    disk that fills up. Needs root (skipped otherwise); a root that cannot mount
    one fails under CI and skips elsewhere. Unmounted lazily at the end, so files
    a test still holds open do not keep it."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("a full disk is a small tmpfs, and mounting one needs root")
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(path)], capture_output=True, text=True)
    if mounted.returncode != 0:
        reason = f"cannot mount a tmpfs at {path}: {mounted.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
CHROMIUM_INSTALL = "Debian: apt-get install chromium; .ci/run installs it"


def missing_tool(tool, install):
    """For a test whose tool (a program such as chromium or go, or a module no
    package of ours needs) is not installed: skips it on a developer's machine,
    fails it in CI ($CI set), where .ci/run installs every tool - a check never
    hides behind a skip there. tool: what is missing; install: how to get it."""
    message = f"{tool} is not installed ({install})"
    if os.environ.get("CI"):
        pytest.fail(f"$CI is set but {message}: the tests that need it must run in CI",
                    pytrace=False)
    pytest.skip(message)


def perfetto_protos(required=True):
    """The perfetto package's generated protos, which the .pftrace tests decode
    with (pip install perfetto "protobuf>=6.31.1"). Where they do not import,
    those tests skip (required) or get None (a test with a check of its own
    instead) - except in CI ($CI set), where a missing decoder fails the test
    rather than quietly hiding every .pftrace check."""
    import pytest
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"$CI is set but the perfetto protos do not import ({exc}): the "
                        ".pftrace tests must run in CI (pip install perfetto "
                        "'protobuf>=6.31.1')", pytrace=False)
        if required:
            pytest.skip("the perfetto and protobuf packages are not installed",
                        allow_module_level=True)
        return None
    return perfetto_trace_pb2
