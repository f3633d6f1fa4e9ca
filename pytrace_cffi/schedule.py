"""Tracing a few steps of a loop, as torch.profiler.schedule does.

    sched = pytrace_cffi.schedule(wait=1, warmup=1, active=2, repeat=1)
    with pytrace_cffi.trace(schedule=sched, on_trace_ready=handle) as t:
        for batch in loader:
            train(batch)
            t.step()

Each cycle waits `wait` steps untraced, runs `warmup` steps with the hooks
installed but nothing recorded, then traces `active` steps and hands the trace to
on_trace_ready(trace). `repeat` cycles (0: forever); `skip_first` steps first.
"""
import enum


class Action(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait=0, warmup=0, active=1, repeat=0, skip_first=0):
    """Returns step -> Action, the torch.profiler.schedule rules."""
    for name, value, least in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1),
                               ("repeat", repeat, 0), ("skip_first", skip_first, 0)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int")
        if value < least:
            raise ValueError(f"{name} must be at least {least}, not {value}")
    cycle = wait + warmup + active

    def action(step):
        if step < skip_first:
            return Action.NONE
        step -= skip_first
        if repeat and step >= repeat * cycle:
            return Action.NONE
        position = step % cycle
        if position < wait:
            return Action.NONE
        if position < wait + warmup:
            return Action.WARMUP
        return Action.RECORD if position < cycle - 1 else Action.RECORD_AND_SAVE
    return action


class ScheduledTracing:
    """Drives start/stop from a schedule as steps go by (used by trace())."""

    def __init__(self, schedule_fn, on_trace_ready, start, stop, options):
        if not callable(schedule_fn):
            raise TypeError("schedule must be callable: step -> Action (see schedule())")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError("on_trace_ready must be callable")
        self._schedule = schedule_fn
        self._on_trace_ready = on_trace_ready
        self._start, self._stop = start, stop
        self._options = options
        self.step_num = 0
        self._action = Action.NONE
        self.last_trace = None

    def begin(self):
        self._enter(self._schedule(0))

    def step(self):
        finished = self._action
        self.step_num += 1
        upcoming = self._schedule(self.step_num)
        # A window goes on through equal actions, and from RECORD into its last
        # (RECORD_AND_SAVE) step; every other change closes what was running.
        if (finished == upcoming and finished != Action.RECORD_AND_SAVE) or (
                finished == Action.RECORD and upcoming == Action.RECORD_AND_SAVE):
            self._action = upcoming
            return
        if finished != Action.NONE:
            self._leave(save=finished != Action.WARMUP)
        self._enter(upcoming)

    def end(self):
        if self._action != Action.NONE:
            self._leave(save=self._action != Action.WARMUP)
            self._action = Action.NONE

    def _enter(self, action):
        self._action = action
        if action == Action.WARMUP:
            self._start(**dict(self._options, noop=True))
        elif action in (Action.RECORD, Action.RECORD_AND_SAVE):
            self._start(**self._options)

    def _leave(self, save):
        result = self._stop()
        self._action = Action.NONE
        if save:
            self.last_trace = result
            if self._on_trace_ready is not None:
                self._on_trace_ready(result)
