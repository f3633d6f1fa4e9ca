"""Built-ins that share one C function keep their own names (issue 11, item 1).

pybind11 binds every function to one C dispatcher, each with its own record (or
capsule) as self; C modules may define several functions on one C function. The
names are checked literally here, on our traces and on the oracle's, since both
name built-ins through pytrace_cffi._names; tests/test_oracle.py compares the two
call for call on the same workload."""
import importlib
import io
import sys
import threading
import time
from collections import Counter

import pytest

import pytrace_cffi
from pytrace_cffi._names import builtin_function_name

from reference_tracer import ReferenceTracer


def _workload(shared_dispatch_ext):
    return importlib.import_module("workloads.shared_dispatch_calls")


def _c_counts(calls, parent_name):
    """Counter of the names of C calls made directly by parent_name."""
    return Counter(name for name, parent, kind in calls
                   if kind == "c" and parent is not None and parent.endswith(parent_name))


def _ours(trace):
    by_id = {call.id: call for call in trace}
    return [(call.name, by_id[call.parent].name if call.parent is not None else None,
             call.kind) for call in trace]


def _check(counts, expected):
    got = {name: counts[name] for name in expected}
    assert got == expected
    strays = {name: n for name, n in counts.items()
              if name not in expected and name != "list.append"}
    assert strays == {}, "C calls under unexpected names"


def test_shared_c_functions_get_their_own_names(shared_dispatch_ext):
    workload = _workload(shared_dispatch_ext)
    workload.run()
    with pytrace_cffi.trace() as traced:
        workload.run()
    _check(_c_counts(_ours(traced.trace), ": run"), workload.EXPECTED)


def test_oracle_names_them_the_same_way(shared_dispatch_ext):
    workload = _workload(shared_dispatch_ext)
    with ReferenceTracer() as reference:
        workload.run()
    calls = [(name, parent, kind) for _, name, parent, kind in reference.calls]
    _check(_c_counts(calls, ": run"), workload.EXPECTED)


def test_first_seen_order_does_not_matter(shared_dispatch_ext):
    """A key decided on the first call must not name later callables: the same
    callables in another order, in a fresh tracer, name the same."""
    sd = shared_dispatch_ext
    thing = sd.Thing()

    def run():
        for _ in range(2):
            sd.c2()
        sd.r3()
        thing.pong()
        sd.f3()
        sd.n2()
        for _ in range(3):
            sd.r1()
            sd.f1()
            sd.n1()
            sd.c1()
            thing.ping()

    with pytrace_cffi.trace() as traced:
        run()
    expected = {"shared_dispatch.c2": 2, "shared_dispatch.r3": 1, "shared_dispatch.Thing.pong": 1,
                "shared_dispatch.f3": 1, "n2": 1, "shared_dispatch.r1": 3,
                "shared_dispatch.f1": 3, "n1": 3, "shared_dispatch.c1": 3,
                "shared_dispatch.Thing.ping": 3}
    _check(_c_counts(_ours(traced.trace), ": run"), expected)


def test_builtin_names_of_common_callables(shared_dispatch_ext):
    """The rule in _names.builtin_owner, on callables of every kind."""
    sd = shared_dispatch_ext
    assert builtin_function_name(len) == "builtins.len"
    assert builtin_function_name(time.sleep) == "time.sleep"
    assert builtin_function_name([].append) == "list.append"

    class Stack(list):          # a subclass's method: the class defining it
        def extend(self, items):
            super().extend(items)
    import collections
    assert builtin_function_name(Stack().append) == "list.append"
    assert builtin_function_name(collections.OrderedDict().get) == "dict.get"
    assert builtin_function_name(collections.OrderedDict().move_to_end) == (
        "collections.OrderedDict.move_to_end")

    class Buffer(io.StringIO):  # defined by a private class (_io's): the type called on,
        pass                    # as torch.Tensor.sum rather than torch._C.TensorBase.sum
    assert builtin_function_name(Buffer().write).endswith("<locals>.Buffer.write")
    with pytrace_cffi.trace() as t:
        Stack().append(1)
        Buffer().write("x")
    names = {c.name for c in t.trace if c.kind == "c"}
    assert "list.append" in names and any(n.endswith("<locals>.Buffer.write") for n in names)
    assert builtin_function_name(io.StringIO().write) == "_io.StringIO.write"
    assert builtin_function_name(dict.fromkeys) == "dict.fromkeys"
    assert builtin_function_name(str.maketrans) == "maketrans"        # no self
    assert builtin_function_name(sd.f2) == "shared_dispatch.f2"
    assert builtin_function_name(sd.r2) == "shared_dispatch.r2"
    assert builtin_function_name(sd.c1) == "shared_dispatch.c1"
    # named like a method of PyCapsule, but not that method bound to its capsule
    assert builtin_function_name(sd.__sizeof__) == "shared_dispatch.__sizeof__"
    assert builtin_function_name(sd.Thing().ping) == "shared_dispatch.Thing.ping"

    class MyList(list):
        def append(self, item):                      # overrides the C method
            return super().append(item)
    # bound to an instance whose type overrides the name, without a module:
    # named after the type as before (and keyed by type, not per instance)
    bound = list.append.__get__(MyList(), MyList)
    assert builtin_function_name(bound).endswith("MyList.append")


def test_subclass_calling_the_overridden_c_method():
    """super().append on instances of a list subclass: one key per type (no
    instance kept alive per call), named as the oracle names it."""
    class Stack(list):
        def append(self, item):
            super().append(item)

    def run():
        for i in range(6):
            Stack().append(i)

    with ReferenceTracer() as reference:
        run()
    with pytrace_cffi.trace() as traced:
        run()
    ours = _c_counts(_ours(traced.trace), ": append")
    theirs = _c_counts([(n, p, k) for _, n, p, k in reference.calls], ": append")
    assert ours == theirs and sum(ours.values()) == 6
    assert [name for name in ours if name.endswith("Stack.append")]
    assert len([s for s in traced.trace.names if s.endswith("Stack.append")]) == 1


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="torch is installed for 3.11 only")
def test_torch_pybind11_functions_get_their_own_names():
    torch = pytest.importorskip("torch")
    C = torch._C
    assert type(C._is_tracing.__self__).__name__.startswith(("pybind11", "PyCapsule"))

    def run():
        for _ in range(3):
            C._get_tracing_state()
        for _ in range(5):
            C._is_tracing()
        for _ in range(7):
            C._get_graph_executor_optimize()
        for _ in range(2):
            C._get_mkldnn_enabled()            # a plain module function

    run()
    expected = {"torch._C._get_tracing_state": 3, "torch._C._is_tracing": 5,
                "torch._C._get_graph_executor_optimize": 7, "torch._C._get_mkldnn_enabled": 2}
    with pytrace_cffi.trace() as traced:
        run()
    _check(_c_counts(_ours(traced.trace), ": run"), expected)
    with ReferenceTracer() as reference:
        run()
    _check(_c_counts([(n, p, k) for _, n, p, k in reference.calls], ": run"), expected)


def test_module_type_method_bound_per_access_is_one_key(shared_dispatch_ext):
    """mod.__dir__ is bound anew on every access (3.9-3.11 pass that new object):
    keyed by C function and module, not one key per call object."""
    import types
    sd = shared_dispatch_ext
    other = types.ModuleType("other_module")

    def run():
        for _ in range(4):
            sd.__dir__()
        for _ in range(3):
            other.__dir__()

    with ReferenceTracer() as reference:
        run()
    with pytrace_cffi.trace() as traced:
        run()
    expected = {"shared_dispatch.__dir__": 4, "other_module.__dir__": 3}
    _check(_c_counts(_ours(traced.trace), ": run"), expected)
    _check(_c_counts([(n, p, k) for _, n, p, k in reference.calls], ": run"), expected)
    assert sorted(n for n in traced.trace.names if n.endswith(".__dir__")) == sorted(expected)


def test_pybind11_style_class_methods(shared_dispatch_ext):
    """widget.m1() calls a bound method whose function is a built-in (pybind11's
    instancemethod): recorded, under the built-in's own name, exactly where
    sys.setprofile reports it (tests/test_oracle.py compares call for call)."""
    from pytrace_cffi._tracer import USE_MONITORING, profile_unwraps_bound_builtins
    workload = importlib.import_module("workloads.shared_dispatch_methods")
    workload.run()
    with pytrace_cffi.trace() as traced:
        workload.run()
    with ReferenceTracer() as reference:
        workload.run()
    reported = (profile_unwraps_bound_builtins() if USE_MONITORING
                else sys.version_info >= (3, 11))      # 3.11's CALL unpacks the method
    expected = workload.EXPECTED if reported else {name: 0 for name in workload.EXPECTED}
    _check(_c_counts(_ours(traced.trace), ": run"), expected)
    _check(_c_counts([(n, p, k) for _, n, p, k in reference.calls], ": run"), expected)


def _lock_methods():
    lock = threading.Lock()
    lock.__enter__()                    # one C function with acquire up to 3.11
    lock.__exit__(None, None, None)     # ... and with release
    lock.acquire()
    lock.release()
    done = threading.Event()
    done.set()
    done.wait()                         # Condition.__enter__ calls the lock's __enter__


def test_methods_sharing_a_c_function_keep_their_names_as_setprofile_says():
    """A thread waiting in threading.Event.wait showed its innermost open call as
    _thread.lock.__enter__ where _thread.lock.acquire was meant: up to 3.11 both
    run one C function, and the key was that function's (and the type). Keyed by
    each method's definition now: the names are sys.setprofile's c_call's (the
    oracle's), call for call, whichever comes first."""
    with pytrace_cffi.trace() as traced:
        _lock_methods()
    with ReferenceTracer() as reference:
        _lock_methods()
    ours = [call.name for call in traced.trace if call.kind == "c"]
    oracle = [name for _, name, _, kind in reference.calls if kind == "c"]
    assert oracle[-1] == "sys.setprofile"           # the oracle's own stop
    oracle.pop()
    assert ours == oracle
    first = ours.index("_thread.lock.__enter__")      # (after allocate_lock up to 3.12)
    assert ours[first:first + 4] == ["_thread.lock.__enter__", "_thread.lock.__exit__",
                        "_thread.lock.acquire", "_thread.lock.release"]
