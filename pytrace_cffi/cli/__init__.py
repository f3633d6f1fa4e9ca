"""The command line's parts (``python -m pytrace_cffi``: see __main__.py).

Only pytrace_cffi/__main__.py imports these modules: the library never imports
the command line.

- program.py  the program run: `run`'s argv split as python splits its own,
              the script or -m module found before tracing starts
- windows.py  the tracing windows of `run` (whole run, signal, delay/duration),
              with children followed or not
- steps.py    run --schedule: the steps traced, the optimizer's steps counted
- trace_warnings.py  TraceWarnings printed as one `pytrace_cffi: ...` line each,
              options spelt as flags; every other warning as under python
"""
