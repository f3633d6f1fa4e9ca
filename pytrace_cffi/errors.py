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
    or another profiler took the hook before stop().

    One that names start()'s options carries them: its message is then a
    template with a {name} field per option and `options` their values (None:
    the option alone, no value). Its text (str(), args) spells them as start()
    takes them (max_depth=512); the command line spells them as its flags
    (--max-depth 512) through spelt()."""

    def __init__(self, message="", *args, options=None):
        self.template = message if options else None
        self.options = dict(options or {})
        if options:
            message = self.spelt(_api_spelling)
        super().__init__(message, *args)

    def spelt(self, spell):
        """The message with each option it names spelt by spell(name, value)."""
        if self.template is None:
            return str(self)
        return self.template.format(**{name: spell(name, value)
                                       for name, value in self.options.items()})


def _api_spelling(name, value):
    return name if value is None else f"{name}={value}"
