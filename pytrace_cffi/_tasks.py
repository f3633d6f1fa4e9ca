"""asyncio tasks on lanes of their own (start(log_async=True)).

An event loop runs a task one step at a time: a step is a callback the loop runs
through asyncio.Handle._run (Task.__step, or its wakeup after an awaited future),
which resumes the task's coroutine until it awaits again. While log_async traces,
Handle._run is replaced by run_task_step: a step of a task runs through the
task's TaskLane (c_src/pt_runtime.c), so the coroutine's frames and all they call
are recorded on a lane named "task <name>", shown as a thread of its own. The
loop's thread keeps the loop: Handle._run and Context.run, with a gap where each
step ran. Other callbacks are left as they were.

Loops that do not run callbacks through asyncio.Handle (uvloop's) are left as
they are: their steps stay on the loop's thread.
"""
import sys
import weakref

from ._hiding import hide_alone
from ._runtime import TaskLane

# A lane's first chunk of events is allocated at its first step; past this many
# tasks in one trace, a task's steps stay on its loop's thread (c_src/pt_runtime.c:
# PT_MAX_LANES is the same bound).
MAX_LANES = 1024


class TaskLanes:
    """One trace's lanes: a TaskLane per task (made at its first step), and the
    name of each lane's thread for the trace."""

    def __init__(self):
        # id(task) -> (weak reference to the task, its TaskLane); an entry goes
        # when its task does, so an id used again is a new task's
        self._lanes = {}
        self._named = []            # [lane, task name, weak reference to the task]

    def lane_for_step(self, handle):
        """The lane of the task whose step (or wakeup) handle runs, or None for
        another callback (or past MAX_LANES)."""
        task = getattr(handle._callback, "__self__", None)
        if not isinstance(task, _task_types or _find_task_types()):
            return None
        entry = self._lanes.get(id(task))
        if entry is not None and entry[0]() is task:
            return entry[1]
        if len(self._named) >= MAX_LANES:
            return None
        lane, key, lanes = TaskLane(), id(task), self._lanes
        task_ref = weakref.ref(task, lambda _: lanes.pop(key, None))
        lanes[key] = (task_ref, lane)
        self._named.append([lane, _task_name(task), task_ref])
        return lane

    def thread_names(self):
        """native_id -> "task <name>" for each lane that recorded (a task renamed
        after its first step by its name at the end, when it is still there)."""
        names = {}
        for lane, name, task_ref in self._named:
            task = task_ref()
            if task is not None:
                name = _task_name(task)
            if lane.native_id:
                names[lane.native_id] = f"task {name}"
        return names

def _task_name(task):
    get_name = getattr(task, "get_name", None)      # 3.8+; a stand-in task may lack it
    try:
        return str(get_name()) if get_name else repr(task)
    except Exception:       # noqa: BLE001 - a name is not worth failing a step for
        return "Task"


_lanes = None               # the running trace's TaskLanes while log_async traces
_original_run = None        # asyncio.events.Handle._run as we found it
_task_types = ()


def run_task_step(self):
    """Handle._run while log_async traces: a task's step through its lane. All it
    calls but Handle._run is ours (left out with what it calls), so the loop's
    thread shows what it showed before."""
    lanes = _lanes
    lane = lanes.lane_for_step(self) if lanes is not None else None
    if lane is None:
        return _original_run(self)
    callback, args = self._callback, self._args
    # The loop's Handle._run runs lane(callback, *args): the step on the lane,
    # every other line of it (the exception handling) as the loop wrote it.
    self._callback, self._args = lane, (callback, *args)
    try:
        return _original_run(self)
    finally:
        self._callback, self._args = callback, args


# Traces leave this wrapper's own frame out and keep what it calls.
hide_alone(run_task_step.__code__)


def watch_tasks():
    """Puts tasks on lanes from now on; returns the trace's TaskLanes. asyncio is
    not imported here: Handle._run is replaced once the program has loaded
    asyncio.events (the program's import of asyncio stays its own)."""
    global _lanes
    _lanes = TaskLanes()
    events = sys.modules.get("asyncio.events")
    if events is not None:
        _replace_run(events)
    elif _events_hook not in sys.meta_path:
        sys.meta_path.insert(0, _events_hook)
    return _lanes


def _replace_run(events):
    global _original_run
    handle = getattr(events, "Handle", None)
    run = getattr(handle, "__dict__", {}).get("_run")
    if run is not None and run is not run_task_step:
        _original_run = run
        handle._run = run_task_step


def _find_task_types():
    """asyncio's task types, once asyncio.tasks is loaded (after asyncio.events)."""
    global _task_types
    tasks = sys.modules.get("asyncio.tasks")
    if tasks is not None:
        _task_types = tuple({t for t in (getattr(tasks, "Task", None),
                                         getattr(tasks, "_PyTask", None))
                             if isinstance(t, type)})
    return _task_types


class _EventsHook:
    """On sys.meta_path until asyncio.events is loaded: finds it through the
    finders after it, and has its loader replace Handle._run once it has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "asyncio.events" or self not in sys.meta_path:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = getattr(spec.loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_replace(module):
            exec_module(module)
            if _lanes is not None:      # (still tracing)
                _replace_run(module)
        try:
            spec.loader.exec_module = exec_then_replace
        except AttributeError:
            pass
        return spec


_events_hook = _EventsHook()


def unwatch_tasks():
    """Gives Handle._run back (unless other code replaced it meanwhile)."""
    global _lanes
    _lanes = None
    if _events_hook in sys.meta_path:
        sys.meta_path.remove(_events_hook)
    handle = getattr(sys.modules.get("asyncio.events"), "Handle", None)
    if handle is not None and handle.__dict__.get("_run") is run_task_step:
        handle._run = _original_run
