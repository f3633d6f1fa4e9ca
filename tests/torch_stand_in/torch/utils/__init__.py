from . import data  # noqa: F401
__all__ = ["data"]  # re-exports, as torch's
