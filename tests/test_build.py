"""One abi3 build for 3.9-3.13, and a C core that stays off CPython internals."""
import os
import re
import sys

import pytrace_cffi
from pytrace_cffi import _core

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_module_is_the_abi3_build():
    assert _core.__file__.endswith(".abi3.so"), _core.__file__


def test_backend_matches_interpreter():
    with pytrace_cffi.trace() as t:
        pass
    expected = "sys.monitoring" if sys.version_info >= (3, 12) else "PyEval_SetProfile"
    assert t.trace.backend == expected


def test_c_sources_read_no_struct_internals():
    c_dir = os.path.join(REPO, "c_src")
    if not os.path.isdir(c_dir):
        import pytest
        pytest.skip("sources not present beside the tests")
    internals = re.compile(r"->\s*(f_code|f_back|f_lasti|f_lineno|m_ml|m_self|co_\w+|"
                           r"c_profilefunc|c_profileobj|frame|cframe|tp_name)\b|"
                           r"Py_BUILD_CORE|internal/pycore")
    # Only the sources: an in-place build (python build_ffi.py) leaves objects here.
    for name in sorted(n for n in os.listdir(c_dir) if n.endswith((".c", ".h"))):
        with open(os.path.join(c_dir, name), encoding="utf-8") as f:
            text = f.read()
        assert not internals.search(text), f"{name}: {internals.search(text).group(0)}"


def test_torch_is_never_imported_by_a_torch_free_program(run_python):
    code = (
        "import sys, pytrace_cffi\n"
        "def f(n): return n if n < 2 else f(n - 1) + f(n - 2)\n"
        "with pytrace_cffi.trace(record_params=True) as t: f(10)\n"
        "t.export_chrome_trace('t.json'); t.save('saved')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    assert run_python(code).stdout.strip() == "[]"
