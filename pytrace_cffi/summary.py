"""The terminal summary, under the name the README gives it:

    from pytrace_cffi import summary
    print(summary.format_summary(summary.summarize(summary.read_trace("trace.json"))))

The code lives in pytrace_cffi/render/summary.py (the summary) and
pytrace_cffi/reading.py (read_trace); these are its public names. Nothing in the
package imports this module.
"""
from .reading import read_trace
from .render.summary import SummaryRow, format_process_totals, format_summary, summarize

__all__ = ["SummaryRow", "format_process_totals", "format_summary", "read_trace",
           "summarize"]
