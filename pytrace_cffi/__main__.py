"""Command line: ``python -m pytrace_cffi run|summary|export ...``."""
import argparse
import os
import runpy
import sys

from . import _check_options
from ._windows import Windows, signal_number
from .errors import TraceFormatError

EXIT_INTERRUPTED = 130
OUTPUT_HELP = ("OUT's name picks the format: .json or .json.gz for Chrome trace JSON "
               "(Perfetto, chrome://tracing), .html for a self-contained page with a "
               "timeline and the summary, anything else (or a name ending in a path "
               "separator) for a saved-trace directory")


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m pytrace_cffi",
        description="Trace every Python and built-in call of a program, on all its "
                    "threads; summarize a trace; convert it to Chrome JSON (open it in "
                    "https://ui.perfetto.dev), a self-contained HTML page or a saved-trace "
                    "directory.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = commands.add_parser(
        "run", help="run a script or module under the tracer",
        description="Runs SCRIPT (or -m MODULE) as __main__ with its own argv and "
                    "traces the whole run. The trace is written even when the program "
                    "raises or calls sys.exit; the exit code stays the program's.",
        epilog=OUTPUT_HELP + ".")
    run.add_argument("-o", "--output", default="trace.json", metavar="OUT",
                     help="where to write the trace: .json, .json.gz, .html or a "
                          "directory (default: trace.json)")
    run.add_argument("--no-c-calls", action="store_true",
                     help="record Python functions only, not built-in calls")
    run.add_argument("--include", action="append", metavar="GLOB",
                     help="record only functions whose source path matches GLOB "
                          "(fnmatch on the full path, e.g. '*/mypkg/*'); repeatable")
    run.add_argument("--exclude", action="append", metavar="GLOB",
                     help="leave out functions whose source path matches GLOB; repeatable")
    run.add_argument("--max-depth", type=_positive, metavar="N",
                     help="record a call only while fewer than N recorded calls are open")
    run.add_argument("--min-duration", type=float, metavar="MICROSECONDS",
                     help="leave out calls shorter than this, with their callees")
    run.add_argument("--signal", metavar="SIG",
                     help="trace only between signals: each SIG (e.g. USR2) opens or "
                          "closes a window, saved to its own numbered file beside OUT "
                          "(out.1.json, out.2.json, ...)")
    run.add_argument("--delay", type=float, default=0.0, metavar="SECONDS",
                     help="start tracing this long after the program starts")
    run.add_argument("--duration", type=float, metavar="SECONDS",
                     help="stop tracing this long after it started")
    run.add_argument("--no-follow", action="store_true",
                     help="trace this process only, not the Python processes it starts "
                          "(by default each is traced too and joined into OUT)")
    run.add_argument("-m", dest="module", metavar="MODULE",
                     help="run a library module as a script, like python -m")
    run.add_argument("target", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]",
                     help="the script and its arguments")

    summary = commands.add_parser(
        "summary", help="print the functions that took the most time",
        description="Prints a table of functions with their calls, total time (a "
                    "recursive function's time counted once) and self time (without "
                    "the functions it called), in milliseconds.")
    summary.add_argument("trace", metavar="TRACE",
                         help="a saved-trace directory, or a .json / .json.gz that "
                              "pytrace_cffi wrote")
    summary.add_argument("--sort", choices=("total", "self", "calls", "name"),
                         default="total", help="order of the rows (default: total)")
    summary.add_argument("--limit", type=_count, default=20, metavar="N",
                         help="show the top N functions, 0 for all (default: 20)")
    summary.add_argument("--per-thread", action="store_true",
                         help="one table part per thread, each with its top N")

    export = commands.add_parser(
        "export", help="convert a trace to another format",
        description="Reads a saved-trace directory or a Chrome .json / .json.gz that "
                    "pytrace_cffi wrote, and writes it as OUT.",
        epilog=OUTPUT_HELP + ".")
    export.add_argument("source", metavar="DIR_OR_JSON",
                        help="a saved-trace directory, or a .json / .json.gz")
    export.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="where to write: .json, .json.gz, .html or a directory")
    return parser


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _count(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _output_format(path):
    """"json", "html" or "directory", from OUT's name; exits if OUT is an
    existing file where a directory would go."""
    if path.endswith((".json", ".json.gz")):
        return "json"
    if path.endswith(".html"):
        return "html"
    if os.path.exists(path) and not os.path.isdir(path):
        raise SystemExit(f"pytrace_cffi: {path!r} is a file; a saved trace is a directory "
                         f"(name the output .json, .json.gz or .html for a file)")
    return "directory"


def _write_trace(trace, path):
    """Writes trace to path in the format its name picks (see _output_format)."""
    output_format = _output_format(path)
    if output_format == "json":
        trace.export_chrome_trace(path)
    elif output_format == "html":
        from .html import write_html
        write_html(trace, path)
    else:
        trace.save(path)


def _exit_code(exc):
    """The process exit code Python would give for an uncaught exc."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return 1


def _cmd_run(args):
    if args.module:
        argv = [args.module] + args.target
    elif args.target:
        argv = list(args.target)
        if not os.path.isfile(argv[0]):
            raise SystemExit(f"pytrace_cffi: cannot find script {argv[0]!r}")
    else:
        raise SystemExit("pytrace_cffi run: give a SCRIPT or -m MODULE")
    output = args.output
    _output_format(output)           # a bad OUT fails now, not after the program ran
    if args.delay < 0 or (args.duration is not None and args.duration <= 0):
        raise SystemExit("pytrace_cffi: --delay must be >= 0 and --duration > 0")
    if args.signal and (args.delay or args.duration):
        raise SystemExit("pytrace_cffi: --signal and --delay/--duration do not combine")
    options = {"c_calls": not args.no_c_calls, "include": args.include,
               "exclude": args.exclude, "max_depth": args.max_depth,
               "min_duration_us": args.min_duration}
    try:
        _check_options(**options)
        signum = signal_number(args.signal) if args.signal else None
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"pytrace_cffi: {exc}") from None
    windows = Windows(output, options, _write_trace)
    if not args.no_follow:
        from .processes import make_run_windows
        windows = make_run_windows(output, options, _write_trace)

    sys.argv = argv
    if args.module:
        sys.path.insert(0, os.getcwd())
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    exit_code = 0
    failure = None
    # The program runs from this frame. Frames of our own code that are live when
    # tracing starts are left out of the trace, but what they call is kept.
    if signum is not None:
        windows.on_signal(signum)
    elif args.delay or args.duration:
        windows.after(args.delay, args.duration)
    else:
        windows.whole_run()
    try:
        if args.module:
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except BaseException as exc:   # noqa: B902 - the program's own exit, reported below
        failure = exc
        exit_code = _exit_code(exc)
    windows.finish()
    if failure is not None and not isinstance(failure, (SystemExit, KeyboardInterrupt)):
        import traceback
        traceback.print_exception(type(failure), failure, failure.__traceback__)
    return exit_code


def _cmd_summary(args):
    from .summary import format_summary, read_trace, summarize
    trace = read_trace(args.trace)
    rows = summarize(trace, sort=args.sort, limit=args.limit or None,
                     per_thread=args.per_thread)
    title = (f"{args.trace}: {len(trace)} calls on {len(trace.threads)} threads, "
             f"{(trace.stop_ns - trace.start_ns) / 1e6:.3f} ms")
    print(format_summary(rows, title=title))
    return 0


def _cmd_export(args):
    from .summary import read_trace
    trace = read_trace(args.source)
    _write_trace(trace, args.output)
    print(f"pytrace_cffi: {len(trace)} calls on {len(trace.threads)} threads -> {args.output}",
          file=sys.stderr)
    return 0


COMMANDS = {"run": _cmd_run, "summary": _cmd_summary, "export": _cmd_export}


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except TraceFormatError as exc:
        raise SystemExit(f"pytrace_cffi: {exc}") from None


if __name__ == "__main__":
    sys.exit(main())
