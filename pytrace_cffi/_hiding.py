"""Which frames traces leave out, and how: our own code (this package, any of
its subpackages: start()'s machinery, a child's bootstrap, an export made while
tracing), the record_function wrapper, a launcher's frames seeded at start, and
FastRegion's carriers. The recorder reads these rules at start (frames it does
not seed or count) and a stopped session's keys at stop (record side: nothing
here imports the trace model)."""
import os

from ._core import lib
from ._torch import is_fast_region_code
from .annotations import WRAPPER_CODE

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_PREFIX = _PACKAGE_DIR + os.sep


# id -> (code object (kept alive, so its id stays its own), how its seeded frames hide)
_launcher_codes = {}


def hide_launcher_frames(codes, with_callees=False):
    """Frames of these code objects that are already running when tracing starts
    are left out of traces, alone (what they call is kept), or with_callees with
    what they call until they return; calls of the same code made during the
    trace are kept. The command line names the frames below the program it runs
    (runpy's, under `python -m pytrace_cffi`); a followed child's bootstrap the
    interpreter's start-up it runs in (site's, importlib's: with_callees)."""
    hide = lib.PT_HIDE_STARTUP if with_callees else lib.PT_HIDE_SEEDED
    _launcher_codes.clear()
    _launcher_codes.update((id(code), (code, hide)) for code in codes)


def launcher_frames():
    """The launcher frames hide_launcher_frames set, to put back with
    restore_launcher_frames (the Jupyter magic hides IPython's for one cell)."""
    return dict(_launcher_codes)


def restore_launcher_frames(saved):
    _launcher_codes.clear()
    _launcher_codes.update(saved)


def forget_startup_frames():
    """Drops hide_launcher_frames' with_callees codes: the start-up they name ran
    under one trace, this process's first (importlib's code runs again in the
    program's imports: a frame of it seeded later, in a fork made inside an
    import or a trace started there, is the program's)."""
    for key, (_, hide) in list(_launcher_codes.items()):
        if hide == lib.PT_HIDE_STARTUP:
            del _launcher_codes[key]


def codes_below(frame):
    """The code of frame and of each frame below it (its caller's, ...)."""
    codes = []
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    return codes


_hidden_alone = {}       # see hide_alone: id -> code (kept alive: its id stays its own)
_hidden_with_callees = {}   # see hide_with_callees: the same


def hide_alone(code):
    """Calls of code (a wrapper of ours around the program's own calls, see
    processes._spawnv_passfds) are left out of traces alone: its callees stay."""
    _hidden_alone[id(code)] = code


def hide_with_callees(code):
    """Calls of code (not ours: the interpreter's exit bookkeeping that `run`
    finds had nothing of the program's to do) are left out of traces with what
    they call."""
    _hidden_with_callees[id(code)] = code


def hiding_rules():
    """A snapshot of the rules hiding() reads that the program may change after
    stop() (which launcher frames, which wrappers): the trace keeps stop()'s."""
    return dict(_launcher_codes), dict(_hidden_alone), dict(_hidden_with_callees)


def hiding(source, rules=None):
    """Our own start/stop machinery is left out of traces with what it calls; the
    record_function decorator's wrapper is left out alone; a launcher's frames
    (see hide_launcher_frames) are left out when seeded; FastRegion's __enter__ and
    __exit__ are left out alone once their regions exist. rules: a hiding_rules()
    snapshot (default: the rules now)."""
    launcher_codes, hidden_alone, with_callees = rules or (_launcher_codes, _hidden_alone,
                                                           _hidden_with_callees)
    if source is WRAPPER_CODE:
        return lib.PT_HIDE_ALONE
    if is_fast_region_code(source):
        return lib.PT_HIDE_CARRIER      # their regions replace them
    filename = getattr(source, "co_filename", None)
    if filename is not None and _is_own_file(filename):
        # ours, with what it calls; our wrappers of the program's calls alone (hide_alone)
        alone = hidden_alone.get(id(source)) is source
        return lib.PT_HIDE_ALONE if alone else lib.PT_HIDE_SUBTREE
    if with_callees.get(id(source)) is source:
        return lib.PT_HIDE_SUBTREE
    code, hide = launcher_codes.get(id(source), (None, 0))
    return hide if code is source else 0


def key_hiding(source, key_flags, rules=None):
    """How traces hide a key: hiding(source), and what the recorder's key flags add
    (pt_key_flags). Code the include/exclude filters left out (PT_KEY_SKIPPED) is
    recorded only as frames seeded at start, never its calls or returns: such a
    frame is left out alone, even a start-up frame that would hide what it runs
    until it returns (no return of it ends that). A FastRegion carrier named by
    the watcher (PT_KEY_NAMED) is left out once its region exists."""
    hide = hiding(source, rules)
    if key_flags & lib.PT_KEY_SKIPPED and hide in (0, lib.PT_HIDE_STARTUP):
        return lib.PT_HIDE_ALONE
    if not hide and key_flags & lib.PT_KEY_NAMED:
        return lib.PT_HIDE_CARRIER
    return hide


_own_files = {}          # absolute co_filename -> whether it is one of ours


def _is_own_file(filename):
    """Whether code of this file is pytrace_cffi's own (start() asks for each of
    its frames: remembered per file; a relative name depends on the cwd)."""
    own = _own_files.get(filename)
    if own is None:
        directory = os.path.dirname(os.path.abspath(filename))
        own = directory == _PACKAGE_DIR or directory.startswith(_PACKAGE_PREFIX)
        if os.path.isabs(filename) and len(_own_files) < 4096:
            _own_files[filename] = own
    return own
