import os
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)          # so tests can import the workloads package

# Run from the repository (after `python build_ffi.py`), the tests import the source
# tree; the programs they start (`python -m pytrace_cffi ...`) must find it too.
# Under run_all.sh the installed wheel is imported and nothing changes here.
_ROOT = os.path.dirname(HERE)
if os.path.abspath(os.getcwd()) == _ROOT or _ROOT in map(os.path.abspath, sys.path[1:]):
    import importlib.util
    _spec = importlib.util.find_spec("pytrace_cffi")
    if _spec is not None and os.path.dirname(os.path.dirname(_spec.origin)) == _ROOT:
        _paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if _ROOT not in _paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([_ROOT] + _paths)


# Tests of bounded memory on traces of millions of calls (tens of seconds each)
# measure the C walk and the writers, which no interpreter changes: tests/run_all.sh
# runs them under one interpreter (PYTRACE_BIG_TESTS_ON=3.12) and skips them under
# the others; run directly, pytest runs them everywhere.
BIG_TESTS_ON = os.environ.get("PYTRACE_BIG_TESTS_ON")


def pytest_configure(config):
    config.addinivalue_line("markers", "big: a test of millions of calls (run_all.sh runs "
                                       "it under one interpreter: PYTRACE_BIG_TESTS_ON)")


def pytest_collection_modifyitems(config, items):
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not BIG_TESTS_ON or BIG_TESTS_ON == here:
        return
    skip = pytest.mark.skip(reason=f"a big test: run_all.sh runs it under {BIG_TESTS_ON}")
    for item in items:
        if "big" in item.keywords:
            item.add_marker(skip)


def _hooks_installed():
    found = []
    if sys.getprofile() is not None:
        found.append(f"sys.getprofile() = {sys.getprofile()!r}")
    hook = threading.getprofile() if hasattr(threading, "getprofile") else threading._profile_hook
    if hook is not None:
        found.append(f"threading profile hook = {hook!r}")
    if sys.version_info >= (3, 12):
        from pytrace_cffi._tracer import MONITORING_TOOL_IDS
        for tool_id in MONITORING_TOOL_IDS:        # ours, and the ones we may fall back on
            tool = sys.monitoring.get_tool(tool_id)
            if tool is not None:
                found.append(f"sys.monitoring tool id {tool_id} held by {tool!r}")
    return found


@pytest.fixture(autouse=True)
def no_hook_left_behind():
    """Every test must leave the interpreter without any profile hook."""
    assert not _hooks_installed(), "a hook was already installed before the test"
    yield
    import pytrace_cffi
    left = _hooks_installed()
    if pytrace_cffi._has_session():       # is_tracing() is False once a hook is lost
        pytrace_cffi.stop()
        left.append("pytrace_cffi was still tracing")
    assert not left, "hooks left installed: " + "; ".join(left)


@pytest.fixture
def run_python(tmp_path):
    """Runs code in a fresh interpreter (the one running the tests)."""
    def run(code, *args, cwd=None, check=True, timeout=120):
        proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd or tmp_path,
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\n"
                                 f"stderr:\n{proc.stderr}")
        return proc
    return run


@pytest.fixture(scope="session")
def shared_dispatch_ext(tmp_path_factory):
    """tests/ext/shared_dispatch.c compiled against the running interpreter and
    imported (its directory goes on sys.path, so workloads can import it)."""
    import shutil
    import sysconfig
    compiler = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if compiler is None:
        from helpers import missing_tool
        missing_tool("a C compiler (gcc or cc) to build tests/ext/shared_dispatch.c",
                     "Debian: apt-get install gcc")
    out_dir = tmp_path_factory.mktemp("ext")
    target = out_dir / ("shared_dispatch" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
                    "-I", sysconfig.get_paths()["include"],
                    os.path.join(HERE, "ext", "shared_dispatch.c"), "-o", str(target)],
                   check=True, capture_output=True, text=True)
    sys.path.insert(0, str(out_dir))
    import shared_dispatch
    return shared_dispatch
