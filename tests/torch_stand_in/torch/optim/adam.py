from .._tensor import Tensor, zeros_like
from .optimizer import Optimizer, _use_grad_for_differentiable


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, {"lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps,
                                  "differentiable": False})

    @_use_grad_for_differentiable
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["beta1"], group["beta2"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = Tensor([0.0], ())
                    state["exp_avg"] = zeros_like(p)
                    state["exp_avg_sq"] = zeros_like(p)
                state["step"].values[0] += 1
                g = p.grad.values
                state["exp_avg"].values = [b1 * m + (1 - b1) * x
                                           for m, x in zip(state["exp_avg"].values, g)]
                state["exp_avg_sq"].values = [b2 * v + (1 - b2) * x * x
                                              for v, x in zip(state["exp_avg_sq"].values, g)]
                p.values = [w - group["lr"] * m / ((v ** 0.5) + group["eps"])
                            for w, m, v in zip(p.values, state["exp_avg"].values,
                                               state["exp_avg_sq"].values)]
        return None
