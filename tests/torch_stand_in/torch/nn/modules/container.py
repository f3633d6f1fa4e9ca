from .module import Module


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        for index, module in enumerate(modules):
            self._modules[str(index)] = module

    def __getitem__(self, index):
        return list(self._modules.values())[index]

    def forward(self, x):
        for module in self._modules.values():
            x = module(x)
        return x
