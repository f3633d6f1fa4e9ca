"""torch.optim.Optimizer's step shape in torch 2.13: __init__ patches the class's
step with profile_hook_step, whose wrapper runs the step inside a record_function
block and then calls self._optimizer_step_code(); subclasses' step is decorated
with _use_grad_for_differentiable."""
import functools
from collections import defaultdict
from itertools import chain

import torch

_global_optimizer_pre_hooks = {}
_global_optimizer_post_hooks = {}


class _RemovableHandle:
    def __init__(self, hooks):
        self.hooks = hooks
        self.id = max(hooks, default=-1) + 1

    def remove(self):
        self.hooks.pop(self.id, None)


def register_optimizer_step_post_hook(hook):
    """Runs hook(optimizer, args, kwargs) after every optimizer's step, as torch's."""
    handle = _RemovableHandle(_global_optimizer_post_hooks)
    _global_optimizer_post_hooks[handle.id] = hook
    return handle


def _use_grad_for_differentiable(func):
    def _use_grad(*args, **kwargs):
        self = args[0]
        prev_grad = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(self.defaults["differentiable"])
            ret = func(*args, **kwargs)
        finally:
            torch.set_grad_enabled(prev_grad)
        return ret

    functools.update_wrapper(_use_grad, func)
    return _use_grad


class Optimizer:
    def __init__(self, params, defaults):
        self.defaults = defaults
        self._optimizer_step_pre_hooks = {}
        self._optimizer_step_post_hooks = {}
        self._patch_step_function()
        self.state = defaultdict(dict)
        self.param_groups = []
        self.add_param_group({"params": list(params)})

    def add_param_group(self, param_group):
        for name, default in self.defaults.items():
            param_group.setdefault(name, default)
        self.param_groups.append(param_group)

    def _optimizer_step_code(self):
        """Entry point for `torch.profile.profiler` (empty, as in torch)."""

    @staticmethod
    def profile_hook_step(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            self, *_ = args
            profile_name = f"Optimizer.step#{self.__class__.__name__}.step"
            with torch.autograd.profiler.record_function(profile_name):
                for pre_hook in chain(_global_optimizer_pre_hooks.values(),
                                      self._optimizer_step_pre_hooks.values()):
                    result = pre_hook(self, args, kwargs)
                    if result is not None:
                        args, kwargs = result
                out = func(*args, **kwargs)
                self._optimizer_step_code()
                for post_hook in chain(self._optimizer_step_post_hooks.values(),
                                       _global_optimizer_post_hooks.values()):
                    post_hook(self, args, kwargs)
                return out

        return wrapper

    def _patch_step_function(self):
        self._zero_grad_profile_name = f"Optimizer.zero_grad#{self.__class__.__name__}.zero_grad"
        hooked = getattr(self.__class__.step, "hooked", None)
        if not hooked:
            self.__class__.step = self.profile_hook_step(self.__class__.step)
            self.__class__.step.hooked = True

    def zero_grad(self, set_to_none=True):
        with torch.autograd.profiler.record_function(self._zero_grad_profile_name):
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None

    def step(self, closure=None):
        raise NotImplementedError
