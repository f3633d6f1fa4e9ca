"""Names checked against literal expectations, independently of pytrace_cffi._names.

The oracle (reference_tracer.py) names functions with the tracer's own naming code, so
it can only confirm counts. Here a fixed workload's calls are compared with
names, callers and counts written out by hand: "(<first line>): <co_name>" for
Python code in this file (first line as CPython reports it, the decorator's
line for a decorated function), "<module or type>.<name>" for built-ins.
Line numbers below are literal: moving the workload breaks the test on purpose.
"""
import io
import math
import os
import sys
import time
from collections import Counter

import pytrace_cffi


class Box(list):
    pass


class Shape:
    def __init__(self, side):                          # line 25
        self.side = side

    def area(self):                                    # line 28
        return self.side * self.side

    @classmethod                                       # line 31
    def unit(cls):
        return cls(1)

    @staticmethod                                      # line 35
    def check(value):
        return isinstance(value, Shape)


def plain(x):                                          # line 40
    return x + 1


def outer():                                           # line 44
    def inner(y):                                      # line 45
        return y * 2
    return inner(3) + inner(4)


def gen(n):                                            # line 50
    for i in range(n):
        yield i


def workload():                                        # line 55
    out = []
    box = Box()
    for i in range(3):
        out.append(plain(i))
        box.append(i)
    shape = Shape.unit()
    shape.area()
    Shape.check(shape)
    outer()
    double = lambda v: v * 2  # noqa: E731             # line 65
    double(5)
    total = sum(gen(3))
    squares = [v * v for v in range(3)]                # line 68
    evens = list(v for v in range(4) if v % 2 == 0)    # line 69
    ordered = sorted(["bb", "a", "ccc"], key=lambda s: len(s))   # line 70
    config = {"k": 1}
    config.get("k")
    config.get("missing", 0)
    ", ".join(["x", "y"])
    time.perf_counter()
    math.sqrt(16.0)
    buf = io.StringIO()
    buf.write("text")
    buf.getvalue()
    dict.fromkeys("ab")
    int.from_bytes(b"\x01\x00", "little")
    list.append(out, 9)
    str.upper("a")
    push = box.append
    push(7)
    out.__len__()          # a slot wrapper: not a built-in function, not recorded
    getattr(shape, "side")
    max(1, 2)
    return len(out) + len(box) + total + len(squares) + len(evens) + len(ordered)


W = "(55): workload"

# (name, caller) -> calls. Types called (Box(), Shape via cls(1), range, list,
# io.StringIO) are no built-in function calls, as under sys.setprofile.
EXPECTED = {
    ("(40): plain", W): 3,
    # out.append x3, list.append(out, 9), and Box's (a list subclass): box.append x3,
    # push(7), named after the class defining the method, as cProfile names them
    ("list.append", W): 8,
    ("(31): unit", W): 1,
    ("(25): __init__", "(31): unit"): 1,
    ("(28): area", W): 1,
    ("(35): check", W): 1,
    ("builtins.isinstance", "(35): check"): 1,
    ("(44): outer", W): 1,
    ("(45): inner", "(44): outer"): 2,
    ("(65): <lambda>", W): 1,
    ("builtins.sum", W): 1,
    ("(50): gen", "builtins.sum"): 4,      # first entry + 3 resumes after a yield
    ("(69): <genexpr>", W): 3,             # entry, resume after 0, resume after 2
    ("builtins.sorted", W): 1,
    ("(70): <lambda>", "builtins.sorted"): 3,
    ("builtins.len", "(70): <lambda>"): 3,
    ("dict.get", W): 2,
    ("str.join", W): 1,
    ("time.perf_counter", W): 1,
    ("math.sqrt", W): 1,
    ("_io.StringIO.write", W): 1,
    ("_io.StringIO.getvalue", W): 1,
    ("dict.fromkeys", W): 1,
    ("int.from_bytes", W): 1,
    ("str.upper", W): 1,
    ("builtins.getattr", W): 1,
    ("builtins.max", W): 1,
    ("builtins.len", W): 5,
}
if sys.version_info < (3, 12):
    # PEP 709: from 3.12 a list comprehension runs inline in its function, no call.
    EXPECTED[("(68): <listcomp>", W)] = 1


def traced_workload(**options):
    with pytrace_cffi.trace(**options) as t:
        workload()
    calls = list(t.trace)
    (top,) = [c for c in calls if c.name.endswith(W)]
    # The file part, checked here against this file's own path; stripped below.
    path = top.name[:-len(W)]
    here = os.path.abspath(__file__)
    assert path.endswith("test_names.py") and (path == here or here.endswith(os.sep + path))
    by_id = {c.id: c for c in calls}

    def short(name):
        return name[len(path):] if name.startswith(path + "(") else name

    def under_workload(call):
        while call.parent is not None:
            call = by_id[call.parent]
            if call.id == top.id:
                return True
        return False
    return Counter((short(c.name), short(by_id[c.parent].name)) for c in calls
                   if under_workload(c)), path


def test_names_of_a_fixed_workload():
    counts, path = traced_workload()
    assert dict(counts) == EXPECTED


def test_without_c_calls_only_the_python_names_remain():
    counts, _ = traced_workload(c_calls=False)
    # Python calls whose caller was a built-in now hang from the workload.
    expected = Counter()
    for (name, caller), n in EXPECTED.items():
        if name.startswith("("):
            expected[(name, caller if caller.startswith("(") else W)] += n
    assert dict(counts) == dict(expected)


def test_the_literal_lines_are_this_file_s():
    # Guards the literals above, not the tracer: edits that move the workload
    # must update EXPECTED too.
    functions = [Shape.__init__, Shape.area, Shape.unit.__func__, Shape.check, plain, outer,
                 gen, workload]
    assert [f.__code__.co_firstlineno for f in functions] == [25, 28, 31, 35, 40, 44, 50, 55]


NESTED_PATH_PROGRAM = """
import json, sys
import pytrace_cffi
from pkg import mod
from pkg.sub import deep
with pytrace_cffi.trace(c_calls=False) as t:
    mod.f()
    deep.g()
print("NAMES " + json.dumps(sorted({c.name for c in t.trace if c.kind == "python"})))
"""


def test_nested_sys_path_entries_trim_the_longest_prefix(tmp_path):
    """PYTHONPATH=proj:proj/src (an entry inside another, in either order): a module
    under proj/src is named from proj/src, the longer prefix, as torch's profiler
    names it (its prefixes reverse-sorted). Names written out by hand."""
    import json
    import subprocess
    src = tmp_path / "proj" / "src"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (src / "pkg" / "sub" / "__init__.py").write_text("")
    (src / "pkg" / "sub" / "deep.py").write_text("\n\ndef g():\n    return 2\n")
    (tmp_path / "prog.py").write_text(NESTED_PATH_PROGRAM)
    package = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))
    for entries in (["proj", "proj/src"], ["proj/src", "proj"]):
        paths = [str(tmp_path / entry) for entry in entries]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths + [package]))
        proc = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        names = json.loads(proc.stdout.split("NAMES ", 1)[1])
        assert "pkg/mod.py(1): f" in names, (entries, names)
        assert "pkg/sub/deep.py(3): g" in names, (entries, names)
        assert not [n for n in names if n.startswith(("src/", "proj/"))], names


def test_names_trim_with_sys_path_as_it_was_at_stop(tmp_path, monkeypatch):
    """A trace names its keys when first read, after stop(): sys.path changed
    after stop() must not change how its file names are trimmed."""
    import pytrace_cffi
    (tmp_path / "late_trim_mod.py").write_text("def late_trim_f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import late_trim_mod
    pytrace_cffi.start()
    late_trim_mod.late_trim_f()
    trace = pytrace_cffi.stop()
    sys.path.remove(str(tmp_path))
    assert "late_trim_mod.py(1): late_trim_f" in {call.name for call in trace}


WRAPPING = '''\
def target(x):
    return x + 1


def make_wrapper():
    def target(x):
        return real(x) * 1
    return target


def make_other_wrapper():
    def target(x):
        return real(x) * 2
    return target
'''


def test_code_objects_sharing_file_line_and_name_stay_apart(tmp_path, monkeypatch):
    """A decorator that copies its function's file, line and name onto its
    wrapper's code (hypothesis's @given makes a new such wrapper per example)
    must not have the wrapper's calls summed into the function's row: equal code
    objects stay one function, different ones get told apart by qualified name
    (3.11+) and then by number, in the order of first call."""
    from pytrace_cffi.summary import summarize
    (tmp_path / "wrapmod.py").write_text(WRAPPING)
    monkeypatch.syspath_prepend(str(tmp_path))
    import wrapmod

    def impersonating(factory):
        wrapper = factory()
        wrapper.__code__ = wrapper.__code__.replace(co_firstlineno=1)   # a new code object
        return wrapper
    wrapmod.real = wrapmod.target
    pytrace_cffi.start(c_calls=False)
    for _ in range(3):          # three wrapper code objects, equal to each other
        impersonating(wrapmod.make_wrapper)(1)
    impersonating(wrapmod.make_other_wrapper)(1)
    trace = pytrace_cffi.stop()
    rows = {row.name: row.calls for row in summarize(trace, limit=0)
            if row.name.startswith("wrapmod.py(1)")}
    if sys.version_info >= (3, 11):
        assert rows == {"wrapmod.py(1): target [make_wrapper.<locals>.target]": 3,
                        "wrapmod.py(1): target [make_other_wrapper.<locals>.target]": 1,
                        "wrapmod.py(1): target": 4}
    else:
        assert rows == {"wrapmod.py(1): target": 3, "wrapmod.py(1): target #2": 4,
                        "wrapmod.py(1): target #3": 1}
