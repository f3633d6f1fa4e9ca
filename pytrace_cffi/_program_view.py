"""What `run`'s program sees of sys.modules: python's own list, not ours.

Just before the program's code runs, the modules imported after start-up (by
our launcher and by us) leave sys.modules, so that the program imports them
itself, as under python (with the calls of those imports in its trace, and
with code that looks at what is loaded behaving as it would).

A module of pure Python (argparse, json, ...) is simply dropped: the program's
`import json` runs json afresh; our code keeps the copy it holds. Our own
modules, and those that must stay one object (extension and built-in modules,
threading: the interpreter joins threads at exit through the one in
sys.modules, and our hook on new threads lives in it), are kept aside and given
back as they are when they are imported again, by the program or by us
(docs/CLI.md#what-the-program-sees).
"""
import sys

_bootstrap = sys.modules["_frozen_importlib"]
_external = sys.modules["_frozen_importlib_external"]
_PYTHON_LOADERS = (_external.SourceFileLoader, _external.SourcelessFileLoader)
_ONE_OBJECT = ("threading",)
# Never hidden: warnings.catch_warnings (ours at the end, the stdlib's anywhere)
# reads sys.modules["warnings"], and our hook of _showwarnmsg lives in it. Python
# 3.9 and 3.12+ import it only when first needed (docs/CLI.md says so). 3.14's
# warnings is _py_warnings' code, which stays with it, and so do the modules
# these hold (_py_warnings imports _contextvars): see _staying.
_STAYS = ("warnings", "_py_warnings")

_kept_aside = {}        # name -> module, given back by _GiveBack on its next import
_dropped = []           # the dropped modules stay alive for the code that holds them
_specs = {}             # name -> the spec of a module given back


def _startup_end(names):
    """How many of names (sys.modules in the order its imports completed) were
    there when the interpreter had started: up to site's (which completes last
    of its imports, sitecustomize's and .pth files' included), or __main__'s
    without site (python -S: site may come later, imported by us)."""
    mark = "__main__" if sys.flags.no_site else "site"
    return names.index(mark) + 1 if mark in names else 0


def hide_from_program(through_runpy):
    """Takes out of sys.modules what python would not have before the program's
    first line. through_runpy: python itself would run the program through runpy
    (-m MODULE, a directory or zip file), which then stays if our launcher
    (python -m pytrace_cffi) loaded it."""
    names = list(sys.modules)
    start = _startup_end(names)
    keep = set(names[:start]) | _staying()
    if through_runpy and "runpy" in names[start:]:
        launcher_end = names.index("runpy") + 1
        if "pytrace_cffi" not in names[start:launcher_end]:     # runpy ran us
            keep.update(names[start:launcher_end])
    _hide(names[start:], keep)


def hide_imports_since(before):
    """A followed child's bootstrap (_boot/sitecustomize.py): what it imported
    leaves sys.modules as in hide_from_program; before: the names there already
    (python's start-up, and the sitecustomize ours shadows)."""
    names = list(sys.modules)
    keep = set(before) | _staying() | {"sitecustomize"}
    _hide([name for name in names if name not in keep], keep)


def _staying():
    """The _STAYS modules loaded, and the modules they hold as globals (under
    their own name in sys.modules): python's import of them brings those too."""
    stay = set(_STAYS)
    for name in _STAYS:
        module = sys.modules.get(name)
        for value in list(vars(module).values()) if module is not None else ():
            if isinstance(value, type(sys)) and sys.modules.get(value.__name__) is value:
                stay.add(value.__name__)
    return stay


def _hide(names, keep):
    for name in names:
        if name in keep or name not in sys.modules:
            continue
        module = sys.modules.pop(name)
        spec = getattr(module, "__spec__", None)
        if _of_python(getattr(spec, "loader", None)) and not (
                name in _ONE_OBJECT or name.partition(".")[0] == "pytrace_cffi"):
            _dropped.append(module)
        else:
            _kept_aside[name] = module
            _specs[name] = spec
        parent, _, child = name.rpartition(".")
        if parent in keep and getattr(sys.modules.get(parent), child, None) is module:
            delattr(sys.modules[parent], child)     # as the program's import finds it
    if _kept_aside and _give_back not in sys.meta_path:
        sys.meta_path.insert(0, _give_back)


def _of_python(loader):
    """Whether a module's loader ran Python code for it (a frozen module's loader
    is the FrozenImporter class itself, not an instance of it)."""
    return loader is _bootstrap.FrozenImporter or isinstance(loader, _PYTHON_LOADERS)


class _GiveBack:
    """First on sys.meta_path: a module kept aside is imported as the very module
    it was (create_module gives it; nothing runs again)."""

    def find_spec(self, name, path=None, target=None):
        if name not in _kept_aside:
            return None
        return _bootstrap.ModuleSpec(name, self)

    def create_module(self, spec):
        # Its submodules come back with it, straight into sys.modules: imported one
        # by one, each would be set on the package, over a name the package
        # defines itself (pytrace_cffi._stopped, the module, over _stopped, the
        # function).
        # Another thread may give back modules meanwhile (an import of its own):
        # the names are listed at once (list() of a dict holds the GIL) and each
        # taken once, by whichever thread comes first.
        # Re-entered when our hook runs Python code in between (a --spill of the
        # trace at an event here imports what it needs): over a copy, and what a
        # nested call gave back already is taken from sys.modules.
        prefix = spec.name + "."
        for name in [name for name in list(_kept_aside) if name.startswith(prefix)]:
            module = _kept_aside.pop(name, None)
            if module is not None:
                sys.modules[name] = module
            _specs.pop(name, None)
        module = _kept_aside.pop(spec.name, None)
        if module is None:      # given back by its package's import in another thread,
            return sys.modules.get(spec.name)       # or by a nested call, into sys.modules
        # and the modules it holds that its import brought, under every name
        # they were imported as (3.15's math holds math.integer, which is in
        # sys.modules as _math_integer too), as its import left them
        held = {id(value) for value in list(vars(module).values())
                if isinstance(value, type(sys))}
        for name in [name for name in list(_kept_aside) if id(_kept_aside.get(name)) in held]:
            given = _kept_aside.pop(name, None)
            if given is not None:
                sys.modules[name] = given
            _specs.pop(name, None)
        return module

    def exec_module(self, module):
        spec = _specs.pop(getattr(module, "__name__", None), None)
        if spec is not None:        # (the import set our spec on it)
            module.__spec__ = spec


_give_back = _GiveBack()
