"""pybind11-style class methods (tests/ext/shared_dispatch.c, Widget, built by the
shared_dispatch_ext fixture): widget.m1() calls a bound `method` object whose
function is a built-in sharing its C dispatcher with m2. Reported by
sys.setprofile as calls of the built-in on 3.11, 3.12.5+ and 3.13, not at all
on 3.9, 3.10 and 3.12.0-3.12.4; the tracer must record exactly that."""
import shared_dispatch as sd

# Each name a distinct count, wherever the interpreter reports them.
EXPECTED = {"shared_dispatch.m1": 4, "shared_dispatch.m2": 5}


def run():
    widget = sd.Widget()
    results = []
    for i in range(5):
        if i < 3:
            results.append(widget.m1() is widget)
        results.append(widget.m2() is widget)
    bound = widget.m1                  # the same, through a variable
    results.append(bound() is widget)
    return results
