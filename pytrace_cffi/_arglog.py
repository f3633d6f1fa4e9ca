"""log_args: the arguments and return values of chosen functions, as safe
summaries kept as their calls' args (c_src/pt_logargs.c calls these from the
hook, only for calls of matching code: the match is asked once per code object).

A glob matches a function when it matches (fnmatch, case-sensitive) its
qualified name (co_qualname on 3.11+: "Model.forward", "outer.<locals>.inner";
3.9-3.10 code objects carry only the bare name, "forward") or the full path of
its source file (as --include matches it). '*forward' matches on every version.

A summary never runs the object's own code unless asked: None, bools, ints of
at most 2**53, finite floats and str of at most 64 characters are kept as they
are; anything else is {"type": its type's name}, with "len" for the exact
built-in containers (list, tuple, dict, set, frozenset, str, bytes: their len()
runs no user code), "shape" and "dtype" (and a torch tensor's "device") for
torch tensors and numpy arrays, told by their type's module and attributes
(torch is never imported here); with log_args_repr, "repr": repr() at most 200
characters (reprlib's limits on built-in containers), and what went wrong
instead when it raised or recursed. A call's args: one entry per parameter
(*args and **kwargs as their tuple and dict); at its return "return": the value
returned (or yielded, for a generator's slice), or "raise": the exception's type
when one left the frame ("exception" on 3.9-3.11, where the profile hook does
not see it). A generator resumed records only what it hands back.
"""
import builtins
import fnmatch
import inspect
import math
import os
import reprlib
import sys

from ._exceptions import bounded_text

STR_CHARS = 64
REPR_CHARS = 200
_INT_LIMIT = 1 << 53
_SIZED = (list, tuple, dict, set, frozenset, str, bytes)
_ARRAY_MODULES = ("torch", "numpy")
_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def make_matcher(globs):
    """match(code) for log_args' globs (see the module's docstring)."""
    globs = list(globs)

    def match(code):
        name = getattr(code, "co_qualname", code.co_name)
        filename = code.co_filename
        if not filename.startswith("<") and not os.path.isabs(filename):
            filename = os.path.abspath(filename)
        return any(fnmatch.fnmatchcase(name, glob) or fnmatch.fnmatchcase(filename, glob)
                   for glob in globs)
    return match


def type_name(kind):
    try:
        module, name = kind.__module__, kind.__qualname__
        if not isinstance(module, str) or not isinstance(name, str):
            raise TypeError
    except Exception:
        return "?"
    return name if module == "builtins" else f"{module}.{name}"


class _BoundedRepr(reprlib.Repr):
    """reprlib's limits on built-in containers; an object's own repr() as it is
    (bounded_text cuts it), its failure not hidden as reprlib hides it."""

    def repr_instance(self, x, level):
        return builtins.repr(x)


class ArgLog:
    """on_call and on_return for pt_set_arg_logging."""

    def __init__(self, with_repr=False):
        self.with_repr = with_repr
        self._repr = _BoundedRepr()
        self._repr.maxstring = self._repr.maxother = REPR_CHARS
        self._first_resume = {}         # code -> offset of its first RESUME (3.11)

    def summary(self, value):
        kind = type(value)
        if value is None or kind is bool:
            return value
        if kind is int and -_INT_LIMIT <= value <= _INT_LIMIT:
            return value
        if kind is float and math.isfinite(value):
            return value
        if kind is str and len(value) <= STR_CHARS:
            return value
        out = {"type": type_name(kind)}
        if kind in _SIZED:
            out["len"] = len(value)
        else:
            self._array_facts(value, kind, out)
        if self.with_repr:
            out["repr"] = bounded_text(self._repr.repr, value, REPR_CHARS)
        return out

    @staticmethod
    def _array_facts(value, kind, out):
        """shape and dtype of a torch tensor or numpy array (duck-typed: the
        type's module, then the attributes, each guarded)."""
        module = getattr(kind, "__module__", None)
        if not isinstance(module, str) or module.partition(".")[0] not in _ARRAY_MODULES:
            return
        try:
            shape = value.shape
            out["shape"] = [size if type(size) is int else str(size) for size in shape]
        except Exception:
            return
        for name in ("dtype", "device") if module.startswith("torch") else ("dtype",):
            try:
                out[name] = bounded_text(str, getattr(value, name), 64)
            except Exception:
                pass

    def on_call(self, frame, first_entry):
        code = frame.f_code
        if first_entry < 0:
            first_entry = self._is_first_entry(frame, code)
        if not first_entry:
            return {}
        n = code.co_argcount + code.co_kwonlyargcount
        n += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
        args = {}
        if n:
            local = frame.f_locals
            for name in code.co_varnames[:n]:
                try:
                    value = local[name]
                except KeyError:        # (deleted before the call was seen: none yet)
                    continue
                args[name] = self.summary(value)
        return args

    def on_return(self, args, value, raised):
        if raised:
            args["raise"] = (type_name(type(value)) if isinstance(value, BaseException)
                             else "exception")
        else:
            args["return"] = self.summary(value)

    def _is_first_entry(self, frame, code):
        """3.9-3.11: whether the profile hook's call event starts the frame (a
        generator's or coroutine's resumption does not)."""
        if not code.co_flags & _SUSPENDABLE:
            return True
        if sys.version_info < (3, 11):
            return frame.f_lasti < 0
        first = self._first_resume.get(code)
        if first is None:
            import dis
            resume, raw = dis.opmap["RESUME"], code.co_code
            first = self._first_resume[code] = next(
                (at for at in range(0, len(raw), 2) if raw[at] == resume), 0)
        return frame.f_lasti <= first
