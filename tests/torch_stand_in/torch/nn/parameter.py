from .._tensor import Tensor


class Parameter(Tensor):
    def __init__(self, data, requires_grad=True):
        super().__init__(data.values, data.shape, requires_grad=requires_grad)
        self._sources = (self,)
