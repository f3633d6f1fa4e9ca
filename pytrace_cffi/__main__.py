"""Command line: ``python -m pytrace_cffi run|summary|export|merge|report|dump|attach ...``."""
import argparse
import atexit
import importlib
import os
import sys
import types

from . import _set_step_hook, formats, options as start_options
from ._progress import counted
from ._program_view import hide_from_program
from .cli.attach import add_attach_parser, cmd_attach
from .cli.dump import add_dump_parser, cmd_dump
from .cli.program import main_module, split_run
from .cli.steps import OptimizerSteps, ScheduledWindows
from .cli.arguments import RunPlan, check_output
from .cli import trace_warnings
from .cli.run import Run
from .errors import TraceFormatError
from ._hiding import codes_below, hide_launcher_frames, hide_with_callees

EXIT_BROKEN_PIPE = 1            # python's own, when stdout's reader went away
OUTPUT_HELP = ("OUT's name picks the format (its suffix, in any case): "
               + formats.choices() + ". Any other suffix is refused, and so is a "
               "directory holding files that are not a saved trace")


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m pytrace_cffi",
        description="Trace every Python and built-in call of a program, on all its "
                    "threads; summarize a trace; convert it to Chrome JSON (open it in "
                    "https://ui.perfetto.dev), a self-contained HTML page or a saved-trace "
                    "directory; say where a job's processes are stuck, from their dumps.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = commands.add_parser(
        "run", help="run a script or module under the tracer",
        usage="%(prog)s [options] (SCRIPT | -m MODULE) [ARGS ...]",
        description="Runs SCRIPT (or -m MODULE) as __main__ with its own argv and "
                    "traces the whole run. Options go before SCRIPT or -m MODULE: "
                    "everything after them is the program's, as with python itself. "
                    "The trace is written even when the program raises or calls "
                    "sys.exit; the exit code stays the program's.",
        epilog=OUTPUT_HELP + ". An output that cannot be written stops the run before "
               "the program starts (exit code 2); if writing fails at the end, the "
               "trace goes to the system's temporary directory (or the current one) "
               "and its path is printed.")
    run.add_argument("-o", "--output", default="trace.pftrace", metavar="OUT",
                     help=f"where to write the trace: {formats.suffixes_text()} "
                          "(default: trace.pftrace: compact, encoded while the program "
                          "runs; ui.perfetto.dev opens it)")
    for option in start_options.CLI_OPTIONS:       # start()'s, declared in options.py
        start_options.add_argument(run, option)
        if option.name == "max_events":
            run.add_argument("--spill", action="store_true",
                             help="with --max-events: keep every event, spilling the oldest "
                                  "to a temporary directory beside OUT (removed once OUT is "
                                  "written)")
    run.add_argument("--signal", metavar="SIG",
                     help="trace only between signals: each SIG (e.g. USR2) opens or "
                          "closes a window, saved to its own numbered file beside OUT "
                          "(out.1.json, out.2.json, ...)")
    run.add_argument("--schedule", metavar="WAIT,WARMUP,ACTIVE[,REPEAT]",
                     help="trace only some steps, as torch.profiler.schedule: skip WAIT "
                          "steps, run WARMUP untraced, trace ACTIVE; REPEAT cycles (default "
                          "1; 0: forever, then each window goes to a numbered file). A step "
                          "ends after each training step of torch's optimizers or, once "
                          "the program calls pytrace_cffi.step(), at each of its calls only")
    run.add_argument("--delay", type=float, default=0.0, metavar="SECONDS",
                     help="start tracing this long after the program starts")
    run.add_argument("--duration", type=float, metavar="SECONDS",
                     help="stop tracing this long after it started")
    run.add_argument("--no-follow", action="store_true",
                     help="trace this process only, not the Python processes it starts "
                          "(by default each is traced too and joined into OUT)")
    run.add_argument("--processes-dir", metavar="DIR",
                     help="keep the per-process traces of the job in DIR (new or empty; "
                          "DIR.1, DIR.2, ... for numbered windows); by default they go to "
                          "a temporary directory, removed once OUT is written")
    # -m and SCRIPT are split off by cli.program.split_run (what follows them is the
    # program's); they are declared here for the help text.
    run.add_argument("-m", dest="module", metavar="MODULE",
                     help="run a library module as a script, like python -m; the "
                          "arguments after MODULE are the module's")
    run.add_argument("target", nargs="?", metavar="SCRIPT [ARGS]",
                     help="the script and its arguments")

    parser.run_parser = run
    summary = commands.add_parser(
        "summary", help="print the functions that took the most time",
        description="Prints a table of functions with their calls, total time (a "
                    "recursive function's time counted once) and self time (without "
                    "the functions it called), in milliseconds.")
    summary.add_argument("trace", metavar="TRACE",
                         help="a saved-trace directory, or a .json / .json.gz / .pftrace "
                              "that pytrace_cffi wrote")
    summary.add_argument("--sort", choices=("total", "self", "calls", "name"),
                         default="total", help="order of the rows (default: total)")
    summary.add_argument("--limit", type=_count, default=20, metavar="N",
                         help="show the top N functions, 0 for all (default: 20)")
    summary.add_argument("--per-thread", action="store_true",
                         help="one table part per thread, each with its top N")
    summary.add_argument("--per-process", action="store_true",
                         help="a trace of several processes (a job): one table part per "
                              "process, each with its top N")
    summary.add_argument("--steps", action="store_true",
                         help="then the steps of the program's loop: per step, each rank's "
                              "duration and the slowest rank; and the functions whose self "
                              "time differs most between each step's slowest rank and its "
                              "median rank. A step ends at each pytrace_cffi.step() call, "
                              "else at each torch optimizer step, else at each ProfilerStep "
                              "region (docs/CLI.md#steps-and-stragglers)")

    export = commands.add_parser(
        "export", help="convert a trace to another format",
        description="Reads a saved-trace directory, or a Chrome .json / .json.gz or a "
                    ".pftrace that pytrace_cffi wrote, and writes it as OUT.",
        epilog=OUTPUT_HELP + ".")
    export.add_argument("source", metavar="DIR_OR_JSON",
                        help="a saved-trace directory, or a .json / .json.gz / .pftrace")
    export.add_argument("-o", "--output", required=True, metavar="OUT",
                        help=f"where to write: {formats.suffixes_text()}")

    merge = commands.add_parser(
        "merge", help="join traces onto one timeline: processes, or ours with torch.profiler's",
        description="With the trace directories of a job (run's or start(follow_children="
                    "True, output=DIR)'s, or single process directories): one trace with a "
                    "lane per process (a pid lane in .json, a process track in .pftrace, a "
                    "group in .html; a saved-trace directory keeps them all), named by its "
                    "label (rank, DataLoader worker, program), on one clock. With one of "
                    "our traces and torch.profiler's Chrome trace (its export_chrome_trace file, told "
                    "apart by its content): our Python calls on torch's timeline and thread "
                    "tracks, beside its cpu_op, user_annotation and GPU events; where torch "
                    "recorded Python calls too (with_stack=True), ours replace them.")
    merge.add_argument("inputs", nargs="+", metavar="TRACE",
                       help="trace or process directories; or OURS (a .json / .json.gz, "
                            ".pftrace or saved-trace directory) and TORCH_JSON")
    merge.add_argument("-o", "--output", required=True, metavar="OUT",
                       help=f"where to write the merged trace: {formats.suffixes_text()} "
                            "(with torch.profiler's: .json, .json.gz or .pftrace)")
    add_dump_parser(commands)
    add_attach_parser(commands)

    report = commands.add_parser(
        "report", help="where each process of a job is stuck, from flight-recorder dumps",
        description="Reads the dumps of a job's processes (a DUMPDIR: proc-<pid>/dump.json "
                    "for each) and prints, per process, the open stack of its main thread: "
                    "processes with the same stack are grouped (ranks as ranges), the "
                    "groups with the fewest members first, so the odd ones out of a hung "
                    "job come first, with how long their innermost call has been open.",
        epilog="A thread is idle when its innermost call waits (time.sleep, a lock's "
               "acquire, threading's wait or join, queue.get, select, poll, ...): "
               "--threads leaves those out.")
    report.add_argument("dumps", nargs="+", metavar="DUMPDIR",
                        help="a dump directory; or a directory holding several (such as "
                             "<job>/dumps/, or the job's or trace's directory itself): "
                             "each process's newest dump, or every dump with --all")
    report.add_argument("--all", action="store_true",
                        help="every dump of a directory holding several, oldest first")
    report.add_argument("--threads", action="store_true",
                        help="also the other threads that are not idle, grouped by name "
                             "and stack")
    report.add_argument("--frames", type=_count, default=0, metavar="K",
                        help="compare and show the innermost K frames of each stack "
                             "(default 0: the whole stack)")
    report.add_argument("--json", action="store_true",
                        help="print JSON for machines (docs/CLI.md#report) instead of text")
    return parser


def _count(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _exit_code(exc):
    """The process exit code Python would give for an uncaught exc (a
    KeyboardInterrupt is raised again instead: see _raise_uncaught)."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return 1


def _launcher_codes():
    """The code of every frame below this one that is not the program's: runpy's
    under python -m, a caller's when main() is called from Python."""
    return codes_below(sys._getframe(1))


def _program_traceback(exc, run_by_runpy=None):
    """exc's traceback without the frame of _cmd_run that ran the program; when
    python would have run it by runpy (run_by_runpy: its module code), starting
    as python's does there (cli/program.py: with_runpy_frames)."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is _cmd_run.__code__:
        tb = tb.tb_next
    if run_by_runpy is not None and tb is not None and tb.tb_frame.f_code is run_by_runpy:
        from .cli.program import with_runpy_frames
        tb = with_runpy_frames(tb)
    return tb


def _print_uncaught(exc, run_by_runpy=None):
    """Prints exc as the interpreter prints an uncaught exception, through
    sys.excepthook, without the frame of _cmd_run that ran the program."""
    tb = _program_traceback(exc, run_by_runpy)
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def _raise_uncaught(exc, run_by_runpy=None):
    """Raises the program's KeyboardInterrupt again, out of main(), once OUT is
    written: the interpreter then ends as python ends on one (the program's
    atexit handlers run, then the process dies by SIGINT), printing it through
    sys.excepthook with the program's frames only (not the ones it passes here)."""
    tb = _program_traceback(exc, run_by_runpy)
    hook = sys.excepthook

    def program_frames(exc_type, value, traceback):
        sys.excepthook = hook
        if value is exc:
            value, traceback = value.with_traceback(tb), tb
        hook(exc_type, value, traceback)

    sys.excepthook = program_frames
    raise exc.with_traceback(tb)


def _cmd_run(args, program, at_interpreter_exit=False):
    """Runs the program traced. at_interpreter_exit: this process ends when the
    program does (python -m pytrace_cffi, the pytrace-cffi script): the trace
    ends, as the program does under python, once the interpreter has joined
    its threads and run its atexit handlers (and the children those wait for
    have ended); else (main(argv) called from Python) when its code returns."""
    module, program_argv = program
    if module is None and not program_argv:
        raise SystemExit("pytrace_cffi run: give a SCRIPT or -m MODULE")
    plan = RunPlan.from_arguments(args)
    try:
        code, main, packages = main_module(module, program_argv)
    except SyntaxError as exc:      # printed as python prints it: no frames of ours
        sys.excepthook(type(exc), exc.with_traceback(None), None)
        return 1
    for note in plan.notes:
        print(note, file=sys.stderr)
    run_program = types.FunctionType(code, main.__dict__)
    run = Run(plan)
    run.guard_ending()      # os._exit or an exec of this process still writes OUT
    hide_launcher_frames(_launcher_codes())
    # The program's module stays __main__ to the end, as under python: threads and
    # atexit handlers that outlive its code still unpickle from it.
    sys.modules["__main__"] = main
    failure = None
    # The program runs as a call from this frame: live when tracing starts, it is
    # left out of the trace alone (see _hiding.hiding), so the program's
    # module-level code is the trace's outermost call. A module's code runs as a
    # function of its globals (not through exec), so no launcher call is recorded.
    # The packages of a -m module are imported first, as python -m does.
    scheduled = optimizer_steps = None
    run_pid, ended = os.getpid(), False

    def end_of_run():
        nonlocal ended
        if ended or os.getpid() != run_pid:     # (a forked child's trace is its own)
            return
        ended = True
        if scheduled is not None:
            _set_step_hook(None)
            optimizer_steps.uninstall()
            scheduled.end()
        _finish_run(run)

    if at_interpreter_exit:
        # Registered before tracing starts (this frame's calls are recorded then):
        # runs after the program's own atexit handlers (registered later, run
        # first) and before a followed process's own saving (follow/exits.py).
        from .follow.exits import save_at_exit
        save_at_exit()
        atexit.register(end_of_run)
    if plan.schedule is not None:
        scheduled = ScheduledWindows(plan.schedule, run)
        optimizer_steps = OptimizerSteps(scheduled.step)
        optimizer_steps.install()
        _set_step_hook(optimizer_steps.program_step)
        scheduled.begin()
    elif plan.signum is not None:
        run.on_signal(plan.signum)
    elif plan.delay or plan.duration:
        run.after(plan.delay, plan.duration)
    else:
        run.whole_run()
    # The program sees python's sys.modules, not our imports (its own run again).
    hide_from_program(module is not None or main.__spec__ is not None)
    try:
        for package in packages:
            importlib.import_module(package)
        run_program()
    except BaseException as exc:   # noqa: B902 - the program's own exit, reported below
        failure = exc
    # The rest in a function of ours, left out of the trace with all it calls: this
    # frame's own calls would be recorded, the trace going on at the program's exit.
    run_by_runpy = code if module is not None or main.__spec__ is not None else None
    return _program_ended(failure, end_of_run, at_interpreter_exit, run_by_runpy)


def _program_ended(failure, end_of_run, at_interpreter_exit, run_by_runpy=None):
    """The program's code has ended (failure: its uncaught exception, or None;
    run_by_runpy: the module code python would have run by runpy, or None).
    Returns its exit code (whatever became of the trace), or at_interpreter_exit
    raises it as SystemExit (as sys.exit would: no call of ours is recorded after
    the program's, on the way to the interpreter's exit)."""
    exit_code = 0
    if failure is not None:
        exit_code = _exit_code(failure)
        if not isinstance(failure, SystemExit):     # uncaught: a flight recorder dumps first
            from .follow.exits import running_recorder
            recorder = running_recorder()
            if recorder is not None:
                recorder.on_uncaught(type(failure), failure, failure.__traceback__)
    if not at_interpreter_exit or isinstance(failure, KeyboardInterrupt):
        # (a Ctrl-C: written now, as the interpreter's exit would not die of
        # SIGINT after our imports at exit; threads still running are cut at stop)
        end_of_run()
    if isinstance(failure, KeyboardInterrupt):
        _raise_uncaught(failure, run_by_runpy)
    if failure is not None and not isinstance(failure, SystemExit):
        _print_uncaught(failure, run_by_runpy)
    if at_interpreter_exit:
        _hide_idle_shutdown()
        raise SystemExit(exit_code)
    return exit_code


def _hide_idle_shutdown():
    """The interpreter's exit begins with threading._shutdown, which waits for the
    threads that are not daemons (and first runs what threading._register_atexit
    registered: concurrent.futures' ends of its workers). When neither is there,
    it is bookkeeping of no interest to the program: left out of the trace."""
    import threading
    shutdown = getattr(threading, "_shutdown", None)
    code = getattr(shutdown, "__code__", None)
    if code is None or getattr(threading, "_threading_atexits", None):
        return
    current = threading.current_thread()
    if any(t is not current and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    hide_with_callees(code)


def _finish_run(run):
    """run.finish(), which says what it wrote or kept; a failure of ours
    beyond that is said in one line: the program's exit goes on unchanged."""
    try:
        run.finish()
    except KeyboardInterrupt:    # past writing (which keeps the trace and says where)
        print("pytrace_cffi: interrupted", file=sys.stderr)
    except Exception as exc:     # noqa: BLE001 - never a traceback of ours, nor an exit code
        print(f"pytrace_cffi: writing the trace failed ({exc.__class__.__name__}: {exc})",
              file=sys.stderr)


def _cmd_summary(args):
    from .reading import read_trace
    from .render.summary import format_process_totals, format_summary, summarize_counting
    from .model.trace import threads_text
    trace = read_trace(args.trace)
    per_process = args.per_process and not args.per_thread
    # calls as the table counts them: frames running when tracing began are none
    rows, calls = summarize_counting(trace, sort=args.sort, limit=args.limit or None,
                                     per_thread=args.per_thread, per_process=per_process)
    title = (f"{args.trace}: {counted(calls, 'call')} on "
             f"{threads_text(trace.threads)}, "
             f"{(trace.stop_ns - trace.start_ns) / 1e6:.3f} ms")
    if trace.processes:
        title = (f"{args.trace}: {counted(calls, 'call')} in "
                 f"{counted(len(trace.processes), 'process')}, "
                 f"{threads_text(trace.threads)}, "
                 f"{(trace.stop_ns - trace.start_ns) / 1e6:.3f}"
                 f" ms\n{format_process_totals(trace)}\n"
                 + ("per process:" if per_process else
                    "per thread:" if args.per_thread else "all processes:"))
    _print_text(format_summary(rows, title=title,
                               column="process" if per_process and trace.processes else "thread"))
    if args.steps:
        from .render.steps import format_steps, steps_table
        _print_text("\n" + format_steps(steps_table(trace)))
    return 0


def _print_text(text):
    """print(text); a path that is not UTF-8 (its bytes as lone surrogates) shown
    with U+FFFD where stdout cannot write those (a strict UTF-8 stdout)."""
    try:
        print(text)
    except UnicodeEncodeError:
        from ._jsontext import utf8_text
        print(utf8_text(text))


def export(source, path):
    """What `export SOURCE -o PATH` does: reads SOURCE as one trace and writes it
    in the format PATH's name picks. Returns the trace."""
    from .reading import read_trace
    trace = read_trace(source)
    formats.whole_or_nothing(path, lambda: formats.write(trace, path))
    return trace


def _cmd_dump(args):
    if args.output is not None:
        check_output(args.output)      # before any process is asked
    return cmd_dump(args)


def _cmd_export(args):
    check_output(args.output)
    trace = export(args.source, args.output)
    from .render.summary import calls_begun     # as summary counts: frames open at start are none
    from .model.trace import threads_text
    print(f"pytrace_cffi: {counted(calls_begun(trace), 'call')} on "
          f"{threads_text(trace.threads)} -> {args.output}", file=sys.stderr)
    return 0


def _is_torch_trace(path):
    """Whether path is a Chrome JSON file that pytrace_cffi did not write (its
    header, written first, names us as the generator)."""
    if os.path.isdir(path) or not formats.of(path).chrome_json:
        return False
    import gzip
    import zlib
    try:
        opener = gzip.open if formats.of(path).gzip else open
        with opener(path, "rb") as f:
            head = f.read(4096)
    except FileNotFoundError:
        return False
    except (OSError, EOFError, zlib.error) as exc:     # a damaged .gz: said here
        raise TraceFormatError(f"{path}: cannot be read ({exc})") from None
    return b'"generator": "pytrace_cffi"' not in head


def _cmd_merge(args):
    torch_traces = [path for path in args.inputs if _is_torch_trace(path)]
    if torch_traces:
        if formats.of(args.output).torch_merge is None:
            raise SystemExit(f"pytrace_cffi: a trace merged with torch.profiler's is Chrome "
                             f"JSON or .pftrace: name it {formats.torch_mergers()}, not "
                             f"{args.output!r}")
        ours = [path for path in args.inputs if path not in torch_traces]
        if len(torch_traces) != 1 or len(ours) != 1:
            raise SystemExit("pytrace_cffi: merging with torch.profiler takes one of our traces "
                             f"and one torch trace, not {len(ours)} and {len(torch_traces)}")
        check_output(args.output)
        from .merge import merge_torch
        merge_torch(ours[0], torch_traces[0], args.output)
        print(f"pytrace_cffi: {ours[0]} on the timeline of {torch_traces[0]} -> {args.output}",
              file=sys.stderr)
        return 0
    from .follow.jobs import unfollowed, unfollowed_lines
    from .follow.join import join
    check_output(args.output)
    results = join(args.inputs, args.output)
    for result in results:
        print(f"pytrace_cffi: pid {result.pid} ({result.label}): {result.state}"
              + (f" - {result.note}" if result.note else ""), file=sys.stderr)
    for path in args.inputs:            # a job's trace directory: who was not followed
        if os.path.isdir(path) and not os.path.exists(os.path.join(path, "meta.json")):
            for line in unfollowed_lines(unfollowed(path)):
                print(f"pytrace_cffi: {line}", file=sys.stderr)
    print(f"pytrace_cffi: {counted(len(results), 'process')} -> {args.output}",
          file=sys.stderr)
    return 0


def _cmd_report(args):
    from .hang_report import report
    _print_text(report(args.dumps, every=args.all, frames=args.frames, threads=args.threads,
                       as_json=args.json))
    return 0


def _cmd_attach(args):
    return cmd_attach(args)


COMMANDS = {"summary": _cmd_summary, "export": _cmd_export,      # run: see main()
            "merge": _cmd_merge, "dump": _cmd_dump, "report": _cmd_report,
            "attach": _cmd_attach}


def main(argv=None):
    """The command line. argv None: this process's own (sys.argv), whose exit
    follows: `run` then ends its trace at the interpreter's exit (_cmd_run)."""
    own_command_line = argv is None
    # Our TraceWarnings as `pytrace_cffi: ...` lines, their options as our flags;
    # every other warning (the program's) prints as under python.
    trace_warnings.install()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    if argv[:1] == ["run"]:
        ours, module, program = split_run(parser.run_parser, argv[1:])
        args = parser.parse_args(["run"] + ours)
        try:
            return _cmd_run(args, (module, program), at_interpreter_exit=own_command_line)
        except TraceFormatError as exc:
            raise SystemExit(f"pytrace_cffi: {exc}") from None
    args = parser.parse_args(argv)
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()          # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        return _stdout_gone()
    except (TraceFormatError, OSError) as exc:
        raise SystemExit(f"pytrace_cffi: {exc}") from None


def _stdout_gone():
    """`summary ... | head`: the reader left. Silent, as Python's own tools are
    (docs: "Note on SIGPIPE"): what is still buffered goes to /dev/null so the
    flush at exit does not complain, and the exit code is 1."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
