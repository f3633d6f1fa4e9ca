from . import _profiler  # noqa: F401
__all__ = ["_profiler"]  # re-exports, as torch's
