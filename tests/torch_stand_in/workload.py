"""A model and training loop written against the API the stand-in torch and the
real torch share, so one workload runs under both: the stand-in tests trace it on
every interpreter, and test_torch.py runs it under the real torch.profiler (3.11)
to check that the names and ids test_torch_stand_in.py expects are torch's own."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.proj(x))


class Linear(nn.Module):
    """Not torch.nn.Linear: another class of that name, holding one."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(3, 3)

    def forward(self, x):
        return self.inner(x)


STEPS = 2

def make():
    """The model, its two optimizers (SGD with momentum over the first half of the
    parameters, Adam over the rest) and an input."""
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), Block(), Block(), Linear(),
                          nn.Linear(3, 2, bias=False))
    first = list(model[0].parameters()) + list(model[2].parameters())
    rest = [p for i in (3, 4, 5) for p in model[i].parameters()]
    sgd = torch.optim.SGD(first, lr=0.1, momentum=0.9)
    adam = torch.optim.Adam(rest, lr=1e-3)
    return model, (sgd, adam), torch.ones(2, 4)


def train(model, optimizers, x, steps=STEPS):
    for _ in range(steps):
        for optimizer in optimizers:
            optimizer.zero_grad()
        model(x).sum().backward()
        for optimizer in optimizers:
            optimizer.step()



@torch.profiler.record_function("loss")
def loss_of(model, x):
    return model(x).sum()


def train_with_regions(model, optimizers, x, steps=STEPS):
    loader = torch.utils.data.DataLoader([x] * steps, batch_size=None)
    for batch in loader:
        with torch.profiler.record_function("train_step"):
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss_of(model, batch).backward()
            for optimizer in optimizers:
                optimizer.step()


def fast_regions(x):
    """torch._C._profiler._RecordFunctionFast regions (a C type: no Python runs on
    entering them): by `with`, nested in and around a record_function region, and
    entered and left by explicit calls as torch.fx's generated code does."""
    with torch._C._profiler._RecordFunctionFast("fast_outer"):
        y = torch.ones_like(x)
        with torch.autograd.profiler.record_function("slow_middle"):
            with torch._C._profiler._RecordFunctionFast("fast_inner"):
                y = torch.ones_like(y)
    rf = torch._C._profiler._RecordFunctionFast("fast_explicit")
    rf.__enter__()
    y = torch.zeros_like(y)
    rf.__exit__(None, None, None)
    return y
