"""The command line's TraceWarnings: one `pytrace_cffi: <message>` line each.

Under `python -m pytrace_cffi`, a TraceWarning (a deep trace exported, a hook
lost, events dropped, a job's process not read whole) is printed without the
file, line and source line of our code that warned, and with the options it
names (TraceWarning.options) spelt as the command line's flags: `--max-depth
512`, not `max_depth=512`. The Python API keeps its warnings as they are.

Every other warning, the traced program's own above all, prints exactly as
under python. The hook is warnings._showwarnmsg, which both warn()s (C and
Python) call to show a warning: any other warning is handed on whole, with its
source (a ResourceWarning's "Enable tracemalloc ..." line; replacing
showwarning or formatwarning would lose it), and a showwarning or
formatwarning the program sets is still called for it. While a
catch_warnings(record=True) records, TraceWarnings are recorded too.
"""
import sys
import warnings

from .._hiding import hide_alone
from ..errors import TraceWarning
from ..options import OPTIONS

_OPTIONS = {option.name: option for option in OPTIONS if option.flag}
# start()'s options whose command-line counterpart is not a flag of their own:
# max_events spills into start(output=DIR), into `run --spill`'s directory here.
_OTHER_FLAGS = {"output": "--spill"}


def cli_spelling(name, value):
    """start()'s option name (with value, None: the option alone) as run's flag;
    as start() takes it when run has no flag for it."""
    if name in _OTHER_FLAGS:
        return _OTHER_FLAGS[name]
    option = _OPTIONS.get(name)
    if option is None:
        return name if value is None else f"{name}={value}"
    if value is None or option.kind == "bool":
        return option.flag
    return f"{option.flag} {value}"


def cli_line(warning):
    """The line (lines, for a message of several) the command line prints for a
    TraceWarning: its message after "pytrace_cffi: ", options spelt as flags."""
    text = warning.spelt(cli_spelling) if isinstance(warning, TraceWarning) else str(warning)
    if text.startswith("pytrace_cffi "):        # "pytrace_cffi dropped ...": said once
        text = text[len("pytrace_cffi "):]
    return f"pytrace_cffi: {text}"


def _recording():
    """Whether a catch_warnings(record=True) is recording (it replaces
    _showwarnmsg_impl with its list's append)."""
    return getattr(warnings._showwarnmsg_impl, "__name__", None) != "_showwarnmsg_impl"


def install():
    """Makes this process print TraceWarnings as cli_line says (once; main())."""
    real = getattr(warnings, "_showwarnmsg", None)
    if real is None or getattr(real, "pytrace_cffi_lines", False):
        return

    def show_warning(msg):
        if not issubclass(msg.category, TraceWarning) or _recording():
            return real(msg)
        file = msg.file if msg.file is not None else sys.stderr
        try:
            file.write(cli_line(msg.message) + "\n")
        except (OSError, AttributeError):   # no stderr (pythonw), or a closed one
            pass
        return None

    show_warning.pytrace_cffi_lines = True
    hide_alone(show_warning.__code__)       # the program's warnings traced as without it
    warnings._showwarnmsg = show_warning
