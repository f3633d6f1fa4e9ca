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
