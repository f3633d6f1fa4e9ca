from .adam import Adam  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .sgd import SGD  # noqa: F401
__all__ = ["Adam", "Optimizer", "SGD"]  # re-exports, as torch's
