"""log_exceptions: what the C core's exception reports (c_src/pt_exceptions.c)
become, one instant per exception on the thread that raised it.

3.12+ (sys.monitoring: RAISE, RERAISE, EXCEPTION_HANDLED): the instant is
"exception <Type>" at the raise, args {"message": str(exc), at most 200
characters, "where": "file(line): function" of the raise, "caught_in": the same
of the handler that kept it}; no caught_in: nothing in the traced code caught it
(it ended the thread or the program, C code such as hasattr() swallowed it, or
stop() came first). RAISE fires again in every frame the exception passes
through: those are the same exception (its traceback grew by one frame), not new
instants. A handler that re-raises (a `finally:`, a `with` block, a bare
`raise`) did not keep it: its caught_in is withdrawn.

3.9-3.11 (the profile hook, which never sees the exception object): the instant
is "exception" where it first left a frame ("where": that frame's file, line
and function), args "frames_left" (how many frames it unwound in a row) and
"reached" (the frame it unwound into: where it was caught, or where it went on
into code not traced); a built-in that raised gives "raised_by" (its name) and
"where" its caller's line. Type, message and handler are not visible there, and
a generator closed before its end (GeneratorExit) looks like any other.

Exceptions inside calls of pytrace_cffi's own code (its filters asked by start(),
run's machinery calling the standard library) are left out, as traces leave out
those calls with what they call.

Described in Python, from inside the hook (which records nothing meanwhile):
each report is one call of describe(), guarded so that an exception's __str__
that raises, recurses or is huge never escapes or grows without bound.
"""
import sys

from ._core import lib
from ._hiding import _is_own_file, hiding
from ._names import path_prefixes, trim_path

MESSAGE_CHARS = 200
_RECENT = 16                # exceptions in flight remembered per thread (3.12+)
_PLACES = 4096              # places remembered (3.12+)


def _line_at(code, offset):
    """The line of the instruction at offset (bytes), or of the first one after
    it that has a line (a handler's first instruction has none), else before it."""
    try:
        positions = list(code.co_positions())
    except Exception:
        return code.co_firstlineno
    at = max(0, offset // 2)
    for line, *_ in positions[at:]:
        if line is not None:
            return line
    for line, *_ in reversed(positions[:at]):
        if line is not None:
            return line
    return code.co_firstlineno


def bounded_text(describe, value, limit=MESSAGE_CHARS):
    """describe(value) (str, repr) cut to limit characters; what failed, said
    instead, when it raised or recursed."""
    try:
        text = describe(value)
        if not isinstance(text, str):
            raise TypeError(f"{describe.__name__}() returned {type(text).__name__}")
    except RecursionError:
        return f"<{describe.__name__}() recursed>"
    except Exception as error:
        try:
            return f"<{describe.__name__}() raised {type(error).__name__}>"
        except Exception:
            return f"<{describe.__name__}() failed>"
    if len(text) > limit:
        return text[:limit] + f"... ({len(text)} characters)"
    return text


def _type_name(exc):
    return getattr(type(exc), "__qualname__", None) or type(exc).__name__


class ExceptionLog:
    """The session's describe() (pt_set_exception_hook) and what it remembers:
    per thread, the exceptions in flight (3.12+) or the last one unwinding
    (3.9-3.11)."""

    def __init__(self, trim_paths=True):
        self._prefixes = path_prefixes() if trim_paths else ()
        self._base_frames = {}
        self._in_flight = {}        # thread index -> [[id(exc), id(traceback), args]]
        self._unwinding = {}        # thread index -> args (3.9-3.11)
        self._places = {}           # (code, offset) -> "file(line): function" (3.12+)

    def note_running_frames(self):
        """At start: the frames running then, below which no call is recorded
        (by id and code: an id is used again once its frame is gone)."""
        tops = list(sys._current_frames().values())
        frames = self._base_frames = {}
        for frame in tops:
            while frame is not None:
                frames[id(frame)] = frame.f_code
                frame = frame.f_back

    def _in_our_calls(self, frame):
        """Whether frame runs inside a call of pytrace_cffi's own code made while
        tracing (start()'s filters, run's machinery, an export), or is itself a
        frame running at start that traces leave out (ours or a launcher's, met
        by an exception once the program is over): traces leave out those calls
        with what they call, and these instants with them. Other frames running
        at start end the search."""
        first = True
        while frame is not None:
            code = frame.f_code
            base = self._base_frames.get(id(frame)) is code
            if base and not first:
                return False
            if _is_own_file(code.co_filename) and hiding(code) == lib.PT_HIDE_SUBTREE:
                return True
            if base:        # a launcher's (runpy's, below `run`'s): hidden as well
                return hiding(code) != 0
            frame, first = frame.f_back, False
        return False

    def _where(self, code, line):
        return f"{trim_path(code.co_filename, self._prefixes)}({line}): {code.co_name}"

    def _where_offset(self, code, offset):
        """_where of an instruction, remembered: a loop raises at the same places."""
        key = (code, offset)
        place = self._places.get(key)
        if place is None:
            if len(self._places) >= _PLACES:
                self._places.clear()
            place = self._places[key] = self._where(code, _line_at(code, offset))
        return place

    def describe(self, event, place, offset, detail, thread, chained):
        if event in (lib.PT_EXC_UNWIND, lib.PT_EXC_C_RAISE):
            if not (chained and thread in self._unwinding) and self._in_our_calls(place):
                self._unwinding.pop(thread, None)   # what unwinds next is not that one
                return None
            return self._profiled(event, place, detail, thread, chained)
        exc, code = detail, place
        traceback = getattr(exc, "__traceback__", None)
        recent = self._in_flight.setdefault(thread, [])
        if event == lib.PT_EXC_RAISE:
            below = getattr(traceback, "tb_next", None)
            if below is not None:
                for entry in recent:
                    if entry[0] == id(exc) and entry[1] == id(below):
                        entry[1] = id(traceback)     # the same one, a frame further out
                        return None
            frame = sys._getframe(1)        # the hook runs in the raising frame's
            ours = frame.f_code is code and self._in_our_calls(frame)
            # (ours: remembered without args, so the frames it passes through on
            # its way out, a launcher's below ours, do not make it an instant)
            args = None if ours else {"message": bounded_text(str, exc),
                                      "where": self._where_offset(code, offset)}
            recent.insert(0, [id(exc), id(traceback), args])
            del recent[_RECENT:]
            return None if ours else (f"exception {_type_name(exc)}", args)
        for entry in recent:
            if entry[0] == id(exc) and entry[1] == id(traceback) and entry[2] is not None:
                if event == lib.PT_EXC_HANDLED:
                    if not _left_out(code):     # (else untraced code caught it)
                        entry[2]["caught_in"] = self._where_offset(code, offset)
                else:                                   # RERAISE: not kept after all
                    entry[2].pop("caught_in", None)
                break
        return None

    def _profiled(self, event, frame, builtin, thread, chained):
        """3.9-3.11: a frame left by an exception, or a built-in that raised."""
        unwinding = self._unwinding.get(thread) if chained else None
        caller = frame.f_back if event == lib.PT_EXC_UNWIND else frame
        reached = (self._where(caller.f_code, caller.f_lineno)
                   if caller is not None and not _left_out(caller.f_code) else None)
        if unwinding is not None and event == lib.PT_EXC_UNWIND:
            unwinding["frames_left"] += 1
            if reached is None:
                unwinding.pop("reached", None)
            else:
                unwinding["reached"] = reached
            return None
        args = {"where": self._where(frame.f_code, frame.f_lineno)}
        if event == lib.PT_EXC_C_RAISE:
            args["raised_by"] = bounded_text(_builtin_name, builtin)
            args["frames_left"] = 0
        else:
            args["frames_left"] = 1
        if reached is not None:
            args["reached"] = reached
        self._unwinding[thread] = args
        return "exception", args


def _left_out(code):
    """Whether code is left out of traces: pytrace_cffi's own (run's launcher,
    which catches the program's uncaught exception to report it as python does),
    or hidden (a launcher's). An exception caught or reached there went on into
    code not traced: no caught_in, no reached."""
    return _is_own_file(code.co_filename) or hiding(code) != 0


def _builtin_name(builtin):
    owner = getattr(builtin, "__self__", None)
    prefix = getattr(owner, "__name__", None) if owner is not None else None
    if not isinstance(prefix, str):
        prefix = type(owner).__name__ if owner is not None else "builtins"
    return f"{prefix}.{builtin.__name__}"
