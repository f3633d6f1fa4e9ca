"""cffi build script for pytrace_cffi's C core (API mode, out of line).

The C lives in real files under c_src/; this script lists them and hands cffi
the plain-C interface declared in c_src/pt_record.h, pt_read.h and pt_export.h
(recording, reading, exporting), and compiles the vendored libdeflate with it
(c_src/libdeflate/). Run by setuptools through ``cffi_modules`` (see setup.py),
or directly: ``python build_ffi.py``.
"""
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
C_SRC = os.path.join(HERE, "c_src")

# The oldest CPython we load on; the module is tagged abi3 for it.
LIMITED_API = "0x03090000"

# The cdef is the interface headers themselves, in order, less their include
# guards and #includes (cffi's parser takes the declarations, comments and
# integer #defines).
INTERFACE = ["pt_record.h", "pt_read.h", "pt_export.h"]
_GUARDS = "|".join(name.replace(".", "_").upper() for name in INTERFACE)
_PREPROCESSOR_ONLY = re.compile(rf"\s*#\s*(ifndef|endif|include)\b|\s*#define ({_GUARDS})\b")


def plain_c_interface(header_path):
    with open(header_path, encoding="utf-8") as f:
        return "\n".join(line for line in f.read().splitlines()
                         if not _PREPROCESSOR_ONLY.match(line))


SOURCES = ["pt_core.c", "pt_buffers.c", "pt_keys.c", "pt_clock.c", "pt_signals.c",
           "pt_hooks.c", "pt_tables.c", "pt_export.c", "pt_perfetto.c",
           "pt_annotate.c", "pt_reduce.c", "pt_summary.c", "pt_jsonlines.c",
           "pt_walk.c", "pt_pfread.c", "pt_pfnames.c", "pt_own.c", "pt_merge.c",
           "pt_deflate.c",
           "pt_live.c", "pt_flight.c", "pt_flight_files.c", "pt_flight_lines.c",
           "pt_exceptions.c", "pt_logargs.c", "pt_runtime.c"]
# libdeflate's zlib-format compression (c_src/libdeflate/README.md: what is kept),
# compiled as units of the same module for pt_deflate.c; its API stays hidden.
LIBDEFLATE = ["libdeflate/lib/" + name for name in
              ("deflate_compress.c", "zlib_compress.c", "adler32.c", "utils.c",
               "x86/cpu_features.c", "arm/cpu_features.c")]
SOURCES += LIBDEFLATE

ffibuilder = FFI()
ffibuilder.cdef("\n".join(plain_c_interface(os.path.join(C_SRC, name)) for name in INTERFACE))
ffibuilder.set_source(
    "pytrace_cffi._core",
    "".join(f'#include "{name}"\n' for name in INTERFACE),
    # Relative to this file: setuptools runs from here and wants relative paths.
    sources=[os.path.join("c_src", name) for name in SOURCES],
    include_dirs=[C_SRC],
    define_macros=[("Py_LIMITED_API", LIMITED_API)],
    # -fvisibility=hidden: only PyInit__core is exported (PyMODINIT_FUNC marks it),
    # so calls between our own C units are direct rather than through the PLT.
    extra_compile_args=["-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall",
                        "-Werror=implicit-function-declaration", "-Werror=int-conversion"],
    py_limited_api=True,
)

if __name__ == "__main__":
    # In-place build for development: pytrace_cffi/_core.abi3.so beside the package.
    os.chdir(HERE)
    ffibuilder.compile(tmpdir=HERE, verbose=False)
