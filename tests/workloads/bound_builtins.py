"""Bound `method` objects whose function is a built-in, called as programs do:
types.MethodType(len, obj)(), such a method stored as a class attribute (as
pybind11 stores every class method, see shared_dispatch_methods), a bound
built-in bound once more. What sys.setprofile reports of them depends on the
interpreter (3.9, 3.10 and 3.12.0-3.12.4: no call; 3.11, 3.12.5+ and 3.13: a call
of the built-in), and the tracer must record exactly that."""
import types


class Box:
    # A method object in the class dict is no descriptor: box.size is this very
    # object, a bound method of len.
    size = types.MethodType(len, (1, 2, 3))
    # CPython's own test of gh-122029: a classmethod of a built-in
    describe = classmethod(repr)


def call_it(method, *args):
    return method(*args)


def run():
    results = []
    box = Box()
    sized = types.MethodType(len, "abcd")        # len("abcd")
    larger = types.MethodType(max, 3)            # max(3, x)
    appender = types.MethodType([].append, box)  # a bound built-in, bound again
    for i in range(5):
        results.append(sized())
        results.append(larger(i))
        results.append(box.size())
    for i in range(3):
        results.append(types.MethodType(len, (0,) * i)())
        appender()
        results.append(call_it(sized))
    for i in range(2):
        results.append(Box.describe())
        try:
            types.MethodType(len, i)()           # raises: its return is C_RAISE
        except TypeError:
            results.append("raised")
    # a method descriptor inside is no PyCFunction: a call of list.append on 3.11
    # (its CALL unpacks the method first), only an unmatched return on 3.12+
    items = []
    pusher = types.MethodType(list.append, items)
    pusher(7)
    results.append(len(items))
    return results
