"""The command line's parts (``python -m pytrace_cffi``: see __main__.py).

Only pytrace_cffi/__main__.py imports these modules: the library never imports
the command line.

- program.py  the program run: `run`'s argv split as python splits its own,
              the script or -m module found before tracing starts
- run.py      Run: `run`'s output from the program's start to OUT (its format
              decided once; the tracing windows: whole run, signal,
              delay/duration; each window's job when children are followed;
              the guard of the process's other ends; the writing)
- steps.py    run --schedule: the steps traced, the optimizer's steps counted
- trace_warnings.py  TraceWarnings printed as one `pytrace_cffi: ...` line each,
              options spelt as flags; every other warning as under python
"""
