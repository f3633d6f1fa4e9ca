from . import profiler  # noqa: F401
__all__ = ["profiler"]  # re-exports, as torch's
