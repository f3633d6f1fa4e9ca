"""What the command line asks, checked before anything starts: an OUT that
cannot be written, a --processes-dir that holds other files, and `run`'s flags
taken together (RunPlan). A refusal exits with one line (code 2 for an output,
else a usage message); nothing of the program has run by then."""
import os
import sys

from .. import formats, options as start_options
from .steps import parse_schedule


def refuse_output(path, reason):
    """Exits (code 2) with the one-line refusal of an output that cannot be written."""
    print(f"pytrace_cffi: cannot write trace to {path!r}: {reason}", file=sys.stderr)
    raise SystemExit(2)


def check_output(path):
    """Exits (code 2) unless OUT can be written (formats.unwritable says why not),
    so that a bad OUT fails before the program runs, not after."""
    reason = formats.unwritable(path)
    if reason is not None:
        refuse_output(path, reason)


class RunPlan:
    """`run`'s arguments, checked together, and what follows from them decided
    once: OUT (absolute) and its format, start()'s options, how windows open (signum, schedule, delay/duration, else
    the whole run), and whether children are followed (keep_in: --processes-dir)
    or a window spills; notes: what to say of them once the program is found."""

    def __init__(self, output, options, follow, spill, keep_in, signum, schedule,
                 delay, duration, format, notes=()):
        self.output = output
        self.options = options
        self.follow = follow
        self.spill = spill
        self.keep_in = keep_in
        self.signum = signum
        self.schedule = schedule
        self.delay = delay
        self.duration = duration
        self.format = format
        self.notes = notes      # lines for stderr once the program is found

    @classmethod
    def from_arguments(cls, args):
        """Exits with one line for flags that do not combine, an OUT that cannot
        be written, a --processes-dir in use or a bad option (in that order)."""
        _check_combinations(args)
        out, keep_in = args.output, args.processes_dir
        # What OUT's name says, asked once: whether it (and --processes-dir) can
        # be written, its format, the dumps beside it.
        refusals = [(out, formats.unwritable(out))]
        if keep_in is not None:
            refusals += [(keep_in, start_options.processes_dir_problem(keep_in))]
        fmt = formats.of(out)               # (NO_FORMAT for a name refused below)
        dumps_beside = formats.beside(out, start_options.DUMPS_BESIDE)
        for path, reason in refusals:       # (a bad OUT fails now, not after the program ran)
            if reason is not None:
                refuse_output(path, reason)
        options = start_options.from_arguments(args)
        try:
            start_options.check(options)
            signum = start_options.signal_number(args.signal) if args.signal else None
            if signum == 0:             # ("none", "0": no signal is no window)
                raise ValueError(f"unknown signal {args.signal!r}")
            output = start_options.for_output(options, out, dumps_beside)
            schedule = parse_schedule(args.schedule) if args.schedule else None
        except (TypeError, ValueError) as exc:
            raise SystemExit(f"pytrace_cffi: {exc}") from None
        follow, notes = not args.no_follow, []
        if options.get("record_params") and not fmt.directory:
            notes.append(f"pytrace_cffi: --record-params: a {fmt.name} file keeps no parameter "
                         "metadata; a saved-trace directory does (-o DIR, params.json)")
        if follow and args.max_events and not args.spill:
            notes.append("pytrace_cffi: --max-events without --spill drops events, so child "
                         "processes are not followed (add --spill to follow them)")
            follow = False
        if follow:      # each window's start(), as cli/run.py makes it: refused now, if ever
            try:
                start_options.check(dict(options, output=output, follow_children=True,
                                         processes_dir=keep_in or True))
            except (TypeError, ValueError) as exc:
                raise SystemExit(f"pytrace_cffi: {exc}") from None
        # (following, every process spills into its job's directory anyway)
        return cls(output=output, options=options, follow=follow,
                   spill=bool(args.spill and not follow),
                   keep_in=os.path.abspath(keep_in) if follow and keep_in else None,
                   signum=signum,
                   schedule=schedule, delay=args.delay, duration=args.duration,
                   format=fmt, notes=notes)


def _check_combinations(args):
    if args.delay < 0 or (args.duration is not None and args.duration <= 0):
        raise SystemExit("pytrace_cffi: --delay must be >= 0 and --duration > 0")
    if args.signal and (args.delay or args.duration):
        raise SystemExit("pytrace_cffi: --signal and --delay/--duration do not combine")
    if args.schedule and (args.signal or args.delay or args.duration):
        raise SystemExit("pytrace_cffi: --schedule and --signal/--delay/--duration "
                         "do not combine")
    if args.spill and not args.max_events:
        raise SystemExit("pytrace_cffi: --spill goes with --max-events N")
    if args.flight_recorder and (args.signal or args.schedule or args.spill
                                 or args.max_events):
        raise SystemExit("pytrace_cffi: --flight-recorder records the whole run into its "
                         "ring and dumps on demand: it does not combine with --signal, "
                         "--schedule, --max-events or --spill")
    if args.processes_dir is not None:
        if args.no_follow:
            raise SystemExit("pytrace_cffi: --processes-dir and --no-follow do not combine")
        if args.max_events and not args.spill:
            raise SystemExit("pytrace_cffi: --processes-dir needs children followed: with "
                             "--max-events, add --spill")
