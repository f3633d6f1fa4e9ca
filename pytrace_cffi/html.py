"""The self-contained HTML page, under the name the README gives it:

    from pytrace_cffi import html
    html.write_html(trace, "trace.html")

The code lives in pytrace_cffi/render/html.py; this is its public name.
"""
from .render.html import CALL_BUDGET, write_html

__all__ = ["CALL_BUDGET", "write_html"]
