"""What user code records on purpose: regions, instants, counters, and stacks.

`record_function`, `instant`, `counter`, `capture_stack` and `symbolize` are C
objects of the core (c_src/pt_annotate.c); this module supplies the Python
function record_function returns when used as a decorator.
"""
import functools

from ._core import ffi, lib

# The instant pytrace_cffi.step() leaves on its thread while tracing: where a step
# of the program's loop ends (render/steps.py reads the steps from these).
STEP_MARK = "pytrace_cffi.step"


def _decorate(region, function):
    """record_function as a decorator: the C type calls this with itself."""
    @functools.wraps(function)
    def record_function_wrapper(*args, **kwargs):
        with region:
            return function(*args, **kwargs)
    return record_function_wrapper


# Traces leave this wrapper's own frame out but keep what it calls.
WRAPPER_CODE = next(c for c in _decorate.__code__.co_consts
                    if getattr(c, "co_name", "") == "record_function_wrapper")

_api = {"decorate": _decorate}
if lib.pt_annotation_api(ffi.cast("void *", id(_api))) != lib.PT_OK:
    raise ImportError("pytrace_cffi: the C annotation API could not be created")

record_function = _api["record_function"]
RecordFunction = _api["RecordFunction"]
instant = _api["instant"]
counter = _api["counter"]
capture_stack = _api["capture_stack"]
symbolize = _api["symbolize"]
CapturedStack = _api["CapturedStack"]
