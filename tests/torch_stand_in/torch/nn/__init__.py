from .modules import Linear, Module, ReLU, Sequential  # noqa: F401
from .parameter import Parameter  # noqa: F401
__all__ = ["Linear", "Module", "ReLU", "Sequential", "Parameter"]  # re-exports, as torch's
