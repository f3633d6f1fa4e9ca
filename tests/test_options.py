"""start()'s options, declared once in pytrace_cffi/options.py: run's flags give
start() the options their words promise, run without flags gives start()'s
defaults, and every option start() documents is declared (expected values are
literals here, not read from the declaration)."""
import inspect
import os
import re

import pytest

import pytrace_cffi
from pytrace_cffi import options
from pytrace_cffi.__main__ import _parser

# start()'s documented defaults (its docstring), for the options run offers
RUN_DEFAULTS = {"c_calls": True, "include": None, "exclude": None, "max_depth": None,
                "min_duration_us": None, "max_events": None, "skip_imports": False,
                "with_modules": True, "record_params": False, "trim_paths": True,
                "flight_recorder": None, "dumps_dir": None, "dump_format": None,
                "dump_window": None, "dump_signal": None, "watchdog": None, "log_exceptions": False, "log_args": None,
                "log_args_repr": False, "log_gc": False, "memory_interval_ms": None,
                "log_async": False, "log_launches": False}


def run_options(*flags):
    return options.from_arguments(_parser().parse_args(["run", *flags]))


def test_run_without_flags_gives_starts_defaults():
    assert run_options() == RUN_DEFAULTS


def test_each_flag_gives_what_it_says():
    given = run_options("--no-c-calls", "--include", "*/a/*", "--include", "*/b/*",
                        "--exclude", "*/c/*", "--max-depth", "3", "--min-duration", "1.5",
                        "--max-events", "10", "--skip-imports", "--no-modules",
                        "--record-params", "--no-trim-paths", "--flight-recorder", "30s",
                        "--dumps-dir", "d", "--dump-format", "pftrace", "--dump-signal", "USR2",
                        "--watchdog", "5",
                        "--log-exceptions", "--log-args", "*forward", "--log-args", "*/m/*",
                        "--log-args-repr", "--log-gc", "--memory-interval", "2.5",
                        "--log-async", "--log-launches")
    assert given == {"c_calls": False, "include": ["*/a/*", "*/b/*"], "exclude": ["*/c/*"],
                     "max_depth": 3, "min_duration_us": 1.5, "max_events": 10,
                     "skip_imports": True, "with_modules": False, "record_params": True,
                     "trim_paths": False, "flight_recorder": "30s", "dumps_dir": "d",
                     "dump_format": "pftrace", "dump_window": None, "dump_signal": "USR2",
                     "watchdog": "5", "log_exceptions": True, "log_args": ["*forward", "*/m/*"],
                     "log_args_repr": True, "log_gc": True, "memory_interval_ms": 2.5,
                     "log_async": True, "log_launches": True}
    assert run_options("--flight-recorder")["flight_recorder"] is True
    stacks = run_options("--flight-recorder", "--dump-format", "stacks", "--dump-window", "2.5")
    assert (stacks["dump_format"], stacks["dump_window"]) == ("stacks", 2.5)


def test_every_documented_option_is_declared_once():
    # cleandoc: 3.13 strips docstrings' indentation when compiling, earlier ones keep it
    documented = re.findall(r"^  (\w+)(?:, (\w+))? \(",
                            inspect.cleandoc(pytrace_cffi.start.__doc__), re.M)
    names = {name for pair in documented for name in pair if name}
    assert names == {"c_calls", "max_events", "output", "include", "exclude", "max_depth",
                     "skip_imports", "min_duration_us", "with_modules", "record_params",
                     "trim_paths", "noop", "follow_children", "flight_recorder", "dumps_dir",
                     "dump_format", "dump_window", "dump_signal", "watchdog", "log_exceptions",
                     "log_args",
                     "log_args_repr", "log_gc", "memory_interval_ms", "log_async",
                     "log_launches", "processes_dir"}
    assert sorted(options.NAMES) == sorted(names)        # once each


@pytest.mark.parametrize("given, error", [
    ({"noop": 1}, "noop must be a bool, not int"),
    ({"max_depth": 0}, "max_depth must be from 1 to 2147483647, not 0"),
    ({"max_depth": 2 ** 31}, "max_depth must be from 1 to 2147483647, not 2147483648"),
    ({"max_events": 2 ** 70}, "max_events must be from 1 to 4611686018427387904, not "
                              "1180591620717411303424"),
    ({"flight_recorder": "1M", "dumps_dir": os.path.join(os.__file__, "dumps")},
     f"the flight recorder cannot dump into {os.path.join(os.__file__, 'dumps')!r}: "
     f"{os.__file__!r} is not a directory"),
    ({"include": 3, "min_duration_us": -1}, "min_duration_us must be >= 0, not -1"),
    ({"output": "x"}, "output is where max_events spills events (a directory: give "
                      "max_events too), or the file written at stop(), named by its "
                      "format (out.pftrace, out.json, out.html, ...)"),
    ({"log_args_repr": True}, "log_args_repr goes with log_args"),
    ({"log_args": 3}, "log_args must be a glob string or a list of them"),
    ({"output": "/no/such/place/out.pftrace"},
     "cannot write '/no/such/place/out.pftrace': '/no/such/place' is not a directory"),
    ({"processes_dir": "procs"}, "processes_dir goes with output, the trace written at "
                                 "stop() from the per-process traces"),
    ({"processes_dir": 3, "output": "x.json"}, "processes_dir must be a path or True, not int"),
])
def test_start_refuses_bad_options_before_starting(given, error):
    with pytest.raises((TypeError, ValueError), match=f"^{re.escape(error)}$"):
        pytrace_cffi.start(**given)
    assert not pytrace_cffi.is_tracing()


def test_start_with_an_output_file_writes_it_at_stop_and_leaves_nothing_else(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)      # TMPDIR read again
    out = tmp_path / "out.json"
    pytrace_cffi.start(output=str(out))
    sorted([3, 1, 2])
    result = pytrace_cffi.stop()
    assert result.written and result.path == str(out)
    names = [c.name for c in result.load()]
    assert names.count("builtins.sorted") == 1
    assert os.listdir(tmp_path / "tmp") == []       # the job directory is gone


def test_start_keeps_per_process_traces_only_in_a_new_or_empty_directory(tmp_path):
    """processes_dir holding files (another job's traces would be joined with this
    one's), or a file: refused before anything starts, nothing written."""
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "proc-1").mkdir()
    (tmp_path / "a-file").write_text("")
    for given, problem in (("used", "it is not empty"), ("a-file", "it is a file")):
        with pytest.raises(ValueError, match=f"^cannot keep the per-process traces in "
                                             f"{re.escape(repr(str(tmp_path / given)))}: "
                                             f"{problem}"):
            pytrace_cffi.start(output=str(tmp_path / "out.json"),
                               processes_dir=str(tmp_path / given))
        assert not pytrace_cffi.is_tracing()
    assert sorted(os.listdir(tmp_path)) == ["a-file", "used"]


def test_processes_dir_refuses_an_output_of_no_format_before_starting(tmp_path):
    """With processes_dir, output may name a directory (one saved trace), but not
    a name of no format: refused by start(), not found out at stop()."""
    with pytest.raises(ValueError, match=f"^cannot write "
                                         f"{re.escape(repr(str(tmp_path / 'out.txt')))}: "
                                         "'.txt' is not a trace format"):
        pytrace_cffi.start(output=str(tmp_path / "out.txt"), processes_dir=True)
    assert not pytrace_cffi.is_tracing()
    assert os.listdir(tmp_path) == []
