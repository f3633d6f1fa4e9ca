from ..._tensor import Tensor
from .module import Module


class ReLU(Module):
    def forward(self, x):
        return Tensor([max(v, 0.0) for v in x.values], x.shape, sources=x._sources)
