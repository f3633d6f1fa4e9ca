"""What user code records on purpose: regions, instants, counters, and stacks.

`record_function`, `instant`, `counter`, `capture_stack` and `symbolize` are C
objects of the core (c_src/pt_annotate.c); this module only adds the decorator
form of record_function.
"""
import functools

from ._core import ffi, lib

_api = {}
if lib.pt_annotation_api(ffi.cast("void *", id(_api))) != lib.PT_OK:
    raise ImportError("pytrace_cffi: the C annotation API could not be created")

instant = _api["instant"]
counter = _api["counter"]
capture_stack = _api["capture_stack"]
symbolize = _api["symbolize"]
CapturedStack = _api["CapturedStack"]


class record_function(_api["RecordFunction"]):
    """record_function(name, args=None): a region recorded as a "user_annotation"
    slice named `name`, nested with the function slices around and inside it.

    Use it as a context manager (``with record_function("load"): ...``) or as a
    decorator (``@record_function("step")``). `args` is a dict of str, int,
    float or bool values, or objects with a ``.shape`` (recorded as its sizes); it
    becomes the slice's args. Bad types raise TypeError here, at construction.
    When not tracing, entering and leaving cost a couple of C calls.
    """

    __slots__ = ()

    def __call__(self, function):
        @functools.wraps(function)
        def record_function_wrapper(*args, **kwargs):
            with self:
                return function(*args, **kwargs)
        return record_function_wrapper


# Traces leave this wrapper's own frame out but keep what it calls.
WRAPPER_CODE = record_function.__call__.__code__.co_consts
WRAPPER_CODE = next(c for c in WRAPPER_CODE if getattr(c, "co_name", "") == "record_function_wrapper")
