"""torch.cuda's memory questions, as the stand-in answers them: CUDA is not
initialized until init(), and memory_allocated() reports what _allocate (the
stand-in's own, for tests: real torch allocates through tensors) put there."""
_initialized = False
_allocated = 0


def init():
    global _initialized
    _initialized = True


def is_initialized():
    return _initialized


def memory_allocated(device=None):
    return _allocated


def _allocate(nbytes):
    global _allocated
    init()
    _allocated += nbytes
