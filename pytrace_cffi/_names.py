"""How functions are named: shared by the tracer and the reference tracer, so the
two agree by construction and tests compare like with like."""
import types


def python_function_name(code):
    """The torch profiler's form, with the code's first line as cProfile uses."""
    return f"{code.co_filename}({code.co_firstlineno}): {code.co_name}"


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


def name_for_source(source):
    """Names a key from what the C core holds for it: a code object, or an
    (owner, name, keepalive) tuple for a built-in."""
    if source is None:
        return "<unknown>"
    if isinstance(source, tuple):
        return builtin_name(source[0], source[1])
    return python_function_name(source)
