from .modules import Linear, Module, ReLU, Sequential  # noqa: F401
from .parameter import Parameter  # noqa: F401
