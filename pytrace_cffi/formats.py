"""The formats a trace is written in, chosen from a file's name here and nowhere else.

A name's format is its longest known suffix, matched case-insensitively
(``out.JSON.GZ`` is gzip-compressed Chrome JSON); a name without a suffix, or
ending in a path separator, is a saved-trace directory; any other suffix is
refused with the list of formats, never taken for a directory. Adding a format
is one row of FORMATS: its suffixes, a line for the help, its writer and its
reader (None: not read back), named as "module:function" under this package
(called writer(trace, path, **options), reader(path, **read_options)) so that
any module may read this table without importing the renderers and readers it
names; they never import this module (what a name says, gzip say, is passed to
them as an argument).

What a format can do is a column of its row, and the rest of the package asks
the column (formats.of(path).live), never which format a name is:
  chrome_json  Chrome trace JSON (a torch.profiler trace is read as one)
  gzip         gzip-compressed
  live         encoded while the program runs (its processes' parts are joined)
  joinable     a job's processes are joined into it as streams, not loaded
  torch_merge  merged with a torch.profiler trace by this "module:function"
               (called with our Trace, torch's path, the output, the anchor),
               or None: not merged
  directory    a saved-trace directory, not a file (DIRECTORY alone)
"""
import errno
import importlib
import os
from collections import namedtuple

from ._files import new_directory
from .errors import TraceFormatError

Format = namedtuple("Format", "name suffixes what writer options chrome_json gzip reader "
                               "read_options live joinable torch_merge directory",
                    defaults=(False, False, None, False))

FORMATS = (
    Format("json", (".json",), "Chrome trace JSON for Perfetto and chrome://tracing",
           "render.chrome:write_chrome_trace", {"compress": False}, True, False,
           "readers.chrome:read_chrome_trace", {"compressed": False},
           joinable=True, torch_merge="merge:merge_torch_chrome"),
    Format("json.gz", (".json.gz",), "gzip-compressed Chrome trace JSON",
           "render.chrome:write_chrome_trace", {"compress": True}, True, True,
           "readers.chrome:read_chrome_trace", {"compressed": True},
           joinable=True, torch_merge="merge:merge_torch_chrome"),
    Format("pftrace", (".pftrace", ".perfetto-trace"),
           "Perfetto's native protobuf, compact: for big traces",
           "render.perfetto:write_perfetto", {}, False, False,
           "readers.pftrace:read_pftrace", {},
           live=True, torch_merge="merge_perfetto:merge_torch_pftrace"),
    Format("html", (".html",), "a self-contained page: timeline and summary",
           "render.html:write_html", {}, False, False, None, {}),
    Format("speedscope", (".speedscope.json",), "speedscope's evented profile, per thread",
           "render.speedscope:write_speedscope", {}, False, False, None, {}),
    Format("folded", (".folded", ".collapsed"),
           "collapsed stacks of self time in microseconds, for flame graphs",
           "render.folded:write_folded", {}, False, False, None, {}),
    Format("pprof", (".pprof", ".pb.gz"), "pprof's profile.proto, gzip-compressed",
           "render.pprof:write_pprof", {}, False, False, None, {}),
)
DIRECTORY = Format("directory", (), "a saved-trace directory: a name without a suffix, "
                   f"or ending in {os.sep}", "model.saved:save", {}, False, False,
                   "model.saved:load", {}, directory=True)
# What of() gives for a name whose suffix is unknown: it can do nothing.
NO_FORMAT = Format("unknown", (), "no known format", None, {}, False, False, None, {})

# Longest first, so that .json.gz wins over .json.
_BY_SUFFIX = sorted(((suffix, row) for row in FORMATS for suffix in row.suffixes),
                    key=lambda item: -len(item[0]))
# What makes a directory a trace that may be written over (model/saved_format.META_FILE).
SAVED_TRACE_FILE = "meta.json"


# What a flight recorder's dump may also be written as (options.dump_format):
# a format's name, or "dir" for a saved-trace directory.
DUMP_FORMATS = tuple(row.name for row in FORMATS) + ("dir",)


def dump_format(name):
    """The Format of a DUMP_FORMATS name (DIRECTORY for "dir")."""
    return DIRECTORY if name == "dir" else next(row for row in FORMATS if row.name == name)


def suffix_of(name):
    """The suffix of name that picks its format, as name spells it ("" for none
    known): out.JSON.GZ -> .JSON.GZ."""
    lower = name.lower()
    for suffix, _ in _BY_SUFFIX:
        if lower.endswith(suffix) and len(lower) > len(suffix):
            return name[-len(suffix):]
    return ""


class UnknownFormat(ValueError):
    """A file name whose suffix names no format."""


def _ends_in_separator(path):
    return path.endswith(os.sep) or (os.altsep is not None and path.endswith(os.altsep))


def find(path):
    """The Format path's name picks, or None when its suffix is unknown."""
    path = os.fspath(path)
    if _ends_in_separator(path):
        return DIRECTORY
    name = os.path.basename(path).lower()
    for suffix, row in _BY_SUFFIX:
        if name.endswith(suffix) and len(name) > len(suffix):
            return row
    return DIRECTORY if not os.path.splitext(name)[1] else None


def format_of(path):
    """The Format path's name picks; UnknownFormat (a ValueError saying which
    formats there are) for a suffix that names none."""
    found = find(path)
    if found is None:
        suffix = os.path.splitext(os.fspath(path))[1]
        raise UnknownFormat(f"{suffix!r} is not a trace format; name it {choices()}")
    return found


def choices():
    """The formats as a phrase for help and refusals."""
    parts = [" or ".join(row.suffixes) + f" ({row.what})" for row in FORMATS]
    return ", ".join(parts) + f", or {DIRECTORY.what}"


def suffixes_text(directory=True):
    """".json, .json.gz, .pftrace, .html or a directory" (without the directory:
    ".json, .json.gz, .pftrace or .html"), for short help and refusals."""
    names = [row.suffixes[0] for row in FORMATS] + (["a directory"] if directory else [])
    return ", ".join(names[:-1]) + " or " + names[-1]


def of(path):
    """The Format path's name picks, NO_FORMAT (whose capabilities are all off)
    when its suffix is unknown: formats.of(path).live, .joinable, .gzip, ..."""
    found = find(path)
    return NO_FORMAT if found is None else found


def gzipped(path):
    """Whether a file's name says gzip: .gz in any case (.json.gz is the format
    we write; a torch.profiler trace read by merge may be any NAME.gz)."""
    return os.fspath(path).lower().endswith(".gz")


def torch_compressed(path):
    """Whether a torch.profiler trace to be read is gzip-compressed, by its name:
    any NAME.gz (torch names its own traces NAME.pt.trace.json.gz)."""
    return gzipped(path)


def torch_mergers():
    """The formats a trace merged with torch.profiler's is written in, as
    ".json, .json.gz or .pftrace"."""
    names = [row.suffixes[0] for row in FORMATS if row.torch_merge]
    return ", ".join(names[:-1]) + " or " + names[-1]


def merge_torch(ours, torch_path, out_path, anchor):
    """Merges ours with a torch.profiler trace into out_path, by the merger of
    out_path's format (its torch_merge); ValueError for a format not merged."""
    merger = of(out_path).torch_merge
    if merger is None:
        raise ValueError(f"a trace merged with torch.profiler's is Chrome JSON or .pftrace: "
                         f"name it {torch_mergers()}, not {os.fspath(out_path)!r}")
    return _named(merger)(ours, torch_path, out_path, anchor)


def numbered(path, number, fmt=None):
    """The name of window `number` of path, in its format (fmt, by default the
    one its name picks): out.json -> out.1.json, out.JSON.GZ -> out.1.JSON.GZ
    (.html and .pftrace alike), dir -> dir.1/ (the separator keeps a directory
    a directory whatever its name)."""
    fmt = fmt or format_of(path)
    if fmt.directory:
        return f"{path.rstrip(os.sep)}.{number}{os.sep}"
    suffix = next(s for s in fmt.suffixes if path.lower().endswith(s))
    return f"{path[:-len(suffix)]}.{number}{path[-len(suffix):]}"


def beside(path, tail):
    """A name beside path: path without the suffix that picks its format (and
    without a trailing separator) + tail: out.pftrace -> out<tail>, DIR/ ->
    DIR<tail> ("trace<tail>" for a name that is all suffix)."""
    path = os.fsdecode(path).rstrip(os.sep) or os.sep
    place, name = os.path.split(path)
    suffix = suffix_of(name)
    name = name[:len(name) - len(suffix)] if suffix else name
    return os.path.join(place, (name or "trace") + tail)


def foreign_directory(path):
    """Why a saved trace may not be written into directory path, or None: a
    non-empty directory that is not a saved trace holds someone else's files,
    which a trace written into it would mix with."""
    try:
        entries = os.listdir(path)
    except OSError:                 # missing, a file, unreadable: writing says why
        return None
    if entries and not os.path.isfile(os.path.join(path, SAVED_TRACE_FILE)):
        return ("it is a directory holding other files, not a saved trace (name a new or "
                f"empty directory, or a file: {suffixes_text(directory=False)})")
    return None


def unwritable(path):
    """Why an output named path cannot be written, or None when it can: a file's
    directory exists and takes a new file; a directory output exists and takes a
    new file, or can be made. Checked by making (and removing) what the write
    will make, so a read-only file system or a missing permission is found before
    anything is traced. A name of no format, and a directory of other files
    (foreign_directory), are refused."""
    if not path.strip():        # (-o "$OUT" with OUT unset)
        return "the name is empty"
    try:
        is_directory = format_of(path).directory
    except UnknownFormat as exc:
        return str(exc)
    absolute = os.path.abspath(path)
    if is_directory and os.path.exists(path) and not os.path.isdir(path):
        return ("it is a file; a saved trace is a directory (name the output "
                f"{suffixes_text(directory=False)} for a file)")
    foreign = is_directory and foreign_directory(path)
    if foreign:
        return foreign
    if not is_directory:
        if os.path.isdir(absolute):
            return "it is a directory"
        where = os.path.dirname(absolute)
    else:
        where = absolute
        while not os.path.exists(where):          # save() makes missing parents
            where = os.path.dirname(where)
    if not os.path.isdir(where):
        state = "is not a directory" if os.path.exists(where) else "does not exist"
        return f"directory {where!r} {state}"
    try:
        if is_directory and where != absolute:
            os.rmdir(new_directory(".pytrace_cffi-", where=where))
        else:
            probe = os.path.join(where, f".pytrace_cffi-{os.urandom(6).hex()}")
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def write(trace, path, fmt=None):
    """Writes trace to path in fmt (by default the format path's name picks;
    UnknownFormat for none). A saved trace is never written into a directory of
    other files (an OSError, ENOTEMPTY, says so)."""
    path = os.fspath(path)
    fmt = fmt or format_of(path)
    if fmt.directory:
        refused = foreign_directory(path)
        if refused is not None:
            raise OSError(errno.ENOTEMPTY, refused, path)
    _named(fmt.writer)(trace, path, **fmt.options)


def write_or_fall_back(trace, path):
    """Writes trace to path; if that fails (a full disk, a directory removed while
    the program ran), to a file or directory of the same format in the system's
    temporary directory, else in the current one, and says so in one line.
    Returns the path written, or None when every place failed."""
    import sys
    fmt = format_of(path)               # the fallback keeps it, whatever its name
    try:
        whole_or_nothing(path, lambda: write(trace, path, fmt))
        return path
    except OSError as exc:
        failure = exc
    import tempfile
    name = f"pytrace_cffi-{os.getpid()}-{os.path.basename(path.rstrip(os.sep)) or 'trace'}"
    for where in (tempfile.gettempdir(), os.getcwd()):
        fallback = os.path.join(where, name)
        if os.path.exists(fallback):
            continue
        try:
            whole_or_nothing(fallback, lambda: write(trace, fallback, fmt))
        except OSError:
            continue
        print(f"pytrace_cffi: cannot write trace to {path!r}: {failure.strerror or failure}; "
              f"saved it to {fallback!r} instead", file=sys.stderr)
        return fallback
    print(f"pytrace_cffi: cannot write trace to {path!r}: {failure.strerror or failure}; "
          f"no fallback location took it either", file=sys.stderr)
    return None


def whole_or_nothing(path, writing):
    """writing(), which writes path; if it fails (a full disk, a Ctrl-C), a saved
    directory it made there goes too: half of one is no trace. (Files are
    written whole or not at all already: _files.replaced_atomically.)"""
    made = not os.path.exists(path)
    try:
        return writing()
    except BaseException:
        if made and os.path.isdir(path):
            import shutil
            shutil.rmtree(path, ignore_errors=True)
        raise


def write_chrome_json(trace, path):
    """Writes trace to path as Chrome JSON, gzip-compressed when the name says
    .gz (Trace.export_chrome_trace: whatever the rest of the name)."""
    json, json_gz = FORMATS[:2]
    write(trace, path, json_gz if gzipped(path) else json)


def write_perfetto(trace, path, compress=True):
    """Writes trace to path as Perfetto's protobuf (Trace.export_perfetto: whatever
    the name), its packets deflate-compressed unless compress is False."""
    fmt = dump_format("pftrace")
    _named(fmt.writer)(trace, path, **dict(fmt.options, compress=compress))


def save(trace, directory):
    """Writes trace as a saved-trace directory (Trace.save: whatever the name)."""
    _named(DIRECTORY.writer)(trace, directory, **DIRECTORY.options)


def read(path):
    """The Trace in a saved-trace directory, or a Chrome .json/.json.gz or a
    .pftrace written by pytrace_cffi, by its name. Raises TraceFormatError for
    anything else. (A job's directory of processes: reading.read_trace.)"""
    path = os.fspath(path)
    if os.path.isdir(path):
        return _named(DIRECTORY.reader)(path, **DIRECTORY.read_options)
    if not os.path.exists(path):
        raise TraceFormatError(f"{path!r} does not exist")
    fmt = find(path)
    if fmt is not None and fmt is not DIRECTORY and fmt.reader is None:
        # (the page, flame graphs, pprof: made for their viewers, not read back)
        raise TraceFormatError(f"{path!r} ({fmt.what}) is made for its viewer and not read "
                               "back: write a .pftrace (or .json, .json.gz, a directory) to "
                               "read the trace again")
    if fmt is None or fmt.directory:
        raise TraceFormatError(f"{path!r} is neither a saved-trace directory nor a .json, "
                               f".json.gz or .pftrace file")
    return _named(fmt.reader)(path, **fmt.read_options)


def _named(name):
    """The function a row names, "module:function" under this package."""
    module, function = name.split(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)
