"""A stand-in for torch, for the tests only (tests/test_torch_stand_in.py): the few
shapes pytrace_cffi's TorchWatcher keys on, written like torch 2.13's own code —
`torch.nn.modules.module.Module` whose `__call__` is `_wrapped_call_impl` (which
calls `_call_impl`, which calls `forward`), and `torch.optim.optimizer.Optimizer`
whose subclasses' `step` is wrapped by `profile_hook_step`, that wrapper calling
the step (through `_use_grad_for_differentiable`) and then `_optimizer_step_code`
inside a `record_function` block, and `torch._C._profiler._RecordFunctionFast`, a
region entered without running Python code. Tensors are lists of floats with the metadata
attributes (shape, dtype, device, requires_grad, grad).

It is importable as `torch` only in the subprocesses those tests start with this
directory first on PYTHONPATH, so it never shadows a real torch in the test run.
workload.py is a model written against the API both share; test_torch.py runs it
under the real torch.profiler to check the names the stand-in tests expect.
"""
from ._tensor import Tensor, float32, ones, ones_like, zeros_like  # noqa: F401

_grad_enabled = True


def is_grad_enabled():
    return _grad_enabled


def set_grad_enabled(mode):
    global _grad_enabled
    _grad_enabled = bool(mode)


from . import _C, autograd, cuda, nn, optim, profiler, utils  # noqa: E402,F401

# re-exports, as torch's
__all__ = ["Tensor", "float32", "ones", "ones_like", "zeros_like", "is_grad_enabled",
           "set_grad_enabled", "_C", "autograd", "cuda", "nn", "optim", "profiler", "utils"]
