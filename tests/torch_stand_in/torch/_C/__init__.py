from . import _distributed_c10d, _profiler  # noqa: F401
__all__ = ["_distributed_c10d", "_profiler"]  # re-exports, as torch's
