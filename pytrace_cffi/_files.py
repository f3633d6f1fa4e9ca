"""Writing a file so that a failure never leaves a truncated one behind."""
import contextlib
import os


@contextlib.contextmanager
def replaced_atomically(path, open_file):
    """Yields open_file(temporary path) beside `path`; renames it to `path` when
    the block succeeds, removes it when the block fails. The trace being written
    is untouched either way, so a failed export can be retried. An OSError about
    the temporary file (or about no file: a full disk) is raised about `path`,
    the name the caller gave."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open_file(tmp) as out:
            yield out
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename in (None, tmp):
            raise _about(exc, path) from None
        raise


def _about(exc, path):
    """exc (an OSError) restated about path, with its errno and its class."""
    if exc.errno is None:
        return OSError(f"cannot write {path!r}: {exc}")
    return OSError(exc.errno, exc.strerror, path)    # OSError picks the errno's subclass


def new_directory(prefix, suffix="", where=None):
    """A new directory (mode 0700) named prefix + random + suffix in where (default:
    the temporary directory), as tempfile.mkdtemp makes it, without importing
    tempfile (and shutil and random with it): `run`'s start-up makes one."""
    if where is None:
        where = _temporary_directory()
    for _ in range(100):
        path = os.path.join(where, f"{prefix}{os.urandom(6).hex()}{suffix}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return os.path.abspath(path)
    raise FileExistsError(f"no new directory could be made in {where!r}")


def _temporary_directory():
    """tempfile.gettempdir()'s first candidates ($TMPDIR, $TEMP, $TMP, /tmp, /var/tmp,
    /usr/tmp) that is a directory this process can write; else tempfile's answer."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        where = os.environ.get(name)
        if where and os.path.isdir(where) and os.access(where, os.W_OK | os.X_OK):
            return where
    for where in ("/tmp", "/var/tmp", "/usr/tmp"):
        if os.path.isdir(where) and os.access(where, os.W_OK | os.X_OK):
            return where
    import tempfile
    return tempfile.gettempdir()
