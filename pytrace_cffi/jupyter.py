"""Jupyter and IPython: ``%load_ext pytrace_cffi`` gives the ``%%pytrace`` cell magic.

    %%pytrace [-o OUT] [--no-c-calls] [--include GLOB] [...]
    work()

traces the cell and shows its HTML page below it, in an iframe of its own
(srcdoc, sandboxed to its scripts: the page's script and style never touch the
notebook's). The options are run's tracing options (options.py's rows, parsed as
run parses them); -o OUT also writes the trace to OUT in the format its name
picks, as run -o does. The cell runs as IPython runs it (its magics and shell
escapes transformed, in the notebook's namespace), and its last expression is
the magic's value, shown as Out[n]; the trace holds the cell's code, not
IPython's frames around it (hidden like run's launcher frames). A top-level
await is not supported in a traced cell.

The inline page keeps a notebook small: above INLINE_CALL_BUDGET calls its
timeline is reduced (the page says so; -o out.html writes the whole page), and
a page over INLINE_MAX_BYTES is not inlined at all (the line above it says where
it is instead).

IPython is imported here only, when the extension loads: it is no dependency of
pytrace_cffi, and `import pytrace_cffi` never imports this module.
"""
import argparse
import ast
import html
import os
import shlex
import shutil
import sys
import tempfile
import types

from . import formats, options as start_options
from ._hiding import codes_below, hide_launcher_frames, launcher_frames, restore_launcher_frames

INLINE_CALL_BUDGET = 50_000      # the inline page's timeline: calls before it is reduced
INLINE_MAX_BYTES = 8 << 20       # a bigger page is not put into the notebook
IFRAME_HEIGHT_PX = 820
_CELL_VALUE = "_pytrace_cffi_cell_value"     # the last expression's value, for a moment


def load_ipython_extension(ipython, start, stop):
    """Registers %%pytrace with ipython (an InteractiveShell); it traces by start
    and stop (the public ones, handed in by the package)."""
    def pytrace(line, cell):
        return run_traced_cell(ipython, line, cell, start, stop)
    pytrace.__doc__ = _parser().format_help()
    ipython.register_magic_function(pytrace, magic_kind="cell", magic_name="pytrace")


class _HelpShown(Exception):
    """--help: argparse printed the help; the cell does not run."""


class _MagicParser(argparse.ArgumentParser):
    """argparse that reports a bad option as IPython's UsageError (one line in
    the notebook) instead of exiting the kernel."""

    def error(self, message):
        from IPython.core.error import UsageError
        raise UsageError(f"{self.prog}: {message}")

    def exit(self, status=0, message=None):
        if message:
            print(message, file=sys.stderr)
        raise _HelpShown()


def _parser():
    parser = _MagicParser(
        prog="%%pytrace", description="Trace the cell with pytrace_cffi and show its HTML "
        "page below it (the timeline, a flame graph and the top functions).")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="also write the trace to OUT: " + formats.suffixes_text())
    for option in start_options.CLI_OPTIONS:      # run's tracing options, as run parses them
        start_options.add_argument(parser, option)
    return parser


def parse_line(line):
    """(start()'s options, OUT or None) from the magic's line, or None for --help.
    Raises UsageError for anything start() or OUT's name would refuse."""
    from IPython.core.error import UsageError
    try:
        args = _parser().parse_args(shlex.split(line))
    except _HelpShown:
        return None
    options = start_options.from_arguments(args)
    try:
        start_options.check(options)
        if args.output is not None:
            formats.format_of(args.output)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"%%pytrace: {exc}") from None
    return options, args.output


def _cell_function(shell, cell):
    """The cell as IPython would run it, as a function of the notebook's namespace
    (a module's code: its names are the namespace's), and whether its last
    statement is an expression whose value it leaves in _CELL_VALUE."""
    source = shell.transform_cell(cell)
    tree = ast.parse(source)
    # a last expression ending in ";" shows no value, as in a cell without the magic
    has_value = (bool(tree.body) and isinstance(tree.body[-1], ast.Expr)
                 and not shell.displayhook.semicolon_at_end_of_expression(source))
    if has_value:
        last = tree.body[-1]
        tree.body[-1] = ast.copy_location(
            ast.Assign(targets=[ast.Name(id=_CELL_VALUE, ctx=ast.Store())], value=last.value),
            last)
        ast.fix_missing_locations(tree)
    filename = shell.compile.cache(source, shell.execution_count)   # tracebacks show it
    code = compile(tree, filename, "exec", flags=shell.compile.flags, dont_inherit=True)
    return types.FunctionType(code, shell.user_ns), has_value


def run_traced_cell(shell, line, cell, start, stop):
    """%%pytrace: runs cell traced, shows its page, returns its last expression's
    value (None without one). An exception of the cell is raised again once its
    trace is shown."""
    parsed = parse_line(line)
    if parsed is None:
        return None
    options, output = parsed
    run_cell, has_value = _cell_function(shell, cell)
    saved_launchers = launcher_frames()
    # IPython's frames below this one run throughout: left out, as run leaves out
    # its launcher's, so the cell's code is the trace's outermost call
    hide_launcher_frames(codes_below(sys._getframe()))
    failure = None
    try:
        start(**options)
        try:
            run_cell()
        except BaseException as exc:      # noqa: B902 - raised again below
            failure = exc
        trace = stop()
    finally:
        restore_launcher_frames(saved_launchers)
    value = shell.user_ns.pop(_CELL_VALUE, None) if has_value else None
    written = None
    if output is not None:
        written = trace.export(output)
    show_page(trace, written)
    if failure is not None:
        raise failure
    return value


def inline_page(trace, call_budget=None):
    """The text of trace's HTML page for a notebook (its timeline reduced above
    call_budget calls, by default INLINE_CALL_BUDGET)."""
    from .render.html import CALL_BUDGET, write_html
    call_budget = INLINE_CALL_BUDGET if call_budget is None else call_budget
    where = tempfile.mkdtemp(prefix="pytrace_cffi-")
    try:
        path = os.path.join(where, "cell.html")
        write_html(trace, path, call_budget=min(call_budget, CALL_BUDGET))
        with open(path, encoding="utf-8") as f:
            return f.read()
    finally:
        shutil.rmtree(where, ignore_errors=True)


def page_frame(page, height=IFRAME_HEIGHT_PX):
    """An iframe holding page (srcdoc), sandboxed to its scripts."""
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
            f'style="width: 100%; height: {height}px; border: 1px solid #d0d7de; '
            f'border-radius: 6px;"></iframe>')


def show_page(trace, written=None):
    """Displays trace's page below the cell, with a line saying what it holds."""
    from IPython.display import HTML, display
    calls = len(trace)
    facts = (f"pytrace_cffi: {calls} call{'s' if calls != 1 else ''} on "
             f"{len(trace.threads)} thread{'s' if len(trace.threads) != 1 else ''}, "
             f"{(trace.stop_ns - trace.start_ns) / 1e6:.3f} ms")
    if written is not None:
        facts += f"; written to {written}"
    page = inline_page(trace)
    if calls > INLINE_CALL_BUDGET:
        facts += (f"; the timeline below is reduced to keep the notebook small (over "
                  f"{INLINE_CALL_BUDGET} calls): -o out.html writes the whole page")
    if len(page.encode("utf-8")) > INLINE_MAX_BYTES:
        facts += (f"; its page ({len(page.encode('utf-8')) >> 20} MiB) is too big to put "
                  "into the notebook: open the file -o out.html writes")
        display(HTML(f"<p>{html.escape(facts)}</p>"))
        return
    display(HTML(f"<p>{html.escape(facts)}</p>" + page_frame(page)))
