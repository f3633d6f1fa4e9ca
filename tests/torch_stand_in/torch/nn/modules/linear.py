from ..._tensor import Tensor
from ..parameter import Parameter
from .module import Module


class Linear(Module):
    """y = x W^T + b on (rows, in_features) inputs; deterministic weights."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(Tensor([0.01 * (i % 7) for i in range(out_features * in_features)],
                                       (out_features, in_features)))
        if bias:
            self.bias = Parameter(Tensor([0.1] * out_features, (out_features,)))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        rows = x.shape[0]
        n_in, n_out = self.in_features, self.out_features
        w = self.weight.values
        out = []
        for r in range(rows):
            row = x.values[r * n_in:(r + 1) * n_in]
            for o in range(n_out):
                value = sum(a * b for a, b in zip(row, w[o * n_in:(o + 1) * n_in]))
                out.append(value + (self.bias.values[o] if self.bias is not None else 0.0))
        sources = x._sources + tuple(p for p in (self.weight, self.bias) if p is not None)
        return Tensor(out, (rows, n_out), sources=sources)
