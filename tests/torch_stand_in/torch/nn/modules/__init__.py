from .activation import ReLU  # noqa: F401
from .container import Sequential  # noqa: F401
from .linear import Linear  # noqa: F401
from .module import Module  # noqa: F401
__all__ = ["ReLU", "Sequential", "Linear", "Module"]  # re-exports, as torch's
