"""pytrace_cffi's bootstrap for followed child processes (see follow/boot.py).

This directory is put first on PYTHONPATH, with PYTRACE_CFFI_FOLLOW, while a
process traces with follow_children: a Python child imports this module at
start-up. It first runs the sitecustomize it shadows (the next one on sys.path),
then starts tracing before __main__ runs. A failure prints one line to stderr and
the program runs untraced."""


def _pytrace_cffi_boot():
    import os
    import sys
    before = set(sys.modules)       # what the program sees (see _program_view.py)
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util
        path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            shadowed = set(sys.modules)
            spec.loader.exec_module(module)
            before |= set(sys.modules) - shadowed       # the shadowed one's imports
    except Exception as exc:        # noqa: BLE001 - as site.py would report it
        print(f"pytrace_cffi: error in the sitecustomize after ours: {exc!r}", file=sys.stderr)
    if not os.environ.get("PYTRACE_CFFI_FOLLOW"):
        return
    try:
        try:
            import pytrace_cffi.follow.boot as boot
        except ImportError:
            import json
            sys.path.append(json.loads(os.environ["PYTRACE_CFFI_FOLLOW"])["package"])
            import pytrace_cffi.follow.boot as boot
        from pytrace_cffi import _flight_recorder, start
        boot.start_from_environment(start, _flight_recorder)
        from pytrace_cffi._program_view import hide_imports_since
        hide_imports_since(before)
    except Exception as exc:        # noqa: BLE001 - never break the child
        print(f"pytrace_cffi: not tracing pid {os.getpid()} ({exc!r})", file=sys.stderr)


_pytrace_cffi_boot()
