"""Tensors as flat lists of floats: enough arithmetic for a Linear layer, and the
metadata attributes the watcher reads. backward() gives every parameter that fed
the result a gradient of ones (accumulated), standing in for autograd."""


class _DType:
    def __init__(self, name, itemsize):
        self.name = name
        self.itemsize = itemsize

    def __str__(self):
        return f"torch.{self.name}"

    __repr__ = __str__


class _Device:
    def __init__(self, kind):
        self.type = kind

    def __str__(self):
        return self.type


float32 = _DType("float32", 4)
_CPU = _Device("cpu")


class Tensor:
    def __init__(self, values, shape, requires_grad=False, sources=()):
        self.values = [float(v) for v in values]
        self.shape = tuple(shape)
        self.dtype = float32
        self.device = _CPU
        self.requires_grad = requires_grad
        self.grad = None
        self._sources = tuple(sources)        # the parameters this value depends on

    def sum(self):
        return Tensor([sum(self.values)], (), sources=self._sources)

    def backward(self):
        for parameter in self._sources:
            if parameter.grad is None:
                parameter.grad = ones_like(parameter)
            else:
                parameter.grad = Tensor([g + 1.0 for g in parameter.grad.values],
                                        parameter.shape)

    def numel(self):
        n = 1
        for size in self.shape:
            n *= size
        return n

    def __repr__(self):
        return f"tensor(shape={list(self.shape)})"


def ones(*shape):
    t = Tensor([], shape)
    t.values = [1.0] * t.numel()
    return t


def ones_like(tensor):
    return Tensor([1.0] * tensor.numel(), tensor.shape)


def zeros_like(tensor):
    return Tensor([0.0] * tensor.numel(), tensor.shape)
