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

from .formats import DIRECTORY, DUMP_FORMATS, beside, find, unwritable

Option = namedtuple("Option", "name kind default help flag negated metavar cli_rank")
Option.__doc__ = """One option of start().

kind     "bool"; "count" (an int from 1 to its bound, see _COUNT_LIMITS);
         "microseconds" (a number >= 0); "globs" (a glob or a list of them);
         "path" (a path, or None); "processes" (a new or empty directory, with
         an output file); "flight" (flight_ring's spec); "dumps" (a
         path, with the flight recorder); "dump_format" (a name of
         formats.DUMP_FORMATS, with the flight recorder); "signal"
         (signal_number's); "watchdog" (seconds); "milliseconds" (a number >= 0.1,
         or None)
help     the words of its line in `run --help` (None: not on the command line;
         start()'s docstring says what each does)
flag     run's flag for it, or None when run does not offer it (noop; output is
         run's -o, which means OUT there; follow_children is run's default, see
         --no-follow; processes_dir is --processes-dir, which `run` gives each
         window's start() with its OUT)
negated  the flag sets the option to False (--no-modules: with_modules=False)
"""

# dump_format "stacks": the raw dumps themselves are small (the stacks, the ring's
# newest dump_window seconds), and no trace file is written beside them.
STACKS_DUMP_FORMAT = "stacks"
DEFAULT_DUMP_WINDOW_S = 30.0


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
    Option("processes_dir", "processes", None, None, None, False, None, None),
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
    Option("flight_recorder", "flight", None,
           "keep only the newest events, in a ring of SIZE (64M by default; k, M, G) or of "
           "the last SECONDS ('30s', within 64M), however long the program runs; dump it "
           "without stopping on a signal (--dump-signal), an uncaught exception, SIGTERM, "
           "the --watchdog, `python -m pytrace_cffi dump`, or pytrace_cffi.dump()",
           "--flight-recorder", False, "SIZE|SECONDS", 10),
    Option("dumps_dir", "dumps", None,
           "where the flight recorder's dumps go, one directory per dump, one proc-<pid> "
           "per process (default: beside OUT, named OUT without its suffix + '-dumps': "
           "trace-dumps/ for trace.json)", "--dumps-dir", False, "DIR", 11),
    Option("dump_format", "dump_format", None,
           "with the flight recorder, also write each dump as one trace in FMT ("
           + ", ".join(DUMP_FORMATS) + "; 'dir': a saved-trace directory) inside its "
           "dump directory, trace.<FMT>, once its raw files are whole (not when only C "
           "could write the dump: then the raw directory alone, which load and export "
           "read); or 'stacks': each dump's raw files hold the threads' stacks and only "
           "the last --dump-window seconds of the ring", "--dump-format", False, "FMT", 12),
    Option("dump_window", "seconds", None,
           "with --dump-format stacks: the seconds of the ring's newest events each dump "
           f"keeps (default {DEFAULT_DUMP_WINDOW_S:g})", "--dump-window", False, "SECONDS", 12),
    Option("dump_signal", "signal", None,
           "the signal that dumps the flight recorder (default SIGUSR1; 0 or 'none': none)",
           "--dump-signal", False, "SIG", 12),
    Option("watchdog", "watchdog", None,
           "with the flight recorder: dump once per stall when no step (a torch optimizer "
           "step or pytrace_cffi.step(); with :REGION also each end of that "
           "record_function region) came for SECONDS; written by C when Python cannot "
           "run (a thread stuck in C holding the GIL)", "--watchdog", False,
           "SECONDS[:REGION]", 13),
    Option("log_exceptions", "bool", False,
           "record each exception raised as an instant on its thread: its type, message, "
           "where it was raised and where it was caught (3.9-3.11: only where it left "
           "frames)", "--log-exceptions", False, None, 14),
    Option("log_args", "globs", None,
           "record the arguments and return value of the functions whose qualified name "
           "or source path matches GLOB (e.g. '*forward', '*/mypkg/*') as safe summaries "
           "(type, length, shape and dtype, small values): their calls' args; repeatable",
           "--log-args", False, "GLOB", 15),
    Option("log_args_repr", "bool", False,
           "with --log-args, also each value's repr(), cut to 200 characters (it runs "
           "the objects' own code)", "--log-args-repr", False, None, 16),
    Option("log_gc", "bool", False,
           "record each garbage collection as a slice 'gc (generation N)' on the thread "
           "that ran it, with what it collected", "--log-gc", False, None, 17),
    Option("memory_interval_ms", "milliseconds", None,
           "sample memory counters every MS milliseconds: the process's RSS (Linux), "
           "torch's CUDA memory allocated (when CUDA is in use) and tracemalloc's traced "
           "size (when tracing)", "--memory-interval", False, "MS", 18),
    Option("log_async", "bool", False,
           "record each asyncio task's steps on a lane of its own, named 'task <name>', "
           "instead of inside its event loop's thread", "--log-async", False, None, 19),
    Option("log_launches", "bool", False,
           "record each command the program launches (subprocess.Popen, os.system) as an "
           "instant 'launch' on the thread that launched it, with its command line",
           "--log-launches", False, None, 20),
)
NAMES = tuple(option.name for option in OPTIONS)
DEFAULTS = {option.name: option.default for option in OPTIONS}
# What a Session takes: follow_children picks the kind of session instead, and
# processes_dir is where a FollowSession's job goes.
SESSION_DEFAULTS = {name: value for name, value in DEFAULTS.items()
                    if name not in ("follow_children", "processes_dir")}
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
    if checked["log_args_repr"] and not checked["log_args"]:
        raise ValueError("log_args_repr goes with log_args")
    if checked["flight_recorder"]:
        dumps = os.path.abspath(checked["dumps_dir"] or default_dumps_dir(checked["output"]))
        problem = _directory_problem(dumps)
        if problem is not None:
            raise ValueError(f"the flight recorder cannot dump into {dumps!r}: {problem}")
    return checked


def _count(name, value, values):
    if value is not None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if not 1 <= value <= _COUNT_LIMITS[name]:
            raise ValueError(f"{name} must be from 1 to {_COUNT_LIMITS[name]}, not {value}")
    return value


def _path(name, value, values):
    """output: where max_events spills, or a followed job's directory."""
    if value is not None:
        if not isinstance(value, (str, bytes, os.PathLike)):
            raise TypeError(f"{name} must be a path, not {type(value).__name__}")
        value = os.fsdecode(value)
        if value.strip():       # where it is now: the program may chdir before stop()
            value = absolute_output(value)
        if output_file(value) is not None:
            _writable_place(value)
            return value
        if (values["max_events"] is None and not values["follow_children"]
                and values["flight_recorder"] in (None, False)
                and values["processes_dir"] is None):
            raise ValueError("output is where max_events spills events (a directory: give "
                             "max_events too), or the file written at stop(), named "
                             "by its format (out.pftrace, out.json, out.html, ...)")
        return value
    if values["follow_children"]:
        raise ValueError("follow_children=True needs output=DIR, the trace directory that "
                         "gets one saved trace per process")
    return None


def processes_dir_problem(path):
    """Why path cannot take a job's per-process traces, or None: it must be new
    or an empty directory (other processes' traces in it would be joined with
    this job's) that takes new files (formats.unwritable)."""
    if not path.strip():
        return "the name is empty"
    if os.path.exists(path):
        if not os.path.isdir(path):
            return "it is a file, not a directory"
        if os.listdir(path):
            return ("it is not empty (the per-process traces of one job go into a new "
                    "or empty directory)")
    return unwritable(path.rstrip(os.sep) + os.sep)


def _processes(name, value, values):
    """processes_dir: output is the trace written at stop() from a job whose
    per-process traces stay in this directory (True: a temporary one)."""
    if value is None:
        return None
    if value is not True and not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name} must be a path or True, not {type(value).__name__}")
    output = values["output"]
    if output is None or not os.fsdecode(output).strip():
        raise ValueError(f"{name} goes with output, the trace written at stop() from the "
                         "per-process traces")
    output = absolute_output(os.fsdecode(output))
    # Not a file format's name (_path checked those): a directory, written as one
    # saved trace rather than used as the job's directory, or a name of no format.
    directory = file_format(output) is None
    if directory:
        problem = unwritable(output)
        if problem is not None:
            raise ValueError(f"cannot write {output!r}: {problem}")
    if value is True:
        return True
    value = os.fsdecode(value)
    problem = processes_dir_problem(value)
    if problem is not None:
        raise ValueError(f"cannot keep the per-process traces in {value!r}: {problem}")
    value, place = os.path.abspath(value), os.path.abspath(output)
    if directory and os.path.commonpath([value, place]) in (value, place):
        raise ValueError(f"cannot keep the per-process traces in {value!r}: output "
                         f"{output!r} is a directory too, and neither may hold the other")
    return value


def absolute_output(path):
    """path made absolute from the working directory now (the program may chdir
    before the trace is written), keeping a trailing separator: it says directory."""
    return os.path.abspath(path) + (os.sep if path.endswith(("/", os.sep)) else "")


def for_output(options, output, dumps_beside):
    """start()'s options (checked) for a trace that ends in OUT (output), a file
    or directory the command line names (`run -o`, `attach -o`), not start()'s
    own output (each window's job or spill directory): OUT made absolute (the
    program may chdir before it is written), and the flight recorder's dumps
    directory dumps_beside (formats.beside OUT's, see default_dumps_dir) when none
    was given. Changes options in place; returns OUT."""
    if options.get("flight_recorder") and options.get("dumps_dir") is None:
        options["dumps_dir"] = os.path.abspath(dumps_beside)
    return absolute_output(output)


def output_file(output):
    """The file start(output=...) writes at stop() when output's name picks a file
    format (out.pftrace, out.json, ...), else None (a directory, or no output)."""
    return output if file_format(output) is not None else None


def file_format(output):
    """The Format of output_file(output), or None."""
    fmt = None if output is None else find(output)
    return fmt if fmt is not None and fmt is not DIRECTORY else None


def _directory_problem(path):
    """Why directory path (made when missing) cannot take new files, or None."""
    existing = path
    while not os.path.lexists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        return f"{existing!r} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing!r} is not writable"
    return None


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


DEFAULT_RING_BYTES = 64 << 20
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def flight_ring(spec):
    """(ring bytes, seconds or None) of a flight_recorder spec: True (64 MiB), a
    number of bytes, or "64M", "512k", "1G", "30s" (the last 30 s, within 64 MiB).
    Raises ValueError (or TypeError) for anything else."""
    if spec is True:
        return DEFAULT_RING_BYTES, None
    if isinstance(spec, int) and not isinstance(spec, bool):
        size, seconds = spec, None
    elif isinstance(spec, str):
        text = spec.strip().lower()
        try:
            if text.endswith("s"):
                size, seconds = DEFAULT_RING_BYTES, float(text[:-1])
                if not 0 < seconds < 1e9:
                    raise ValueError
            else:
                unit = text[-1:] if text[-1:] in _SIZE_UNITS else ""
                size, seconds = int(float(text[:len(text) - len(unit)]) * _SIZE_UNITS[unit]), None
        except ValueError:
            raise ValueError(f"flight_recorder must be a size (64M, 512k, 1G) or seconds "
                             f"(30s), not {spec!r}") from None
    else:
        raise TypeError("flight_recorder must be True, a number of bytes, or a string "
                        f"like '64M' or '30s', not {type(spec).__name__}")
    if not 64 << 10 <= size <= 1 << 40:
        raise ValueError(f"the flight recorder's ring must be 64k to 1T bytes, not {size}")
    return size, seconds


def _flight(name, value, values):
    if value is None or value is False:
        return None
    flight_ring(value)
    if values["max_events"] is not None:
        raise ValueError("flight_recorder sizes the ring itself: give no max_events")
    return value


def _needs_flight(name, values):
    if values["flight_recorder"] in (None, False):
        raise ValueError(f"{name} goes with flight_recorder")


def _dumps(name, value, values):
    if value is not None:
        _needs_flight(name, values)
        if not isinstance(value, (str, bytes, os.PathLike)):
            raise TypeError(f"{name} must be a path, not {type(value).__name__}")
        value = os.fsdecode(value)
    return value


DEFAULT_DUMPS_DIR = "pytrace_cffi-dumps"


DUMPS_BESIDE = "-dumps"      # the dumps directory beside OUT: OUT's name, this tail


def default_dumps_dir(output):
    """Where the flight recorder dumps when dumps_dir is not given: beside the
    job's other files, OUT without its format's suffix + "-dumps" (out.pftrace
    -> out-dumps, a directory DIR -> DIR-dumps); without output, the current
    directory's pytrace_cffi-dumps."""
    return DEFAULT_DUMPS_DIR if output is None else beside(output, DUMPS_BESIDE)


def _dump_format(name, value, values):
    if value is not None:
        _needs_flight(name, values)
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a format's name, not {type(value).__name__}")
        text = value.strip().lower().lstrip(".")
        if text not in DUMP_FORMATS + (STACKS_DUMP_FORMAT,):
            raise ValueError(f"{name} must be one of {', '.join(DUMP_FORMATS)} or "
                             f"{STACKS_DUMP_FORMAT}, not {value!r}")
        value = text
    return value


def _seconds(name, value, values):
    if value is not None:
        if str(values.get("dump_format") or "").strip().lower() != STACKS_DUMP_FORMAT:
            raise ValueError(f"{name} goes with dump_format={STACKS_DUMP_FORMAT!r}")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"{name} must be a number of seconds")
        if not 0 < value < 1e9:
            raise ValueError(f"{name} must be more than 0 seconds, not {value}")
    return value


def signal_number(value):
    """The number of a signal given as an int, "SIGUSR1", "USR1" or "10"; 0 for
    0/"0"/"none". ValueError for anything else."""
    import signal
    if isinstance(value, str):
        text = value.strip().upper()
        if text in ("0", "NONE", ""):
            return 0
        if text.isdigit():
            value = int(text)
        else:
            found = getattr(signal, text if text.startswith("SIG") else "SIG" + text, None)
            if not isinstance(found, signal.Signals):
                raise ValueError(f"unknown signal {value!r}")
            value = int(found)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"a signal must be a name or a number, not {type(value).__name__}")
    if value == 0:
        return 0
    if value in (signal.SIGKILL, signal.SIGSTOP) or not 0 < value < signal.NSIG:
        raise ValueError(f"{value} cannot be the dump signal")
    return value


def _signal(name, value, values):
    if value is not None:
        _needs_flight(name, values)
        return signal_number(value)
    return None


def watchdog_spec(value):
    """(seconds, region name or None) of a watchdog option: a number of seconds,
    or "SECONDS" / "SECONDS:REGION" (progress: each end of the record_function
    region REGION, besides steps). ValueError or TypeError otherwise."""
    region = None
    if isinstance(value, str):
        text, _, region = value.partition(":")
        try:
            seconds = float(text)
        except ValueError:
            raise ValueError(f"watchdog must be SECONDS or SECONDS:REGION, not {value!r}") \
                from None
        region = region or None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value
    else:
        raise TypeError("watchdog must be a number of seconds, or 'SECONDS:REGION'")
    if not 0.01 <= seconds < 1e9:
        raise ValueError(f"watchdog must be at least 0.01 seconds, not {seconds}")
    return seconds, region


def _watchdog(name, value, values):
    if value is not None:
        _needs_flight(name, values)
        watchdog_spec(value)
    return value


def _milliseconds(name, value, values):
    if value is not None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"{name} must be a number of milliseconds")
        if not 0.1 <= value < 1e9:
            raise ValueError(f"{name} must be at least 0.1, not {value}")
    return value


_CHECKS = {"count": _count, "path": _path, "processes": _processes,
           "microseconds": _microseconds, "globs": _globs,
           "flight": _flight, "dumps": _dumps, "dump_format": _dump_format, "signal": _signal,
           "seconds": _seconds,
           "watchdog": _watchdog, "milliseconds": _milliseconds}


# pt_event: a 32-bit delta and a 32-bit key|kind (a ring's size in events)
EVENT_BYTES = 8


class StartPlan:
    """start()'s options checked, and what follows from them decided once, here:
    which session records and where its output goes. The sessions read these
    fields and decide none of them again.

    options      check()'s, without follow_children and processes_dir; with the
                 flight recorder, dumps_dir absolute (default_dumps_dir of output
                 when not given) and dump_signal a number (SIGUSR1 when not
                 given): what this process records with, and what the processes
                 it starts are told
    follow       follow_children
    output       output (absolute), or None
    output_file  output when its name picks a file format, or with processes_dir
                 (then a directory's name too, for one saved trace): written at
                 stop() from the job's per-process traces
    format       output_file's Format, or None
    processes_dir  where output_file's job keeps its per-process traces (an
                 absolute path), or None: a temporary directory, removed once
                 the file is written
    ring         the flight recorder's ring: (events, max age in ns or None), or
                 None when it is off
    """

    def __init__(self, checked):
        options = dict(checked)
        self.follow = options.pop("follow_children")
        self.processes_dir = options.pop("processes_dir", None)   # (a child's plan has none)
        self.output = options["output"]
        self.ring = None
        if options["flight_recorder"]:
            size, seconds = flight_ring(options["flight_recorder"])
            self.ring = size // EVENT_BYTES, (int(seconds * 1e9) if seconds else None)
            options["dumps_dir"] = os.path.abspath(options["dumps_dir"]
                                                   or default_dumps_dir(self.output))
            if options["dump_signal"] is None:
                import signal
                options["dump_signal"] = int(signal.SIGUSR1)
        self.format = file_format(self.output)
        if self.processes_dir is not None and self.format is None:
            self.format = DIRECTORY     # output=DIR: written as one saved trace
        self.output_file = self.output if self.format is not None else None
        if self.processes_dir is True:  # a temporary one, as for any output file
            self.processes_dir = None
        self.options = options

    @property
    def traces_a_job(self):
        """Whether a FollowSession records it (children followed, a file written
        at stop(), a flight recorder's ring), not a plain Session."""
        return bool(self.follow or self.output_file or self.ring)


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
    elif option.kind == "flight":
        parser.add_argument(option.flag, nargs="?", const=True, metavar=option.metavar,
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


_CLI_TYPES = {"count": _positive, "microseconds": float, "dumps": str, "dump_format": str,
              "seconds": float,
              "signal": str, "watchdog": str, "milliseconds": float}
