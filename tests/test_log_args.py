"""log_args (c_src/pt_logargs.c, pytrace_cffi/_arglog.py): the calls of matching
functions carry their arguments and return value as safe summaries (their
slice's args in every export); other calls carry nothing. Expected summaries
are literals."""
import json
import sys
from collections import Counter

import pytest

import pytrace_cffi

MONITORING = sys.version_info >= (3, 12)
touched = Counter()          # the objects' own code that ran


class Touchy:
    """Every method a summary must not run unless asked."""

    def __repr__(self):
        touched["repr"] += 1
        raise ValueError("no repr")

    def __len__(self):
        touched["len"] += 1
        raise ValueError("no len")

    def __str__(self):
        touched["str"] += 1
        raise ValueError("no str")


class Recursive:
    def __repr__(self):
        return repr(self)


class Huge:
    def __repr__(self):
        return "h" * 10_000


class MyList(list):
    def __len__(self):
        touched["len"] += 1
        return 0


def logged(a, b=2, *rest, name="n", **options):
    return [a, b]


def not_logged(a):
    return a


def fails(x):
    raise KeyError(x)


def counts(n):
    for i in range(n):
        yield i


def traced(function, **options):
    pytrace_cffi.start(c_calls=False, **options)
    try:
        function()
    finally:
        trace = pytrace_cffi.stop()
    return trace


def args_by_function(trace):
    """{function name: [args of each of its calls]}: from the slice table."""
    found = {}
    for thread, slices, n in trace.thread_slices():
        for i in range(n):
            key = slices[i].key
            name = trace.names[key].rsplit(": ", 1)[-1]
            found.setdefault(name, []).append(trace.key_args.get(key, {}))
    return found


def test_matching_calls_carry_their_arguments_and_return_value():
    touched.clear()

    def work():
        logged(1, Touchy(), 3.5, "x" * 65, name=True, extra=MyList([1, 2]))
        not_logged(5)
    trace = traced(work, log_args="logged")
    calls = args_by_function(trace)
    assert calls["logged"] == [{
        "a": 1, "b": {"type": "test_log_args.Touchy"}, "name": True,
        "rest": {"type": "tuple", "len": 2},
        "options": {"type": "dict", "len": 1},
        "return": {"type": "list", "len": 2}}]
    assert calls["not_logged"] == [{}]
    assert touched == Counter()             # no __repr__, __len__, __str__ of theirs ran


def test_summaries_of_values():
    from pytrace_cffi._arglog import ArgLog
    summary = ArgLog().summary
    assert summary(None) is None and summary(False) is False
    assert summary(2 ** 53) == 2 ** 53
    assert summary(2 ** 53 + 1) == {"type": "int"}
    assert summary(float("nan")) == {"type": "float"}
    assert summary("s" * 64) == "s" * 64
    assert summary(b"xy") == {"type": "bytes", "len": 2}
    assert summary(frozenset({1})) == {"type": "frozenset", "len": 1}
    assert summary(MyList([1, 2, 3])) == {"type": "test_log_args.MyList"}


def test_reprs_when_asked_are_guarded_and_cut():
    touched.clear()

    def work():
        logged(Touchy(), Recursive(), Huge())
    trace = traced(work, log_args="logged", log_args_repr=True)
    (args,) = args_by_function(trace)["logged"]
    assert args["a"] == {"type": "test_log_args.Touchy", "repr": "<repr() raised ValueError>"}
    assert args["b"] == {"type": "test_log_args.Recursive", "repr": "<repr() recursed>"}
    assert args["rest"]["repr"] == "(" + "h" * 199 + "... (10003 characters)"
    assert args["return"] == {"type": "list", "len": 2,
                              "repr": "<repr() raised ValueError>"}
    assert touched == Counter({"repr": 2})


def test_an_exception_leaving_a_logged_call():
    def work():
        try:
            fails(7)
        except KeyError:
            pass
    trace = traced(work, log_args="fails")
    assert args_by_function(trace)["fails"] == [
        {"x": 7, "raise": "KeyError" if MONITORING else "exception"}]


def test_a_generator_records_its_arguments_once_and_each_value_it_hands_back():
    trace = traced(lambda: list(counts(2)), log_args="counts")
    assert args_by_function(trace)["counts"] == [
        {"n": 2, "return": 0}, {"return": 1}, {"return": None}]


def test_a_glob_matches_the_source_path_too():
    trace = traced(lambda: not_logged(4), log_args="*/test_log_args.py")
    assert args_by_function(trace)["not_logged"] == [{"a": 4, "return": 4}]


class Model:
    def forward(self, x):
        return x


@pytest.mark.skipif(sys.version_info < (3, 11), reason="co_qualname is 3.11+")
def test_a_glob_matches_the_qualified_name():
    trace = traced(lambda: Model().forward(1), log_args="Model.forward")
    assert args_by_function(trace)["forward"] == [
        {"self": {"type": "test_log_args.Model"}, "x": 1, "return": 1}]


def test_the_summarizers_own_calls_are_not_recorded():
    def work():
        for i in range(3):
            logged(i, Touchy())
    plain = traced(work)
    with_args = traced(work, log_args="logged", log_args_repr=True)

    def counts_of(trace):
        return Counter(name for name, calls in args_by_function(trace).items()
                       for _ in calls)
    assert counts_of(with_args) == counts_of(plain)
    assert not any("_arglog" in name or "reprlib" in name
                   for name in args_by_function(with_args))


def fake_array_type(module, name):
    """A duck-typed tensor or array: its type's module says whose it is."""
    return type(name, (), {"__module__": module, "shape": (2, 3), "dtype": "float32",
                           "device": "cpu", "__len__": lambda self: touched.update(["len"])})


def test_tensors_and_arrays_by_duck_typing():
    from pytrace_cffi._arglog import ArgLog
    summary = ArgLog().summary
    touched.clear()
    assert summary(fake_array_type("torch", "Tensor")()) == {
        "type": "torch.Tensor", "shape": [2, 3], "dtype": "float32", "device": "cpu"}
    assert summary(fake_array_type("numpy", "ndarray")()) == {
        "type": "numpy.ndarray", "shape": [2, 3], "dtype": "float32"}
    assert summary(fake_array_type("mylib", "Tensor")()) == {"type": "mylib.Tensor"}
    assert touched == Counter()


def test_real_torch_tensors():
    torch = pytest.importorskip("torch", reason="torch 2.13 CPU is in the 3.11 venv only")

    def scale(t, factor):
        return t * factor
    pytrace_cffi.start(c_calls=False, log_args="*scale")
    try:
        scale(torch.ones(2, 3, dtype=torch.float16), 2)
    finally:
        trace = pytrace_cffi.stop()
    (args,) = args_by_function(trace)["scale"]
    assert args == {
        "t": {"type": "torch.Tensor", "shape": [2, 3], "dtype": "torch.float16",
              "device": "cpu"},
        "factor": 2,
        "return": {"type": "torch.Tensor", "shape": [2, 3], "dtype": "torch.float16",
                   "device": "cpu"}}


def test_args_reach_the_json_and_the_pftrace(tmp_path):
    from test_perfetto import decode
    trace = traced(lambda: logged(1), log_args="logged")
    expected = {"a": 1, "b": 2, "name": "n", "rest": {"type": "tuple", "len": 0},
                "options": {"type": "dict", "len": 0}, "return": {"type": "list", "len": 2}}
    trace.export(str(tmp_path / "t.json"))
    with open(tmp_path / "t.json") as f:
        events = json.load(f)["traceEvents"]
    (call,) = [e for e in events if e.get("ph") == "X" and e["name"].endswith(": logged")]
    assert {k: v for k, v in call["args"].items() if not k.startswith("Python")} == expected
    trace.export(str(tmp_path / "t.pftrace"))
    (slice_,) = [s for s in decode(str(tmp_path / "t.pftrace"))["slices"]
                 if s["name"].endswith(": logged")]
    assert {k: v for k, v in slice_["args"].items() if not k.startswith("Python")} == expected


PROGRAM = """
def work(n):
    try:
        raise ValueError("program")
    except ValueError:
        pass
    return n

work(3)
"""


@pytest.mark.parametrize("output", ["out.json", "out.pftrace"])
def test_run_logs_arguments_and_exceptions(tmp_path, output):
    import os
    import subprocess
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--log-args", "work",
                    "--log-exceptions", "-o", str(tmp_path / output), str(script)],
                   check=True, env=env, cwd=tmp_path, capture_output=True)
    if output.endswith(".json"):
        with open(tmp_path / output) as f:
            events = json.load(f)["traceEvents"]
        (call,) = [e for e in events if e.get("ph") == "X" and e["name"].endswith(": work")]
        instants = [e for e in events if e.get("ph") == "i"
                    and e["name"].startswith("exception")]
        args = call["args"]
    else:
        from test_perfetto import decode
        decoded = decode(str(tmp_path / output))
        (call,) = [s for s in decoded["slices"] if s["name"].endswith(": work")]
        instants = [i for i in decoded["instants"] if i["name"].startswith("exception")]
        args = call["args"]
    assert {k: v for k, v in args.items() if k in ("n", "return")} == {"n": 3, "return": 3}
    expected = ([("exception ValueError", "program.py(4): work")] if MONITORING
                else [])       # 3.9-3.11: caught in the frame that raised it, unseen
    assert [(i["name"], i["args"]["where"]) for i in instants] == expected
