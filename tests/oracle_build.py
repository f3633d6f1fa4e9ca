"""The tests' C oracle (tests/c_oracle/pt_replay.c) as a module of its own, built
here and never shipped: the package's wheel neither contains nor compiles it.

oracle_lib() returns that module's lib. Its cdef is tests/c_oracle/pt_replay.h;
its types (pt_event, pt_slice) and constants are the package's own, included from
build_ffi.py's interface (cffi's ffi.include), so the tables it fills are the ones
the package's functions take. It compiles one unit against the package's public
headers (c_src/ of the checkout these tests are in: under tests/run_all.sh the
package is the installed wheel, built from that same checkout).

Built once per source state (a hash of the oracle, the package's headers and
this file) into a cache directory shared by every interpreter (the module is abi3) and
by pytest-xdist's workers: the first takes a lock and builds, the others wait for
it and load the result. The build is cffi's C generation and one C compiler run
(about a second), with no setuptools (3.12+ venvs have none).
"""
import fcntl
import hashlib
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

import cffi

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ORACLE_DIR = os.path.join(HERE, "c_oracle")
C_SRC = os.path.join(ROOT, "c_src")
MODULE = "_pt_oracle"
SOURCES = [os.path.join(ORACLE_DIR, "pt_replay.c")]
DECLARATIONS = os.path.join(ORACLE_DIR, "pt_replay.h")
# Free-threaded interpreters have no stable ABI: they get a build of their own.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

_loaded = None


def _build_ffi():
    """build_ffi.py of the checkout (the package's interface), loaded by path."""
    spec = importlib.util.spec_from_file_location("_pt_build_ffi", os.path.join(ROOT, "build_ffi.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs():
    """What the module is made from: the oracle, this file, and the package's
    interface (build_ffi.py and every header under c_src/, which it includes)."""
    headers = [os.path.join(C_SRC, name) for name in os.listdir(C_SRC) if name.endswith(".h")]
    return SOURCES + [DECLARATIONS, os.path.abspath(__file__), os.path.join(ROOT, "build_ffi.py")] + headers


def _flags_from_environment():
    """CFLAGS and LDFLAGS, as the package's build takes them (tests/run_asan.sh
    sanitizes both)."""
    return os.environ.get("CFLAGS", "").split() + os.environ.get("LDFLAGS", "").split()


def _cache_key(paths):
    digest = hashlib.sha256(cffi.__version__.encode())
    digest.update(" ".join(_flags_from_environment()).encode())
    if FREE_THREADED:
        digest.update(sys.version.encode())
    for path in sorted(paths):
        with open(path, "rb") as f:
            digest.update(path.encode() + b"\0" + f.read())
    return digest.hexdigest()[:20]


def _cache_dir():
    base = os.environ.get("PYTRACE_ORACLE_CACHE") or os.path.join(
        tempfile.gettempdir(), f"pytrace_cffi_oracle-{os.getuid()}")
    os.makedirs(base, exist_ok=True)
    return base


def _compile(build_ffi, target):
    """Writes the module to target (through a temporary name: loaders never see
    half a file)."""
    builder = cffi.FFI()
    builder.include(build_ffi.ffibuilder)
    with open(DECLARATIONS, encoding="utf-8") as f:
        builder.cdef(f.read())
    limited = [] if FREE_THREADED else [f"-DPy_LIMITED_API={build_ffi.LIMITED_API}"]
    # the package's interface headers first: the included types are checked against them
    includes = "".join(f'#include "{name}"\n' for name in build_ffi.INTERFACE + ["pt_replay.h"])
    builder.set_source(MODULE, includes,
                       py_limited_api=not FREE_THREADED)
    work = tempfile.mkdtemp(prefix="build-", dir=os.path.dirname(target))
    try:
        generated = os.path.join(work, MODULE + ".c")
        builder.emit_c_code(generated)
        compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
        partial = os.path.join(work, os.path.basename(target))
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-std=gnu11", "-fvisibility=hidden",
                        "-I", sysconfig.get_paths()["include"], "-I", C_SRC, "-I", ORACLE_DIR,
                        *limited, *_flags_from_environment(), generated, *SOURCES,
                        "-o", partial],
                       check=True, capture_output=True, text=True)
        os.replace(partial, target)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"building the tests' C oracle failed:\n{e.stderr}") from None
    finally:
        for name in os.listdir(work):
            os.unlink(os.path.join(work, name))
        os.rmdir(work)


STALE_S = 24 * 3600       # a build of other sources this old is no one's any more


def _prune(cache, key):
    """Removes the builds (and their locks) of other source states, older than
    STALE_S, that the cache would otherwise keep for ever; a younger one may be
    another checkout's, in use (a loaded module survives its file anyway)."""
    now = time.time()
    for name in os.listdir(cache):
        path = os.path.join(cache, name)
        ours = name.startswith(MODULE + "-") or name.endswith(".lock")
        if key in name or not ours:
            continue
        try:
            if now - os.stat(path).st_mtime > STALE_S:
                os.unlink(path)
        except OSError:
            pass                # (taken by another pruner meanwhile, or not a file)


def oracle_lib():
    """The C oracle's lib, built first when its sources changed."""
    global _loaded
    if _loaded is None:
        cache = _cache_dir()
        key = _cache_key(_inputs())
        suffix = ".so" if FREE_THREADED else ".abi3.so"
        target = os.path.join(cache, f"{MODULE}-{key}{suffix}")
        if not os.path.exists(target):
            with open(os.path.join(cache, f"{key}.lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)        # one builder; the others wait
                if not os.path.exists(target):
                    _compile(_build_ffi(), target)
                    _prune(cache, key)
        spec = importlib.util.spec_from_file_location(MODULE, target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded = module.lib
    return _loaded
