"""One abi3 build for 3.9-3.15 (none for free-threaded builds), and a C core that stays off CPython internals."""
import os
import pathlib
import re
import sys

import pytest

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
    # One exception: pt_cpython.h's pt_cfunction_def reads a built-in function's
    # PyMethodDef (m_ml, right after the object header on 3.9-3.15), the only thing
    # that tells apart two methods sharing one C function (_thread.lock's acquire
    # and __enter__ up to 3.11) without a call or an allocation per event.
    allowed = {"pt_cpython.h": "return ((const pt_cfunction_head *)(const void *)function)->m_ml;"}
    # Only the sources: an in-place build (python build_ffi.py) leaves objects here.
    for name in sorted(n for n in os.listdir(c_dir) if n.endswith((".c", ".h"))):
        with open(os.path.join(c_dir, name), encoding="utf-8") as f:
            text = f.read()
        if name in allowed:
            assert text.count(allowed[name]) == 1, name
            text = text.replace(allowed[name], "")
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


def test_a_source_tree_without_its_core_says_what_to_do_in_one_line(tmp_path):
    """`python -m pytrace_cffi` from a source tree whose core is not built (the
    tree shadows an installed pytrace_cffi): one line naming what to do, no
    traceback."""
    import shutil
    import subprocess
    package = os.path.dirname(os.path.abspath(pytrace_cffi.__file__))
    shutil.copytree(package, tmp_path / "pytrace_cffi",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    (tmp_path / "build_ffi.py").write_text("# the build script of a source tree\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "prog.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert "Traceback" not in line
    assert "C core is not built in the source tree" in line
    assert "run from another directory" in line and "python build_ffi.py" in line
    proc = subprocess.run([sys.executable, "-c", "import pytrace_cffi"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].startswith("ImportError: pytrace_cffi's C core is not")


def test_the_c_core_compiles_against_this_interpreters_headers(tmp_path):
    """pip install . and pip install -e . compile the core with the installing
    interpreter's headers, while the suite's wheel is built once, by another:
    every unit must compile against these headers under the limited API, as
    build_ffi.py compiles it (3.9 declares PyMem_Calloc outside the limited API:
    the build failed there)."""
    import importlib.util
    import shutil
    import subprocess
    import sysconfig
    import pytest
    compiler = shutil.which("gcc") or shutil.which("cc")
    include = sysconfig.get_paths()["include"]
    build = os.path.join(REPO, "build_ffi.py")
    if not (compiler and os.path.exists(os.path.join(include, "Python.h"))
            and os.path.exists(build)):
        pytest.skip("needs a C compiler, Python.h and the sources")
    spec = importlib.util.spec_from_file_location("build_ffi_settings", build)
    settings = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(settings)
    flags = ["-fsyntax-only", "-std=gnu11", "-Werror=implicit-function-declaration",
             "-Werror=int-conversion", f"-DPy_LIMITED_API={settings.LIMITED_API}",
             "-I", include, "-I", settings.C_SRC]
    # all at once: the header parsing of each unit is most of the time
    running = {name: subprocess.Popen([compiler, *flags, os.path.join(settings.C_SRC, name)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name in settings.SOURCES}
    for name, proc in running.items():
        _, errors = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}:\n{errors}"


def test_the_package_ships_every_module_of_the_source_tree():
    """Every subpackage is listed in pyproject.toml's packages, and an installed
    pytrace_cffi holds every module of the source tree (cli/ and follow/ were
    missing from the wheel once: `run` failed to import)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    source = root / "pytrace_cffi"
    text = (root / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(pytrace_cffi(?:\.\w+)*)"',
                            re.search(r"^packages = \[(.*?)\]", text, re.M | re.S).group(1)))
    packages = {".".join(p.parent.relative_to(root).parts)
                for p in source.rglob("__init__.py") if "__pycache__" not in p.parts}
    assert packages == listed, (packages, listed)
    installed = pathlib.Path(pytrace_cffi.__file__).resolve().parent
    missing = [str(p.relative_to(source)) for p in source.rglob("*.py")
               if "__pycache__" not in p.parts and not (installed / p.relative_to(source)).exists()]
    assert not missing, f"not in the installed package {installed}: {missing}"


FREE_THREADED = {
    # a free-threaded build says so in sys.abiflags ("t", 3.13t/3.14t on POSIX)
    "abiflags t": "import sys\nsys.abiflags = 't'\n",
    # Windows before 3.14 has no sys.abiflags: sysconfig's Py_GIL_DISABLED says it
    "Py_GIL_DISABLED": ("import sys, sysconfig\ndel sys.abiflags\n"
                        "sysconfig.get_config_var = lambda name: 1 if name == "
                        "'Py_GIL_DISABLED' else None\n"),
}


@pytest.mark.parametrize("simulated", sorted(FREE_THREADED))
def test_a_free_threaded_python_gets_an_import_error_naming_the_reason(run_python, simulated):
    """No free-threaded interpreter can be installed here: the check is fed what
    one reports. The import fails with one ImportError that says why (abi3 does
    not load there; cffi's free-threading needs a non-limited-API build) and
    what to use instead; a default build with the same patching imports fine."""
    if simulated == "Py_GIL_DISABLED" and sys.version_info < (3, 13):
        pytest.skip("free-threaded builds exist from 3.13 on: older ones never ask sysconfig")
    proc = run_python(FREE_THREADED[simulated] + "import pytrace_cffi\n", check=False)
    assert proc.returncode == 1
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("ImportError: pytrace_cffi does not run on a free-threaded "
                           "Python build"), proc.stderr
    assert "abi3" in last and "cffi supports free-threading only in a non-limited-API" \
        in last and "Use the default (GIL) build" in last
    assert run_python("import sys\nsys.abiflags = ''\nimport pytrace_cffi\n"
                      "print('imported')\n").stdout == "imported\n"


def test_this_default_build_is_not_taken_for_a_free_threaded_one():
    import sysconfig
    assert pytrace_cffi._free_threaded_build() == bool(
        sysconfig.get_config_var("Py_GIL_DISABLED"))
