"""Command line: ``python -m pytrace_cffi run -o trace.json script.py [args...]``."""
import argparse
import os
import runpy
import sys

from . import start, stop

EXIT_INTERRUPTED = 130


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m pytrace_cffi",
        description="Trace every Python and built-in call of a program, on all its "
                    "threads, into a Chrome trace (open it in https://ui.perfetto.dev).")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = commands.add_parser(
        "run", help="run a script or module under the tracer",
        description="Runs SCRIPT (or -m MODULE) as __main__ with its own argv and "
                    "traces the whole run. The trace is written even when the program "
                    "raises or calls sys.exit; the exit code stays the program's.")
    run.add_argument("-o", "--output", default="trace.json", metavar="OUT",
                     help="where to write the trace: .json or .json.gz (default: trace.json)")
    run.add_argument("--no-c-calls", action="store_true",
                     help="record Python functions only, not built-in calls")
    run.add_argument("-m", dest="module", metavar="MODULE",
                     help="run a library module as a script, like python -m")
    run.add_argument("target", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]",
                     help="the script and its arguments")
    return parser


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
    if not output.endswith((".json", ".json.gz")):
        raise SystemExit(f"pytrace_cffi: -o must end in .json or .json.gz, not {output!r}")

    sys.argv = argv
    if args.module:
        sys.path.insert(0, os.getcwd())
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    exit_code = 0
    failure = None
    # start() and the run stay in this one frame: the frames of our own code that
    # were live at start are left out of the trace, but what they call is kept.
    start(c_calls=not args.no_c_calls)
    try:
        if args.module:
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except BaseException as exc:   # noqa: B902 - the program's own exit, reported below
        failure = exc
        exit_code = _exit_code(exc)
    result = stop()
    result.export_chrome_trace(output)
    print(f"pytrace_cffi: {len(result)} calls on {len(result.threads)} threads -> {output}",
          file=sys.stderr)
    if failure is not None and not isinstance(failure, (SystemExit, KeyboardInterrupt)):
        import traceback
        traceback.print_exception(type(failure), failure, failure.__traceback__)
    return exit_code


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _cmd_run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
