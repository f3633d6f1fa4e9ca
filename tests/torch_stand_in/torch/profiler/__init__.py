from torch.autograd.profiler import record_function  # noqa: F401  (as in torch)
__all__ = ["record_function"]  # re-exports, as torch's
