"""torch.nn.Module's call shape in torch 2.13: __call__ is _wrapped_call_impl,
which calls _call_impl, which calls forward."""
from ..parameter import Parameter


class Module:
    _compiled_call_impl = None

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_parameter(self, name, parameter):
        self._parameters[name] = parameter
        object.__setattr__(self, name, parameter)

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def _wrapped_call_impl(self, *args, **kwargs):
        if self._compiled_call_impl is not None:
            return self._compiled_call_impl(*args, **kwargs)
        else:
            return self._call_impl(*args, **kwargs)

    def _call_impl(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    __call__ = _wrapped_call_impl

    def modules(self):
        yield self
        for child in self._modules.values():
            yield from child.modules()

    def parameters(self):
        seen = set()
        for module in self.modules():
            for parameter in module._parameters.values():
                if parameter is not None and id(parameter) not in seen:
                    seen.add(id(parameter))
                    yield parameter
