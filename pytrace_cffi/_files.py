"""Writing a file so that a failure never leaves a truncated one behind."""
import contextlib
import os


@contextlib.contextmanager
def replaced_atomically(path, open_file):
    """Yields open_file(temporary path) beside `path`; renames it to `path` when
    the block succeeds, removes it when the block fails. The trace being written
    is untouched either way, so a failed export can be retried."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open_file(tmp) as out:
            yield out
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
