"""The exceptions pytrace_cffi raises."""


class TraceError(RuntimeError):
    """A tracing failure. When raised by stop(), `trace` holds what was recorded."""

    def __init__(self, message, trace=None):
        super().__init__(message)
        self.trace = trace


class TracerConflictError(TraceError):
    """Another tracer holds a hook that pytrace_cffi needs."""


class TracerStateError(TraceError):
    """start() while tracing, stop() while not tracing, or a trace() block's trace
    read inside the block, before it exists."""


class TraceFormatError(TraceError):
    """A saved trace that cannot be read: missing, truncated, corrupt or from an
    unknown format version."""


class TraceWarning(UserWarning):
    """Something was lost but a trace was kept: events dropped under max_events,
    or another profiler took the hook before stop()."""
