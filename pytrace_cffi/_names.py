"""How functions are named: shared by the tracer and the reference tracer, so the
two agree by construction and tests compare like with like."""
import os
import site
import sys
import types


def path_prefixes():
    """The directory prefixes stripped from file names, exactly as torch's
    profiler chooses them (torch.profiler.python_tracer._prefix_regex): site
    packages, sys.path, the user base and user site, and the directory holding
    the torch package when torch is imported; reverse-sorted, so a longer path
    comes before its parent. torch itself is never imported here."""
    raw = []
    for getter in ("getsitepackages", "getuserbase", "getusersitepackages"):
        try:
            found = getattr(site, getter)()
        except Exception:            # site can be stubbed in restricted interpreters
            continue
        raw.extend(found if isinstance(found, list) else [found])
    raw.extend(sys.path)
    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None)
    if isinstance(torch_file, str):
        raw.append(os.path.dirname(os.path.dirname(torch_file)))
    prefixes = sorted({os.path.abspath(p) for p in raw if isinstance(p, str)}, reverse=True)
    return tuple(p + os.sep for p in prefixes)


def trim_path(filename, prefixes):
    """filename without the first prefix it starts with."""
    for prefix in prefixes:
        if filename.startswith(prefix):
            return filename[len(prefix):]
    return filename


def python_function_name(code, prefixes=()):
    """The torch profiler's form, with the code's first line as cProfile uses."""
    return f"{trim_path(code.co_filename, prefixes)}({code.co_firstlineno}): {code.co_name}"


def builtin_owner(function):
    """What a built-in is named after: its module, its type, or its self's type."""
    owner = getattr(function, "__self__", None)
    if owner is None or isinstance(owner, (types.ModuleType, type)):
        return owner
    return type(owner)


def builtin_name(owner, name):
    """A stable qualified name without addresses: builtins.len, list.append,
    time.sleep, _io.TextIOWrapper.write."""
    if owner is None:
        return name
    if isinstance(owner, types.ModuleType):
        return f"{owner.__name__}.{name}"
    module = getattr(owner, "__module__", None)
    qualname = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", "?")
    if module in (None, "builtins"):
        return f"{qualname}.{name}"
    return f"{module}.{qualname}.{name}"


def builtin_function_name(function):
    """The name of a built-in function object as sys.setprofile passes it."""
    return builtin_name(builtin_owner(function), function.__name__)


def name_for_source(source, prefixes=()):
    """Names a key from what the C core holds for it: a code object, an
    (owner, name, keepalive) tuple for a built-in, or a record_function's name."""
    if source is None:
        return "<unknown>"
    if isinstance(source, str):
        return source
    if isinstance(source, tuple):
        return builtin_name(source[0], source[1])
    return python_function_name(source, prefixes)
