"""The HTML page's per-test view of a pytest run: which calls are tests, found
by name in the trace alone (we never import pytest).

A pytest run shows as pluggy's plumbing (HookCaller.__call__, _hookexec,
_multicall) around pytest's own hooks. Each test item runs in one call of
_pytest/runner.py's runtestprotocol (setup, call and teardown); its test
function is the Python function outside pytest and pluggy called by
_pytest/python.py's pytest_pyfunc_call (for a unittest.TestCase, by
unittest/case.py's _callTestMethod). So the page lists,
per runtestprotocol call: where it runs (thread, index, start, end) and the
test function's key and duration when one was found. The item's nodeid is an
argument, not in the trace: the page names a test by its function and
file:line (a parametrized test's runs by their order).

The survey's pass hands every slice here (Tests.add) only when the trace's
names hold runtestprotocol: other traces pay nothing. At most MAX_TESTS tests
are listed; the page says how many more ran.
"""
import re

from .._core import ffi
from ..model.saved_format import SLICE_RECORD

# a pt_slice as SLICE_RECORD reads it (=qqIIqII): its key is 32-bit word 4, its
# parent 64-bit word 3
KEY_WORD, PARENT_WORD = 4, 3
if SLICE_RECORD.format.lstrip("=<") != "qqIIqII":
    raise ImportError("render/page_tests.py reads keys and parents from SLICE_RECORD's "
                      "layout, which changed")

MAX_TESTS = 5000
# names as the trace gives them: a path (often shortened to its package) and line
PROTOCOL = re.compile(r"(^|[/\\])_pytest[/\\]runner\.py\(\d+\): runtestprotocol$")
CALLERS = re.compile(r"(^|[/\\])_pytest[/\\]python\.py\(\d+\): pytest_pyfunc_call$"
                     r"|(^|[/\\])unittest[/\\]case\.py\(\d+\): _callTestMethod$")
# what a caller calls besides the test (pyfuncitem.obj, a property of pytest's)
NOT_A_TEST = re.compile(r"(^|[/\\])(_pytest|pluggy)[/\\]")
# pluggy's own modules: the plumbing the page can hide
PLUGGY = re.compile(r"(^|[/\\])pluggy[/\\][\w.]+\.py\(\d+\): ")


def pluggy_keys(names):
    """The keys of pluggy's Python functions (the per-test view hides them)."""
    return [key for key, name in enumerate(names) if PLUGGY.search(name)]


class Tests:
    """The tests of a pytest run, gathered in the survey's pass (see the module's
    doc); on is False for a trace that is no pytest run."""

    def __init__(self, names, key_kinds, start_ns):
        # the test function: a Python function, called by a caller, not pytest's
        self.candidates = {key for key, (name, kind) in enumerate(zip(names, key_kinds))
                           if kind == "python" and not NOT_A_TEST.search(name)}
        self.protocol = {key for key, name in enumerate(names) if PROTOCOL.search(name)}
        self.callers = {key for key, name in enumerate(names) if CALLERS.search(name)}
        self.on = bool(self.protocol)
        self.start_ns = start_ns
        self.found, self.more = [], 0
        self.thread = -1

    def begin_thread(self):
        self.thread += 1
        self.open = None            # the runtestprotocol call running: its entry
        self.caller_index = set()   # indices of the current test's callers

    def add(self, slices, n, first_index):
        if not self.on or n == 0:
            return
        protocol, callers = self.protocol, self.callers
        records = memoryview(ffi.buffer(slices, n * SLICE_RECORD.size))
        # Only the records whose key is watched, or whose parent is a caller, are
        # read whole: keys and parents picked out of the raw records first.
        keys = records.cast("I")[KEY_WORD::SLICE_RECORD.size // 4]
        watched = protocol | callers
        at = [offset for offset, key in enumerate(keys) if key in watched]
        calling = self.caller_index | {first_index + offset for offset in at
                                       if keys[offset] in callers}
        if calling:
            parents = records.cast("q")[PARENT_WORD::SLICE_RECORD.size // 8]
            at = sorted(set(at).union(offset for offset, parent in enumerate(parents)
                                      if parent in calling))
        for offset in at:
            start, end, key, _flags, parent, _tag, _depth = SLICE_RECORD.unpack_from(
                records, offset * SLICE_RECORD.size)
            if key in protocol:
                if self.open is not None and start < self.open[3]:
                    continue        # one inside another (a plugin running an item)
                self.caller_index, self.open = set(), None
                if len(self.found) >= MAX_TESTS:
                    self.more += 1
                    continue
                # thread, index, start, end, test function's key, its duration
                self.open = [self.thread, first_index + offset, start, end, None, 0]
                self.found.append(self.open)
            elif self.open is None or start >= self.open[3]:
                continue
            elif key in callers:
                self.caller_index.add(first_index + offset)
            elif parent in self.caller_index and self.open[4] is None and \
                    key in self.candidates:
                self.open[4], self.open[5] = key, end - start

    def end_thread(self):
        self.open = None

    def meta(self, names):
        """The page's "tests" (None for no pytest run): per test [thread, index,
        start and end in ns after the trace's start, the test function's key or
        None, its duration in ns]; how many more ran; pluggy's keys."""
        if not self.on:
            return None
        return {"tests": [[thread, index, start - self.start_ns, end - self.start_ns, key,
                           test_ns] for thread, index, start, end, key, test_ns in self.found],
                "more": self.more, "pluggy": pluggy_keys(names)}
