"""The options of start(), declared once.

Each row of OPTIONS says an option's name, its kind (how it is checked), its
default, the words of its --help line, and how `run` spells it on the command
line (flag, and whether the flag says the opposite of the option: --no-c-calls
is c_calls=False). Three readers: start()'s validation (check), the recorder's
Session (session_options), and `run`'s parser (add_argument, from_arguments).
The rows are in the order start() checks them (the first bad one is reported);
cli_rank orders their lines in `run --help`. Kept free of imports of the rest of
the package but formats (which reads a file's name): anything may read it.
"""
import os
from collections import namedtuple

from .formats import DIRECTORY, find

Option = namedtuple("Option", "name kind default help flag negated metavar cli_rank")
Option.__doc__ = """One option of start().

kind     "bool"; "count" (an int from 1 to its bound, see _COUNT_LIMITS);
         "microseconds" (a number >= 0); "globs" (a glob or a list of them);
         "path" (a path, or None)
help     the words of its line in `run --help` (None: not on the command line;
         start()'s docstring says what each does)
flag     run's flag for it, or None when run does not offer it (noop; output is
         run's -o, which means OUT there; follow_children is run's default, see
         --no-follow)
negated  the flag sets the option to False (--no-modules: with_modules=False)
"""

OPTIONS = (
    Option("c_calls", "bool", True, "record Python functions only, not built-in calls",
           "--no-c-calls", True, None, 0),
    Option("noop", "bool", False, None, None, False, None, None),
    Option("with_modules", "bool", True,
           "do not name torch nn.Module calls, optimizer steps and regions",
           "--no-modules", True, None, 7),
    Option("record_params", "bool", False,
           "keep the metadata (never the values) of torch module and optimizer-step "
           "parameters", "--record-params", False, None, 8),
    Option("trim_paths", "bool", True,
           "keep file names whole (by default site-packages, sys.path and torch prefixes "
           "are stripped, as torch.profiler does)", "--no-trim-paths", True, None, 9),
    Option("skip_imports", "bool", False,
           "leave out the calls made while a module is being imported (import-time code, "
           "the import machinery), with their callees", "--skip-imports", False, None, 6),
    Option("follow_children", "bool", False, None, None, False, None, None),
    Option("max_events", "count", None,
           "hold at most about N events in memory; past it the oldest are dropped (the "
           "trace says how many), or with --spill written to disk",
           "--max-events", False, "N", 5),
    Option("output", "path", None, None, None, False, None, None),
    Option("max_depth", "count", None,
           "record a call only while fewer than N recorded calls are open",
           "--max-depth", False, "N", 3),
    Option("min_duration_us", "microseconds", None,
           "leave out calls shorter than this, with their callees",
           "--min-duration", False, "MICROSECONDS", 4),
    Option("include", "globs", None,
           "record only functions whose source path matches GLOB (fnmatch on the full "
           "path, e.g. '*/mypkg/*'); repeatable", "--include", False, "GLOB", 1),
    Option("exclude", "globs", None,
           "leave out functions whose source path matches GLOB; repeatable",
           "--exclude", False, "GLOB", 2),
)
NAMES = tuple(option.name for option in OPTIONS)
DEFAULTS = {option.name: option.default for option in OPTIONS}
# What a Session takes: follow_children picks the kind of session instead.
SESSION_DEFAULTS = {name: value for name, value in DEFAULTS.items()
                    if name != "follow_children"}
# run's flags, in the order of its --help
CLI_OPTIONS = tuple(sorted((o for o in OPTIONS if o.flag), key=lambda o: o.cli_rank))

_COUNT_LIMITS = {"max_events": 2 ** 62, "max_depth": 2 ** 31 - 1}


def check(given):
    """start()'s options (given: name -> value, names already known) checked before
    anything starts, and returned whole and normalised: defaults filled in,
    output a str, include/exclude lists. Raises TypeError or ValueError."""
    values = dict(DEFAULTS, **given)
    checked = {}
    for option in OPTIONS:          # the switches first, then the rest
        if option.kind == "bool":
            value = checked[option.name] = values[option.name]
            if not isinstance(value, bool):
                raise TypeError(f"{option.name} must be a bool, not {type(value).__name__}")
    for option in OPTIONS:
        if option.kind != "bool":
            checked[option.name] = _CHECKS[option.kind](option.name, values[option.name],
                                                        values)
    return checked


def _count(name, value, values):
    if value is not None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if not 1 <= value <= _COUNT_LIMITS[name]:
            raise ValueError(f"{name} must be at least 1, not {value}")
    return value


def _path(name, value, values):
    """output: where max_events spills, or a followed job's directory."""
    if value is not None:
        if not isinstance(value, (str, bytes, os.PathLike)):
            raise TypeError(f"{name} must be a path, not {type(value).__name__}")
        value = os.fsdecode(value)
        if output_file(value) is not None:
            _writable_place(value)
            return value
        if values["max_events"] is None and not values["follow_children"]:
            raise ValueError("output is where max_events spills events (a directory: give "
                             "max_events too), or the file written at stop(), named "
                             "by its format (out.pftrace, out.json, out.html, ...)")
        return value
    if values["follow_children"]:
        raise ValueError("follow_children=True needs output=DIR, the trace directory that "
                         "gets one saved trace per process")
    return None


def output_file(output):
    """The file start(output=...) writes at stop() when output's name picks a file
    format (out.pftrace, out.json, ...), else None (a directory, or no output)."""
    if output is None:
        return None
    fmt = find(output)
    return output if fmt is not None and fmt is not DIRECTORY else None


def _writable_place(path):
    place = os.path.dirname(os.path.abspath(path)) or os.sep
    if not os.path.isdir(place):
        raise ValueError(f"cannot write {path!r}: {place!r} is not a directory")
    if not os.access(place, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {path!r}: {place!r} is not writable")
    if os.path.isdir(path):
        raise ValueError(f"cannot write {path!r}: it is a directory")


def _microseconds(name, value, values):
    if value is not None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"{name} must be a number of microseconds")
        if not 0 <= value < 1e12:
            raise ValueError(f"{name} must be >= 0, not {value}")
    return value


def _globs(name, value, values):
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        raise TypeError(f"{name} must be a glob string or a list of them")
    return list(value)


_CHECKS = {"count": _count, "path": _path, "microseconds": _microseconds, "globs": _globs}


def session_options(given):
    """A Session's options: given (name -> value) over the defaults; an unknown
    name is a TypeError, as for a function's keyword argument."""
    for name in given:
        if name not in SESSION_DEFAULTS:
            raise TypeError(f"Session() got an unexpected keyword argument {name!r}")
    return dict(SESSION_DEFAULTS, **given)


# -- the command line (run) ---------------------------------------------------
def add_argument(parser, option):
    """Adds option's flag to run's parser (argparse)."""
    if option.kind == "bool":
        parser.add_argument(option.flag, action="store_true", help=option.help)
    elif option.kind == "globs":
        parser.add_argument(option.flag, action="append", metavar=option.metavar,
                            help=option.help)
    else:
        parser.add_argument(option.flag, type=_CLI_TYPES[option.kind],
                            metavar=option.metavar, help=option.help)


def from_arguments(args):
    """start()'s options as run's parsed arguments give them (those run offers)."""
    options = {}
    for option in CLI_OPTIONS:
        value = getattr(args, option.flag.lstrip("-").replace("-", "_"))
        options[option.name] = (not value) if option.negated else value
    return options


def _positive(text):
    # (argparse names this function in its message for a non-number:
    # "invalid _positive value")
    value = int(text)
    if value < 1:
        import argparse         # the command line's, already imported by it
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


_CLI_TYPES = {"count": _positive, "microseconds": float}
