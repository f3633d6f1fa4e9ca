"""schedule(): torch.profiler's wait/warmup/active/repeat over loop steps."""
import pytest

import pytrace_cffi
from pytrace_cffi import Action, schedule


def work(step):
    return len(str(step))


def steps_in(trace):
    return sorted({int(c.name.split(":")[0]) for c in trace if c.kind == "annotation"})


def test_schedule_actions_follow_torch_rules():
    s = schedule(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
    assert [s(i) for i in range(10)] == [
        Action.NONE,                                    # skip_first
        Action.NONE, Action.WARMUP, Action.RECORD, Action.RECORD_AND_SAVE,
        Action.NONE, Action.WARMUP, Action.RECORD, Action.RECORD_AND_SAVE,
        Action.NONE]                                    # repeat done


def test_scheduled_loop_hands_each_window_to_on_trace_ready():
    ready = []
    with pytrace_cffi.trace(schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                            on_trace_ready=ready.append) as t:
        for step in range(10):
            with pytrace_cffi.record_function(f"{step}: step"):
                work(step)
            t.step()
    assert [steps_in(trace) for trace in ready] == [[2, 3], [6, 7]]
    assert t.trace is ready[-1]
    assert not pytrace_cffi.is_tracing()


def test_window_open_at_exit_is_delivered():
    ready = []
    with pytrace_cffi.trace(schedule=schedule(active=5), on_trace_ready=ready.append) as t:
        for step in range(3):
            with pytrace_cffi.record_function(f"{step}: step"):
                work(step)
            t.step()
    assert [steps_in(trace) for trace in ready] == [[0, 1, 2]]


def test_bad_schedules():
    with pytest.raises(ValueError):
        schedule(active=0)
    with pytest.raises(TypeError):
        schedule(wait="1")
    with pytest.raises(TypeError):
        pytrace_cffi.trace(schedule=3)
    with pytest.raises(TypeError):
        pytrace_cffi.trace(on_trace_ready=print)
    with pytest.raises(pytrace_cffi.TraceError):
        with pytrace_cffi.trace() as t:
            t.step()
