"""log_exceptions (c_src/pt_exceptions.c, pytrace_cffi/_exceptions.py): each
exception an instant on its thread. 3.12+ sees the exception (type, message,
where raised, where caught); 3.9-3.11's profile hook only the frames it left.
Lines are found by their marker comments in this file's text."""
import json
import os
import sys
import threading

import pytest

import pytrace_cffi

MONITORING = sys.version_info >= (3, 12)
HERE = os.path.basename(__file__)


def line_of(marker):
    with open(__file__, encoding="utf-8") as f:
        lines = [n for n, text in enumerate(f, 1) if text.rstrip().endswith("# " + marker)]
    assert len(lines) == 1, marker
    return lines[0]


def where(function, marker):
    return f"{HERE}({line_of(marker)}): {function}"


def inner(x):
    raise ValueError(f"bad {x}")  # raise-inner


def middle(x):
    with open(os.devnull):
        inner(x)  # call-inner


def outer(x):
    try:
        middle(x)  # call-middle
    except ValueError:  # handler-outer
        return "kept"


def reraising(x):
    try:
        inner(x)
    except ValueError:
        raise


def catches_reraised():
    try:
        reraising(2)  # call-reraising
    except ValueError:  # handler-reraised
        pass


class Cleanup:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        try:
            raise KeyError("cleanup")  # raise-cleanup
        except KeyError:  # handler-cleanup
            pass
        return False


def through_cleanup():
    with Cleanup():
        inner(3)


def catches_through_cleanup():
    try:
        through_cleanup()
    except ValueError:  # handler-through-cleanup
        pass


class Attributes:
    def __getattr__(self, name):
        raise AttributeError(name)  # raise-getattr


def exceptions_of(trace):
    return [(m.name, m.args) for m in trace.marks if m.name.startswith("exception")]


def traced(function, **options):
    pytrace_cffi.start(log_exceptions=True, c_calls=False, **options)
    try:
        function()
    finally:
        trace = pytrace_cffi.stop()
    return trace


@pytest.mark.skipif(not MONITORING, reason="3.12+: sys.monitoring sees the exception")
def test_one_instant_per_exception_with_where_it_was_raised_and_caught():
    trace = traced(lambda: outer(1))
    assert exceptions_of(trace) == [
        ("exception ValueError", {"message": "bad 1", "where": where("inner", "raise-inner"),
                                  "caught_in": where("outer", "handler-outer")})]
    (mark,) = trace.marks
    assert mark.kind == "i" and mark.thread == threading.get_native_id()


@pytest.mark.skipif(not MONITORING, reason="3.12+: sys.monitoring sees the exception")
def test_a_handler_that_reraises_did_not_catch_it():
    trace = traced(catches_reraised)
    assert exceptions_of(trace) == [
        ("exception ValueError", {"message": "bad 2", "where": where("inner", "raise-inner"),
                                  "caught_in": where("catches_reraised", "handler-reraised")})]


@pytest.mark.skipif(not MONITORING, reason="3.12+: sys.monitoring sees the exception")
def test_an_exception_caught_in_exit_while_another_propagates_leaves_it_one_instant():
    """A KeyError raised and caught inside __exit__ while a ValueError passes
    through the with block: two exceptions in flight at once on the thread. Each
    is one instant with its own handler (remembering one exception in flight made
    the ValueError a second instant further out, the first with no caught_in) (#31)."""
    trace = traced(catches_through_cleanup)
    assert exceptions_of(trace) == [
        ("exception ValueError", {"message": "bad 3", "where": where("inner", "raise-inner"),
                                  "caught_in": where("catches_through_cleanup",
                                                     "handler-through-cleanup")}),
        ("exception KeyError", {"message": "'cleanup'",
                                "where": where("__exit__", "raise-cleanup"),
                                "caught_in": where("__exit__", "handler-cleanup")})]


@pytest.mark.skipif(not MONITORING, reason="3.12+: sys.monitoring sees the exception")
def test_an_exception_swallowed_by_c_code_has_no_caught_in():
    trace = traced(lambda: hasattr(Attributes(), "missing"))
    assert exceptions_of(trace) == [
        ("exception AttributeError", {"message": "missing",
                                      "where": where("__getattr__",
                                                     "raise-getattr")})]


class BadMessage(Exception):
    def __str__(self):
        raise RuntimeError("no message")


class RecursiveMessage(Exception):
    def __str__(self):
        return str(self)


def raise_and_catch(exception):
    try:
        raise exception
    except Exception:
        pass


@pytest.mark.skipif(not MONITORING, reason="3.12+: sys.monitoring sees the exception")
@pytest.mark.parametrize("exception, message", [
    (BadMessage(), "<str() raised RuntimeError>"),
    (RecursiveMessage(), "<str() recursed>"),
    (ValueError("x" * 5000), "x" * 200 + "... (5000 characters)"),
])
def test_a_message_is_bounded_and_its_failures_said(exception, message):
    trace = traced(lambda: raise_and_catch(exception))
    ((name, args),) = exceptions_of(trace)
    assert name == f"exception {type(exception).__name__}"
    assert args["message"] == message


@pytest.mark.skipif(MONITORING, reason="3.9-3.11: the profile hook's view")
def test_profile_hook_records_where_an_exception_left_frames():
    trace = traced(lambda: outer(1))
    assert exceptions_of(trace) == [
        ("exception", {"where": where("inner", "raise-inner"), "frames_left": 2,
                       "reached": where("outer", "call-middle")})]


def divide_by_zero():
    try:
        divmod(1, 0)  # call-divmod
    except ZeroDivisionError:
        pass


@pytest.mark.skipif(MONITORING, reason="3.9-3.11: the profile hook's view")
def test_profile_hook_records_a_builtin_that_raised():
    trace = traced(divide_by_zero)
    where_ = where("divide_by_zero", "call-divmod")
    assert exceptions_of(trace) == [
        ("exception", {"where": where_, "raised_by": "builtins.divmod", "frames_left": 0,
                       "reached": where_})]


def test_exceptions_in_excluded_code_are_left_out_with_it():
    trace = traced(lambda: outer(1), exclude=[os.path.abspath(__file__)])
    assert exceptions_of(trace) == []


def test_off_records_none_and_registers_nothing():
    pytrace_cffi.start(c_calls=False)
    try:
        if MONITORING:
            events = sys.monitoring.get_events(pytrace_cffi._running.session._tool_id)
            assert events & sys.monitoring.events.RAISE == 0
            assert events & sys.monitoring.events.EXCEPTION_HANDLED == 0
        outer(1)
    finally:
        trace = pytrace_cffi.stop()
    assert trace.marks == []


def test_instants_reach_the_json(tmp_path):
    trace = traced(lambda: outer(3))
    path = tmp_path / "t.json"
    trace.export(str(path))
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    instants = [e for e in events if e.get("ph") == "i" and e["name"].startswith("exception")]
    assert len(instants) == 1
    assert instants[0]["args"]["where"] == where("inner", "raise-inner")


def test_an_exception_the_program_leaves_uncaught_names_no_handler_of_ours(tmp_path):
    """`run --log-exceptions` of a program that ends by an exception: run's
    launcher catches it to report it as python does, but it is no handler of the
    traced code: no caught_in (3.12+), no reached (3.9-3.11). They named
    pytrace_cffi/__main__.py's _cmd_run. The one the program catches keeps its."""
    import subprocess
    (tmp_path / "prog.py").write_text(
        "def fails():\n"
        "    raise ValueError('boom')\n"
        "def catches():\n"
        "    try:\n"
        "        fails()\n"
        "    except ValueError:\n"
        "        pass\n"
        "catches()\n"
        "fails()\n")
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--log-exceptions",
                           "-o", "out.json", "prog.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "ValueError: boom" in proc.stderr
    with open(tmp_path / "out.json") as f:
        events = json.load(f)["traceEvents"]
    caught, uncaught = [e["args"] for e in events
                        if e.get("ph") == "i" and e["name"].startswith("exception")]
    assert caught["where"] == uncaught["where"] == "prog.py(2): fails"
    handler = "caught_in" if sys.version_info >= (3, 12) else "reached"
    assert caught[handler] == ("prog.py(6): catches" if handler == "caught_in"
                               else "prog.py(5): catches")
    assert handler not in uncaught, uncaught
