from .._tensor import Tensor
from .optimizer import Optimizer, _use_grad_for_differentiable


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0):
        super().__init__(params, {"lr": lr, "momentum": momentum, "differentiable": False})

    @_use_grad_for_differentiable
    def step(self, closure=None):
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.values
                if momentum:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    values = grad if buf is None else [momentum * b + g
                                                       for b, g in zip(buf.values, grad)]
                    state["momentum_buffer"] = Tensor(values, p.shape)
                    grad = values
                p.values = [v - lr * g for v, g in zip(p.values, grad)]
        return None
