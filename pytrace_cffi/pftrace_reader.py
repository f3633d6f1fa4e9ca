"""The .pftrace reader under its earlier name (docs named it); the code lives in
pytrace_cffi/readers/pftrace.py. Nothing in the package imports this module."""
from .readers.pftrace import read_pftrace

__all__ = ["read_pftrace"]
