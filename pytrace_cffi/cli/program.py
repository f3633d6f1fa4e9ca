"""The program `run` runs: its argv split off ours as python splits its own,
and its script or -m module found (and read) before tracing starts, so that
nothing of the launcher (runpy, its imports, exec) runs inside the trace."""
import builtins
import os
import re
import sys
import types

EXIT_CANNOT_OPEN = 2            # python's own, for a script it cannot open
EXIT_NO_MAIN = 1                # python's own, for a directory or zip without __main__


# The value of an option whose value may be left out (--flight-recorder [SIZE|SECONDS]):
# taken only when it looks like one, so `--flight-recorder prog.py` runs prog.py.
OPTIONAL_VALUE = re.compile(r"^[0-9]+(\.[0-9]*)?[kKmMgGsS]?$")


def split_run(parser, argv):
    """Splits run's argv as python splits its own: our options, then SCRIPT or
    -m MODULE (also -mMODULE); everything after those is the program's, options
    included. Returns (our options, module or None, program argv) where program
    argv starts with SCRIPT (for -m: with "-m", replaced once the module is found).
    Options that take a value are told apart from flags by the parser's own
    declarations, so a value is never taken for the script."""
    takes_value = {}
    for action in parser._actions:
        for option in action.option_strings:
            takes_value[option] = "?" if action.nargs == "?" else action.nargs != 0
    ours = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return ours, None, argv[i + 1:]
        if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            module = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else None)
            if not module:
                parser.error("argument -m: expected one argument")
            rest = argv[i + 1:] if arg[2:] else argv[i + 2:]
            return ours, module, ["-m"] + rest
        if not arg.startswith("-") or arg == "-":
            return ours, None, argv[i:]
        ours.append(arg)
        i += 1
        if "=" in arg and arg.startswith("--"):
            continue
        name = arg if arg.startswith("--") else arg[:2]
        if name not in takes_value and arg.startswith("--"):
            matches = [option for option in takes_value if option.startswith(arg)]
            name = matches[0] if len(matches) == 1 else name
        glued = not arg.startswith("--") and len(arg) > 2      # -oOUT
        optional = takes_value.get(name) == "?"
        if (takes_value.get(name) and not glued and i < len(argv)
                and not (optional and not OPTIONAL_VALUE.match(argv[i]))):
            ours.append(argv[i])
            i += 1
    return ours, None, []


def find_module(name):
    """(spec, code, packages) for python -m name, found as runpy finds them but
    without importing anything: the module's packages (and a package's own
    __init__ when name is a package, run as name.__main__) are listed so that
    they are imported inside the trace, as python -m imports them first."""
    from importlib import _bootstrap
    if not name or name.startswith("."):
        raise SystemExit(f"pytrace_cffi: relative module names not supported: {name!r}")
    parts = name.split(".")
    path, packages, spec = None, [], None
    for i in range(len(parts)):
        sub = ".".join(parts[:i + 1])
        loaded = sys.modules.get(sub)
        spec = getattr(loaded, "__spec__", None) or _bootstrap._find_spec(sub, path)
        if spec is None:
            raise SystemExit(f"pytrace_cffi: No module named {name!r}")
        if i < len(parts) - 1:
            locations = (getattr(loaded, "__path__", None) if loaded is not None
                         else spec.submodule_search_locations)
            if locations is None:
                raise SystemExit(f"pytrace_cffi: No module named {name!r} "
                                 f"({sub!r} is not a package)")
            path = locations
            packages.append(sub)
    if spec.submodule_search_locations is not None:
        if parts[-1] == "__main__":
            raise SystemExit(f"pytrace_cffi: cannot use package {name!r} as __main__")
        packages.append(name)
        spec = _bootstrap._find_spec(name + ".__main__", spec.submodule_search_locations)
        if spec is None:
            raise SystemExit(f"pytrace_cffi: No module named '{name}.__main__'; {name!r} "
                             f"is a package and cannot be directly executed")
    code = spec.loader.get_code(spec.name) if spec.loader is not None else None
    if code is None:
        raise SystemExit(f"pytrace_cffi: no code object available for {name!r}")
    return spec, code, packages


def main_module(module, program_argv):
    """The program, resolved before tracing starts so that nothing of the launcher
    (runpy, its imports of pkgutil and typing, exec) runs inside the trace:
    returns (module-level code, __main__ module, packages to import first), with
    sys.argv and sys.path[0] set as python sets them."""
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    if sys.version_info < (3, 14):  # python's __main__ has one (PEP 649 ended it)
        main.__annotations__ = {}
    if module is not None:
        sys.path[0] = os.getcwd()                 # python -m puts the cwd first
        try:
            spec, code, packages = find_module(module)
        except Exception:   # noqa: B902 - e.g. a namespace package inside one not imported
            import runpy    # finds it by importing its packages now, before the trace
            sys.argv = program_argv
            try:
                _, spec, code = runpy._get_module_details(module, runpy._Error)
            except runpy._Error as exc:
                raise SystemExit(f"pytrace_cffi: {exc}") from None
            packages = []
        sys.argv = [spec.origin] + program_argv[1:]
        main.__dict__.update(__file__=spec.origin, **_cached(spec.cached),
                             __loader__=spec.loader, __package__=spec.parent, __spec__=spec)
        return code, main, packages
    path = os.path.abspath(program_argv[0])
    found = main_of_path(path)
    if found is not None:           # a directory or zip file: its __main__, as python runs it
        spec, code = found
        sys.argv = program_argv
        sys.path[0] = path
        main.__dict__.update(__file__=spec.origin, **_cached(spec.cached),
                             __loader__=spec.loader, __package__="", __spec__=spec)
        return code, main, []
    import io
    from importlib.machinery import SourceFileLoader
    try:
        with io.open_code(path) as f:
            source = f.read()
    except OSError as exc:          # as python says it, with its exit code
        print(f"pytrace_cffi: can't open file {path!r}: [Errno {exc.errno}] {exc.strerror}",
              file=sys.stderr)
        raise SystemExit(EXIT_CANNOT_OPEN) from None
    code = compile(source, path, "exec", dont_inherit=True)
    sys.argv = program_argv
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    main.__dict__.update(__file__=path, **_cached(None),
                         __loader__=SourceFileLoader("__main__", path))
    return code, main, []


def _cached(cached, version_info=sys.version_info):
    """__main__'s __cached__ as python sets it: up to 3.14 (None for a script);
    3.15 sets none (a program reading it gets NameError under python too)."""
    return {"__cached__": cached} if tuple(version_info[:2]) < (3, 15) else {}


def main_of_path(path):
    """(spec, code) of the __main__ module python runs for path when an importer
    takes it (a directory, a zip file: `python DIR`); None for a script. A path
    taken without one exits as python does."""
    from importlib.machinery import PathFinder
    for hook in sys.path_hooks:
        try:
            hook(path)
            break
        except ImportError:
            continue
    else:
        return None
    spec = PathFinder.find_spec("__main__", [path])
    code = spec.loader.get_code("__main__") if spec is not None and spec.loader else None
    if code is None:
        print(f"pytrace_cffi: can't find '__main__' module in {path!r}", file=sys.stderr)
        raise SystemExit(EXIT_NO_MAIN)
    return spec, code


def with_runpy_frames(tb):
    """tb (a traceback starting at the program's module code) as python prints it
    for a module run by runpy (-m MODULE, a directory, a zip file): below it,
    runpy's _run_module_as_main at its call of _run_code, and _run_code at its
    exec, with runpy's file and lines. Frames of ours stand in for runpy's (a
    traceback shows a frame's file and function, and the line it is given);
    tb itself when runpy is not as expected."""
    try:
        import runpy
        outer, inner = runpy._run_module_as_main.__code__, runpy._run_code.__code__
        tb = types.TracebackType(tb, _frame_named(inner), -1, _line_of_call(inner, "exec"))
        return types.TracebackType(tb, _frame_named(outer), -1,
                                   _line_of_call(outer, "_run_code"))
    except Exception:       # noqa: BLE001 - the traceback goes on without them
        return tb


def _frame_named(code):
    """A finished frame whose code has code's file and names."""
    names = {"co_filename": code.co_filename, "co_name": code.co_name}
    if hasattr(code, "co_qualname"):
        names["co_qualname"] = code.co_qualname
    probe = (lambda: sys._getframe()).__code__.replace(**names)
    return types.FunctionType(probe, {"sys": sys})()


def _line_of_call(code, name):
    """The line of code where it loads the global name it calls."""
    import dis
    starts = sorted((offset, line) for offset, line in dis.findlinestarts(code)
                    if line is not None)
    for instruction in dis.get_instructions(code):
        if instruction.argval == name and instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            return [line for offset, line in starts if offset <= instruction.offset][-1]
    raise LookupError(name)
