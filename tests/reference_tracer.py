"""A small pure-Python tracer on sys.setprofile: the oracle the C core is held to.

It sees what sys.setprofile reports on this interpreter (the current thread, and
threads started while it runs, through threading.setprofile), and records each
call with its parent, named exactly as pytrace_cffi names them. Slow by design.
"""
import sys
import threading
from collections import Counter

from pytrace_cffi._names import builtin_function_name, path_prefixes, python_function_name


class ReferenceTracer:
    def __init__(self, trim_paths=True):
        self.calls = []              # (thread ident, name, parent name or None, kind)
        self._stacks = {}            # thread ident -> list of open names
        self._trim_paths = trim_paths
        self._prefixes = ()

    def _hook(self, frame, event, arg):
        ident = threading.get_ident()
        stack = self._stacks.setdefault(ident, [])     # (name, kind) of open calls
        if event == "call":
            name = python_function_name(frame.f_code, self._prefixes)
            self.calls.append((ident, name, stack[-1][0] if stack else None, "python"))
            stack.append((name, "python"))
        elif event == "c_call":
            name = builtin_function_name(arg)
            self.calls.append((ident, name, stack[-1][0] if stack else None, "c"))
            stack.append((name, "c"))
        elif event == "return":
            # C calls still open above the frame close with it, as the walk closes
            # them: 3.12.5+ and 3.13 report the call, not the return, of a bound
            # method whose function is a built-in, called as f(*args).
            while stack and stack[-1][1] == "c":
                stack.pop()
            if stack:
                stack.pop()
        elif event in ("c_return", "c_exception"):
            # Only an open C call: 3.12.0-3.12.4 report the return, not the call,
            # of a bound method whose function is a built-in (CPython gh-122029).
            if stack and stack[-1][1] == "c":
                stack.pop()

    def start(self):
        self._prefixes = path_prefixes() if self._trim_paths else ()
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)

    def stop(self):
        sys.setprofile(None)
        threading.setprofile(None)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False

    def counts(self, keep=None):
        """Counter of (name, parent name, kind) for calls that keep(call) accepts."""
        return Counter((name, parent, kind) for _, name, parent, kind in self.calls
                       if keep is None or keep(name, parent, kind))
