"""Reading the files of a saved-trace or job directory, which may be damaged or
hostile: every reader of those directories opens its files here.

Only a regular file is read (a FIFO would block the reader for good, /dev/zero or
/dev/urandom would never end, a directory cannot be read), never through a
symbolic link (one could lead out of the directory: none is followed, inside a
directory or as its last part), and a JSON file only up to a size bound. The file
is opened non-blocking, so that a FIFO put in place between a check and the open
cannot block either; what is wrong raises TraceFormatError naming the file.
"""
import errno
import os
import stat

from .errors import TraceFormatError

# Our JSON files hold a line per function at most (keys, names): a file beyond
# this is not ours.
MAX_JSON_BYTES = 1 << 30

_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_BINARY", 0))


def _kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path):
    """(file descriptor, os.stat_result) of path opened for reading, when it is a
    regular file reached without a symbolic link as its last part. A missing file
    raises FileNotFoundError (the caller says what it means); anything else that
    is wrong, TraceFormatError."""
    try:
        if os.path.islink(path):
            raise TraceFormatError(f"{path}: a symbolic link, not read (it may lead out "
                                   "of its directory)")
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:        # O_NOFOLLOW: made a link since the check
            raise TraceFormatError(f"{path}: a symbolic link, not read (it may lead out "
                                   "of its directory)") from None
        raise TraceFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceFormatError(f"{path}: {_kind(st.st_mode)}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_binary(path):
    """open_regular's file as an unbuffered binary file object, with its stat."""
    fd, st = open_regular(path)
    return os.fdopen(fd, "rb", buffering=0), st


def read_bounded(path, limit=None):
    """The bytes of the regular file path, at most limit (MAX_JSON_BYTES) of them
    (TraceFormatError when there are more); FileNotFoundError when it is missing."""
    return read_bounded_with_stat(path, limit)[0]


def read_bounded_with_stat(path, limit=None):
    """read_bounded's bytes, and the os.stat_result of the very file they were read
    from (whose owner and inode a caller may check)."""
    limit = MAX_JSON_BYTES if limit is None else limit
    fd, st = open_regular(path)
    with os.fdopen(fd, "rb", buffering=0) as f:
        if st.st_size > limit:
            raise TraceFormatError(f"{path}: {st.st_size} bytes, more than the {limit} it "
                                   "may hold")
        parts, size = [], 0
        want = st.st_size + 1       # one read for all of it, then whatever it grew by
        while size <= limit:
            try:
                part = f.read(min(limit + 1 - size, want))
                want = 1 << 20
            except OSError as exc:
                raise TraceFormatError(f"{path}: cannot be read ({exc.strerror or exc})") \
                    from None
            if not part:
                break
            parts.append(part)
            size += len(part)
        if size > limit:
            raise TraceFormatError(f"{path}: more than the {limit} bytes it may hold (it "
                                   "grew while read)")
        return b"".join(parts), st

