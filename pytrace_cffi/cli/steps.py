"""run --schedule: the steps a schedule traces, as torch.profiler.schedule does.

A step ends at each pytrace_cffi.step() the program calls, and at the end of
each training step of torch's optimizers (OptimizerSteps); ScheduledWindows
opens and closes the run's windows (run.Run) as the schedule says."""
import sys

from ..schedule import Action, ScheduledTracing, schedule


def parse_schedule(text):
    """"wait,warmup,active[,repeat]" -> schedule() keywords; repeat is 1 when
    left out (one window), 0 repeats forever. ValueError otherwise."""
    parts = text.split(",")
    if len(parts) not in (3, 4) or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--schedule takes wait,warmup,active[,repeat] (integers), "
                         f"not {text!r}")
    numbers = [int(p) for p in parts] + ([1] if len(parts) == 3 else [])
    wait, warmup, active, repeat = numbers
    if active < 1:
        raise ValueError("--schedule: active must be at least 1")
    return {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}


class ScheduledWindows(ScheduledTracing):
    """run --schedule: the schedule() of trace(schedule=...) driving a Run's windows, one
    step at a time. A step ends at each pytrace_cffi.step() the program calls,
    and at the end of each training step of torch's optimizers (OptimizerSteps).

    Both come from the program's own code, between its calls, never from inside
    our hooks: stopping or starting there is what signal windows already do. The
    watcher's tag callback, which also sees optimizer steps, runs inside the C
    hook (between recording a call and returning to the interpreter, with the
    tracer and the thread's buffer in use) and only while a window records, not
    while the schedule waits: it is no place to switch windows."""

    def __init__(self, schedule_kwargs, windows):
        windows.number_windows(schedule_kwargs["repeat"] != 1)
        super().__init__(schedule(**schedule_kwargs), None, self._open, None, {})
        self._windows = windows
        self._busy = False

    def _open(self, noop=False):
        self._windows.open(noop=noop)

    def _leave(self, save):
        self._action = Action.NONE
        self._windows.close(save=save)

    def step(self):
        if self._busy:          # a step taken by code a window switch runs
            return
        self._busy = True
        try:
            super().step()
        finally:
            self._busy = False


class OptimizerSteps:
    """Calls on_step() at the end of each training step of torch's optimizers,
    through torch's own global optimizer post-hook, registered once
    torch.optim.optimizer is loaded (found by a finder on sys.meta_path that
    wraps that one module's loader: torch is never imported here). With several
    optimizers, a training step ends when every optimizer seen has stepped once
    more (the first step ends with the first optimizer's).

    A program that marks its own steps with pytrace_cffi.step() is followed
    instead (program_step): as torch.profiler counts only prof.step(), its
    steps alone count from its first call, so a loop that calls both is not
    counted twice."""

    MODULE = "torch.optim.optimizer"

    def __init__(self, on_step):
        self._on_step = on_step
        self._counts = {}           # id(optimizer) -> steps
        self._held = []             # optimizers seen: their ids never alias
        self._done = 0
        self._program_steps = False
        self.handle = None
        self._finder = None

    def program_step(self):
        """pytrace_cffi.step() was called: from now on the program's calls alone
        end steps. Its first call ends a step the optimizers already ended (the
        last one they counted), so it is not counted again."""
        if not self._program_steps:
            self._program_steps = True
            self.uninstall()
            if self._done:
                return
        self._on_step()

    def install(self):
        module = sys.modules.get(self.MODULE)
        if module is not None and hasattr(module, "register_optimizer_step_post_hook"):
            self._register(module)
            return
        self._finder = _LoadedHook(self.MODULE, self._register)
        sys.meta_path.insert(0, self._finder)

    def uninstall(self):
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        if self.handle is not None:
            self.handle.remove()
            self.handle = None

    def _register(self, module):
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        register = getattr(module, "register_optimizer_step_post_hook", None)
        if register is None:
            print("pytrace_cffi: this torch has no register_optimizer_step_post_hook: "
                  "--schedule counts only pytrace_cffi.step() calls", file=sys.stderr)
            return
        self.handle = register(self._post_hook)

    def _post_hook(self, optimizer, args, kwargs):
        if self._program_steps:
            return
        key = id(optimizer)
        if key not in self._counts:
            self._held.append(optimizer)
            self._counts[key] = 0
        self._counts[key] += 1
        done = min(self._counts.values())
        if done > self._done:
            self._done = done
            self._on_step()


class _LoadedHook:
    """A sys.meta_path finder that finds nothing itself: for one module name it
    asks the finders after it, and has the spec's loader call loaded(module) once
    the module has run."""

    def __init__(self, name, loaded):
        self._name = name
        self._loaded = loaded
        self._finding = False

    def find_spec(self, name, path=None, target=None):
        if name != self._name or self._finding:
            return None
        self._finding = True
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._finding = False
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        loaded = self._loaded

        def exec_then_register(module):
            exec_module(module)
            loaded(module)
        try:
            if exec_module is None:
                raise TypeError
            loader.exec_module = exec_then_register
        except (AttributeError, TypeError):
            print(f"pytrace_cffi: cannot follow the loading of {name} (its loader is "
                  f"{type(loader).__name__}): --schedule counts only pytrace_cffi.step() "
                  "calls", file=sys.stderr)
            return None
        return spec
