"""How functions are named: shared by the tracer and the reference tracer, so the
two agree by construction and tests compare like with like."""
import os
import site
import sys
import types


def path_inputs():
    """What path_prefixes depends on that a program may change: sys.path and
    where torch was imported from. A snapshot, cheap to take at stop()."""
    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None)
    return tuple(sys.path), torch_file if isinstance(torch_file, str) else None


def path_prefixes(inputs=None):
    """The directory prefixes stripped from file names, exactly as torch's
    profiler chooses them (torch.profiler.python_tracer._prefix_regex): site
    packages, sys.path, the user base and user site, and the directory holding
    the torch package when torch is imported; reverse-sorted, so a longer path
    comes before its parent. torch itself is never imported here. inputs: a
    path_inputs() snapshot taken earlier (default: now)."""
    search_path, torch_file = inputs or path_inputs()
    raw = []
    for getter in ("getsitepackages", "getuserbase", "getusersitepackages"):
        try:
            found = getattr(site, getter)()
        except Exception:            # site can be stubbed in restricted interpreters
            continue
        raw.extend(found if isinstance(found, list) else [found])
    raw.extend(search_path)
    if torch_file is not None:
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


def _is_bound_method(function, self):
    """Whether function, a built-in bound to self, is an ordinary bound method: the
    method descriptor type(self) holds under function's name (first found along
    the MRO, in the classes' own dictionaries, so no user code runs), bound to
    self, is equal to it (same self, same C function)."""
    name = function.__name__
    try:
        for klass in type(self).__mro__:
            namespace = klass.__dict__
            if name in namespace:
                attr = namespace[name]
                return (type(attr) is types.MethodDescriptorType
                        and attr.__get__(self, type(self)) == function)
    except Exception:            # as the C core: a failing check means "ordinary"
        return True
    return False


def builtin_owner(function):
    """What a built-in is named after. The C core (pt_key_for_builtin_slow) keys
    and names built-ins by this same rule:

    - self is None or a module: the module (``builtins.len``, ``time.sleep``);
      the core keys the function object itself, so several functions of one
      module sharing one C function keep their own names;
    - self is a type (a classmethod): that type (``dict.fromkeys``);
    - self is an ordinary object and the function is an ordinary bound method of
      its type (see _is_bound_method): the class of type(self)'s MRO that defines
      it as a built-in method (``list.append``, also for a list subclass's, as
      cProfile names it; ``_io.TextIOWrapper.write``), else type(self);
    - otherwise self is a "function record" (pybind11 binds each of its functions,
      which all share one C dispatcher, to its own record or capsule; closures
      bound to arbitrary objects): the str ``function.__module__``, so the name
      is ``torch._C._get_tracing_state``; when __module__ is not a str, type(self)
      as above. The core keys these calls by self.
    """
    owner = getattr(function, "__self__", None)
    if owner is None or isinstance(owner, (types.ModuleType, type)):
        return owner
    if not _is_bound_method(function, owner):
        module = getattr(function, "__module__", None)
        if isinstance(module, str):
            return module
    return defining_class(type(owner), function.__name__)


_BUILTIN_METHODS = (types.MethodDescriptorType, types.WrapperDescriptorType)


def defining_class(cls, name):
    """The first class of cls's MRO whose own __dict__ holds name, when it holds
    it as a built-in method there and is no private class (its module or name
    has a part starting with "_": torch.Tensor.sum, not torch._C.TensorBase.sum);
    else cls (as pt_keys.c's pt_defining_class)."""
    for base in cls.__mro__:
        entry = vars(base).get(name)
        if entry is not None:
            return base if isinstance(entry, _BUILTIN_METHODS) and not _private(base) else cls
    return cls


def _private(cls):
    return any(isinstance(text, str) and (text.startswith("_") or "._" in text)
               for text in (getattr(cls, "__module__", None), getattr(cls, "__qualname__", None)))


def builtin_name(owner, name):
    """A stable qualified name without addresses: builtins.len, list.append,
    time.sleep, _io.TextIOWrapper.write, torch._C._get_tracing_state (a str
    owner is a module name, see builtin_owner)."""
    if owner is None:
        return name
    if isinstance(owner, str):
        return f"{owner}.{name}"
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


def distinct_code_names(sources, names):
    """names, with the keys of different code objects that share a file, line and
    name told apart (a decorator that copies its function's name, file and line
    onto a wrapper's code, as hypothesis's @given does). Keys whose code objects
    are equal (==: same bytecode, constants, name, line) stay one function. Of
    the others, each kind of code gets " [qualified name]" when its co_qualname
    (Python 3.11+) differs from its co_name, then " #2", " #3"... in the order
    of first call when names still collide. Without this they would be summed
    as one function (cProfile keeps only one of them: it drops the rest's calls).
    Needs every key at once: a spilling session's keys.jsonl (read only to
    recover a process that died) names its keys without it."""
    by_name = {}
    for key, source in enumerate(sources):
        if isinstance(source, types.CodeType):
            by_name.setdefault(names[key], []).append(key)
    names = list(names)
    for name, keys in by_name.items():
        if len(keys) < 2:
            continue
        kinds = {}                      # a code object -> the keys equal to it
        for key in keys:
            kinds.setdefault(sources[key], []).append(key)
        if len(kinds) < 2:
            continue
        taken = {}
        for code, members in kinds.items():     # in the order of first call
            qualname = getattr(code, "co_qualname", code.co_name)
            shown = name if qualname == code.co_name else f"{name} [{qualname}]"
            taken[shown] = taken.get(shown, 0) + 1
            if taken[shown] > 1:
                shown = f"{shown} #{taken[shown]}"
            for key in members:
                names[key] = shown
    return names


def kind_of_source(source):
    """A key's kind: "c" (a built-in), "annotation" (a region's name) or "python"."""
    if isinstance(source, tuple):
        return "c"
    return "annotation" if isinstance(source, str) else "python"


# Launchers better known by the command that runs them than by their module.
LAUNCHER_NAMES = {"torch.distributed.run": "torchrun"}
_PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def program_name():
    """What this process runs, named as its user would name it: a `python -m`
    module by its name (``flake8`` for flake8/__main__.py; ``torchrun`` for
    torch.distributed.run), a script by its file name, ``python -c`` and
    ``python -`` as such."""
    module = _main_module_name()
    if module:
        return LAUNCHER_NAMES.get(module, module)
    program = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    if program in ("-c", "-", "-m"):
        return "python " + program
    return os.path.basename(program)


def _main_module_name():
    """The module `python -m` runs as __main__ (a package's name for its
    __main__), or None for a script. Before runpy has set __main__ up (a child's
    bootstrap, at start), read from sys.orig_argv where there is one (3.10+)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if name == "__main__":
        return None             # `python DIR` or `python APP.zip`: named by its path
    if isinstance(name, str) and name:
        return name[:-len(".__main__")] if name.endswith(".__main__") else name
    if not (sys.argv and sys.argv[0] == "-m"):
        return None
    args = list(getattr(sys, "orig_argv", ()))[1:]
    while args:
        arg = args.pop(0)
        if arg == "-m":
            return args[0] if args else None
        if arg.startswith("-m") and not arg.startswith("--"):
            return arg[2:]
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            args = args[1:]
        elif not arg.startswith("-") or arg in ("-c", "-"):
            return None
    return None
