from torch.autograd.profiler import record_function  # noqa: F401  (as in torch)
