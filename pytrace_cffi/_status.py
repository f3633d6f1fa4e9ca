"""The C core's status codes as exceptions: a leaf that the recorder, the model
and the readers share (none of them imports another for it)."""
from ._core import ffi, lib
from .errors import TraceError, TracerStateError

_STATUS_ERRORS = {
    lib.PT_ERR_NOMEM: MemoryError,
    lib.PT_ERR_STATE: TracerStateError,
    lib.PT_ERR_PYTHON: TraceError,
    lib.PT_ERR_ARG: ValueError,
}


def check(status, tracer_ptr, what):
    """Maps a C status code to an exception carrying the core's message."""
    if status == lib.PT_OK:
        return
    message = ffi.string(lib.pt_last_error(tracer_ptr)).decode("utf-8", "replace")
    raise _STATUS_ERRORS.get(status, TraceError)(f"{what}: {message}")
