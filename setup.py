"""setuptools needs this file only for cffi_modules; metadata lives in pyproject.toml."""
from setuptools import setup

setup(
    cffi_modules=["build_ffi.py:ffibuilder"],
    # One build for every CPython from 3.9: the C core uses the limited API only.
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
