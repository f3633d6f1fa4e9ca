"""The children a followed process launches: noted as they start.

A Python child that will be followed goes to DIR/launched.jsonl (with its pid
when known), one that will not to DIR/unfollowed.jsonl with the reason (see
jobs.unfollowed). subprocess, os.posix_spawn and os.exec are seen by the audit
hook (exits.py); multiprocessing's "spawn" raises no audit event, so its
util.spawnv_passfds is wrapped once multiprocessing.util is imported.
"""
import json
import os
import sys
# (at import: imported later, while the program runs, it would show in its sys.modules)
from importlib.machinery import PathFinder

from .. import _running
from .._hiding import hide_alone
from .identity import BOOT_DIR, ENV, LAUNCHED_FILE, NOT_PYTHON, UNFOLLOWED_FILE, following

_UNTRACED_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.semaphore_tracker",
                     "pytrace_cffi")


def _untraced_helper(command):
    """Whether a command line (a string) is one of multiprocessing's helpers, or
    pytrace_cffi itself, which the bootstrap leaves untraced (the forkserver is
    armed instead: the children it forks are traced)."""
    return ("from multiprocessing.forkserver import main" in command
            or any(f"-m {name}" in command or f"from {name} import" in command
                   for name in _UNTRACED_HELPERS))



def _note_launch(job_dir, how, executable, argv, env, pid, name=None):
    """Notes a program this process launches (or execs): a Python child that will
    be followed goes to launched.jsonl (with its pid when known), for
    unfollowed() to find those that left no trace; one that will not, to
    unfollowed.jsonl with the reason; a program that does not exist, nowhere (no
    process starts)."""
    command = [os.fsdecode(a) for a in argv or ()]
    if not command:
        return
    program = os.fsdecode(executable) if executable else command[0]
    if _resolve(program) is None:
        return
    reason = _unfollowable(executable, argv, env)
    if reason:
        _note_unfollowed(job_dir, {"pid": os.getpid(), "command": command, "how": how,
                                   "reason": reason})
    elif not _untraced_helper(" ".join(command)):
        _append_json(os.path.join(job_dir, LAUNCHED_FILE), dict(
            {"pid": os.getpid(), "command": command, "how": how, "child_pid": pid},
            **({"name": name} if name else {})))


# multiprocessing "spawn" starts its children through util.spawnv_passfds, which
# raises no audit event: it is wrapped, once multiprocessing.util is imported, so
# that the child's pid and command are noted (_note_launch) as it starts.
_real_spawnv_passfds = None


def _spawnv_passfds(path, args, passfds):
    # Left out of traces alone (trace.hide_alone): the program's call of
    # spawnv_passfds is recorded as if it were not wrapped.
    pid = _real_spawnv_passfds(path, args, passfds)
    _noted_spawn(path, args, pid)
    return pid


def _noted_spawn(path, args, pid):
    try:
        session = _running.session
        if following(session):
            _note_launch(session.job_dir, "spawn", path, args, None, pid,
                         name=_launching_process_name())
    except Exception:            # noqa: BLE001 - never fail the program's launch
        pass


def _launching_process_name():
    """The name of the multiprocessing Process being launched (from the frame of
    its Popen's _launch), or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_launch":
            name = getattr(frame.f_locals.get("process_obj"), "name", None)
            return name if isinstance(name, str) else None
        frame = frame.f_back
    return None


def _wrap_spawnv(util):
    global _real_spawnv_passfds
    real = getattr(util, "spawnv_passfds", None)
    if real is None or real is _spawnv_passfds:
        return
    _real_spawnv_passfds = real
    util.spawnv_passfds = _spawnv_passfds


class _UtilLoader:
    """The loader of multiprocessing.util while it is imported: runs the real
    one, then wraps spawnv_passfds. The module keeps the real loader."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # Left out of traces alone: the module's code is recorded as without it.
        module.__loader__ = self.loader
        module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _wrap_spawnv(module)


class _UtilFinder:
    """On sys.meta_path, just before PathFinder (so the import machinery calls
    the finders it calls without it), while this process follows its children:
    finds multiprocessing.util through PathFinder, with _UtilLoader."""

    def find_spec(self, name, path=None, target=None):
        # Left out of traces alone: for other modules it calls nothing.
        if name != "multiprocessing.util":
            return None
        spec = _next_finder(self).find_spec(name, path, target)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _UtilLoader(spec.loader)
        return spec


def _next_finder(finder):
    try:
        following = sys.meta_path[sys.meta_path.index(finder) + 1:]
    except ValueError:
        following = []
    return next((f for f in following if f is PathFinder), PathFinder)


_util_finder = _UtilFinder()
hide_alone(_spawnv_passfds.__code__)
hide_alone(_UtilLoader.exec_module.__code__)
hide_alone(_UtilFinder.find_spec.__code__)


def _watch_spawn():
    """Arranges for multiprocessing's spawned children to be noted (see above)."""
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        _wrap_spawnv(util)
        return
    if _util_finder in sys.meta_path:
        return
    position = next((i for i, f in enumerate(sys.meta_path) if f is PathFinder),
                    len(sys.meta_path))
    sys.meta_path.insert(position, _util_finder)


def _append_json(path, record):
    """Appends record as one JSON line (one write: lines of several processes do
    not interleave). Never raises."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))
        finally:
            os.close(fd)
    except OSError:
        pass


def _note_unfollowed(job_dir, record):
    """Appends a child that is not traced to DIR/unfollowed.jsonl. Never raises."""
    _append_json(os.path.join(job_dir, UNFOLLOWED_FILE), record)


def _unfollowable(executable, argv, env):
    """Why a launched program will not be traced, or None if it should be."""
    argv = [os.fsdecode(a) for a in argv or ()]
    if not argv:
        return None
    program = os.fsdecode(executable) if executable else argv[0]
    if not _is_python(program):
        return NOT_PYTHON
    flags = [a for a in argv[1:] if a.startswith("-") and not a.startswith("--")]
    for flag in flags:
        if flag in ("-c", "-m") or flag.startswith(("-W", "-X", "-c", "-m")):
            break                      # their values are no interpreter options
        if set(flag[1:]) & set("ISE"):
            return f"started with {flag} (no site / PYTHONPATH: the bootstrap cannot load)"
    if env is not None:
        get = env.get if hasattr(env, "get") else dict(env).get
        text = isinstance(next(iter(env), ""), str)
        value = get(ENV) if text else get(ENV.encode())
        if not value:
            return "its environment was replaced without PYTRACE_CFFI_FOLLOW"
        paths = get("PYTHONPATH") if text else get(b"PYTHONPATH")
        paths = os.fsdecode(paths or "").split(os.pathsep)
        if BOOT_DIR not in paths:       # (torch.compile's subprocesses set their own)
            return ("its environment's PYTHONPATH lacks pytrace_cffi's bootstrap directory "
                    "(the bootstrap cannot load)")
    return None


def _resolve(program):
    """The file a launch of program runs (searched on PATH when it has no
    directory), or None when there is none: then no process starts."""
    import shutil
    if os.sep in program:
        return program if os.path.isfile(program) else None
    return shutil.which(program) or (program if os.path.isfile(program) else None)


def _is_python(program):
    """Whether program is a Python interpreter (by its name, or sys.executable), a
    script run by one (#! naming python), or a launcher named python* (pyenv's
    shims are shell scripts that exec Python)."""
    path = _resolve(program) or program
    if os.path.basename(program).startswith("python") or (
            os.path.realpath(path) == os.path.realpath(sys.executable)):
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first

