"""skip_imports / run --skip-imports: the calls made while a module is being
imported (its import-time code, the import machinery) are left out with their
callees; everything else the program calls is recorded. Each program runs in a
fresh interpreter, so that its modules are really imported while tracing."""
import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

import pytrace_cffi

# Imported while tracing: 50 calls of setup_step at import time, plus an import of
# its own (one more lazy_init per import-time call of nested_init).
HEAVY = textwrap.dedent("""
    import nested

    def setup_step(i):
        return nested.nested_init(i)

    TABLE = [setup_step(i) for i in range(50)]
""")
NESTED = textwrap.dedent("""
    def nested_init(i):
        return i + 1

    VALUES = [nested_init(i) for i in range(3)]
""")
# Imported inside a function (a lazy import), with 7 import-time calls.
LAZY = textwrap.dedent("""
    def lazy_init(i):
        return i + 1

    VALUES = [lazy_init(i) for i in range(7)]
""")
# and a package imported by `from pkg import sub` and importlib.import_module
PKG_SUB = textwrap.dedent("""
    def sub_init():
        return 1

    for _ in range(4):
        sub_init()
""")
PKG_OTHER = textwrap.dedent("""
    def other_init():
        return 2

    for _ in range(6):
        other_init()
""")

BODY = textwrap.dedent("""
    def work(i):
        return i

    def uses_lazy():
        import lazymod
        return lazymod.VALUES

    import heavymod
    from pkg import sub
    import importlib
    importlib.import_module("pkg.other")
    for i in range(5):
        work(i)
    uses_lazy()
    uses_lazy()                         # imported by now: no import, the call stays
    heavymod.setup_step(1)              # called after its import: recorded
""")

API_PROGRAM = textwrap.dedent("""
    import json, sys
    import pytrace_cffi
    pytrace_cffi.start(skip_imports=sys.argv[1] == "1", **json.loads(sys.argv[2]))
    exec(compile(open("body.py").read(), "body.py", "exec"))
    trace = pytrace_cffi.stop()
    print(json.dumps([c.name for c in trace]))
""")

IMPORT_TIME = {"setup_step": 50, "nested_init": 3 + 50, "lazy_init": 7, "sub_init": 4,
               "other_init": 6}
PROGRAM = {"work": 5, "uses_lazy": 2}


def write_program(tmp_path):
    (tmp_path / "heavymod.py").write_text(HEAVY)
    (tmp_path / "nested.py").write_text(NESTED)
    (tmp_path / "lazymod.py").write_text(LAZY)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub.py").write_text(PKG_SUB)
    (tmp_path / "pkg" / "other.py").write_text(PKG_OTHER)
    (tmp_path / "body.py").write_text(BODY)
    (tmp_path / "prog.py").write_text(API_PROGRAM)


def counts(names, wanted):
    short = [name.rsplit(": ", 1)[-1] for name in names]
    return {name: short.count(name) for name in wanted}


def run_api(tmp_path, skip, **options):
    proc = subprocess.run([sys.executable, "prog.py", "1" if skip else "0", json.dumps(options)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("options", [{}, {"c_calls": False}, {"exclude": ["*/importlib/*"]},
                                     {"max_depth": 50}])
def test_skip_imports_leaves_out_import_time_calls_only(tmp_path, options):
    write_program(tmp_path)
    wanted = dict(IMPORT_TIME, **PROGRAM)
    without = counts(run_api(tmp_path, False, **options), wanted)
    assert without == dict(wanted, setup_step=51, nested_init=54)
    names = run_api(tmp_path, True, **options)
    found = counts(names, wanted)
    assert found == dict({name: 0 for name in IMPORT_TIME}, setup_step=1, nested_init=1,
                         **PROGRAM)
    assert not [n for n in names if n.endswith(("_find_and_load", "exec_module"))]


def test_skip_imports_with_an_include_filter_that_leaves_out_importlib(tmp_path):
    write_program(tmp_path)
    include = [str(tmp_path / "*")]
    wanted = dict(IMPORT_TIME, **PROGRAM)
    assert counts(run_api(tmp_path, False, include=include), wanted)["lazy_init"] == 7
    found = counts(run_api(tmp_path, True, include=include), wanted)
    assert found == dict({name: 0 for name in IMPORT_TIME}, setup_step=1, nested_init=1,
                         **PROGRAM)


def test_run_skip_imports(tmp_path):
    write_program(tmp_path)
    (tmp_path / "main.py").write_text(BODY)
    wanted = dict(IMPORT_TIME, **PROGRAM)
    skipped = dict({name: 0 for name in IMPORT_TIME}, setup_step=1, nested_init=1, **PROGRAM)
    for flag, expected in (((), dict(wanted, setup_step=51, nested_init=54)),
                           (("--skip-imports",), skipped)):
        proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", *flag,
                               "-o", "t.json", "main.py"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        with open(tmp_path / "t.json", encoding="utf-8") as f:
            events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
        assert counts([e["name"] for e in events], wanted) == expected


def test_skip_imports_must_be_a_bool():
    with pytest.raises(TypeError, match="skip_imports"):
        pytrace_cffi.start(skip_imports="yes")
    assert not pytrace_cffi.is_tracing()


TORCH_PROGRAM = textwrap.dedent("""
    import json, sys
    import pytrace_cffi

    def after_import(torch):
        return torch.ones(2).sum()

    pytrace_cffi.start(skip_imports=sys.argv[1] == "1")
    import torch
    after_import(torch)
    trace = pytrace_cffi.stop()
    print(json.dumps([c.name for c in trace]))
""")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_skip_imports_leaves_out_import_torch(tmp_path):
    (tmp_path / "prog.py").write_text(TORCH_PROGRAM)
    found = {}
    for skip in ("0", "1"):
        proc = subprocess.run([sys.executable, "prog.py", skip], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        found[skip] = json.loads(proc.stdout)
    assert len(found["0"]) > 50_000          # import torch: hundreds of thousands of calls
    assert not [n for n in found["1"] if n.startswith("torch/") and "_find_and_load" in n]
    # what is left is the program's: after_import and what it calls
    assert counts(found["1"], ["after_import"]) == {"after_import": 1}
    assert len(found["1"]) < 100
