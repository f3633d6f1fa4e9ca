"""PyTorch awareness: nn.Module calls and optimizer steps, found without importing torch.

The C core asks `classify(code)` once for each new code object named
`_wrapped_call_impl`, `_optimizer_step_code`, `__enter__` or `__exit__`; this
answers yes only when torch is already in sys.modules and the code is torch's own
(nn.Module.__call__, the hook torch's optimizers call after each step, or
torch.autograd.profiler.record_function's __enter__ and __exit__: the regions torch
itself opens for DataLoader iteration, zero_grad and optimizer steps, and the
user's torch.profiler.record_function blocks, and FastRegion's: see below). Calls
of those then run
`tag(frame)`, which reads the frame's `self` and returns a small integer the C core
stores with the call. So torch costs nothing until the traced program imports it,
also when it does so after tracing started.

torch._C._profiler._RecordFunctionFast (torch's cheaper region, used by
torch.compile's machinery and FX graphs) is a C type: entering it runs no Python
code, so neither sys.setprofile nor sys.monitoring reports anything (a `with`
statement calls its __enter__ through a special lookup, not a CALL), and the C
object does not expose its name. While a session traces, and only if torch's
C profiler module is already loaded, that module attribute is replaced by
FastRegion, which creates the real object and delegates to it from Python
__enter__ and __exit__ methods the watcher recognises like record_function's;
stop() puts torch's type back. Code that bound the type before tracing started
(`from torch._C._profiler import _RecordFunctionFast`) is not seen.
"""
import sys

WATCHED_NAMES = frozenset({"_wrapped_call_impl", "_optimizer_step_code", "__enter__",
                           "__exit__"})
MODULE_CALL = "module"
OPTIMIZER_STEP = "optimizer"
# record_function.__enter__ opens a region named as torch.profiler names it;
# __exit__ closes it (trace.py makes the region a slice of its own).
REGION_ENTER = "region"
REGION_EXIT = "region_end"
TAG_KINDS = (MODULE_CALL, OPTIMIZER_STEP, REGION_ENTER, REGION_EXIT)
# torch_npu writes this entry into its hash table for the tracer's exit event.
EXIT_EVENT_NAME = "__torch_npu_profiler_python_tracer_exit"


FAST_MODULE = "torch._C._profiler"
FAST_ATTRIBUTE = "_RecordFunctionFast"


class FastRegion:
    """Stands for torch._C._profiler._RecordFunctionFast while tracing: the same
    region, entered and left through Python methods the tracer sees."""

    __slots__ = ("name", "_region")
    _type = None                    # torch's type, set by patch_fast_regions

    def __init__(self, name, *args, **kwargs):
        self._region = FastRegion._type(name, *args, **kwargs)
        self.name = name

    def __enter__(self):
        return self._region.__enter__()

    def __exit__(self, exc_type, exc_value, traceback):
        return self._region.__exit__(exc_type, exc_value, traceback)


FAST_REGION_CODES = (FastRegion.__enter__.__code__, FastRegion.__exit__.__code__)


def is_fast_region_code(code):
    return code is FAST_REGION_CODES[0] or code is FAST_REGION_CODES[1]


def patch_fast_regions():
    """Puts FastRegion in torch._C._profiler's place if torch has loaded it;
    returns a function that undoes it (None when there was nothing to do).
    Never imports torch."""
    module = sys.modules.get(FAST_MODULE)
    original = getattr(module, FAST_ATTRIBUTE, None)
    if original is FastRegion:
        # left in place by a session that could not undo it (its watcher classified
        # torch's code after its stop): torch's own type is the one saved then
        original = FastRegion._type
    if original is None:
        return None
    FastRegion._type = original
    setattr(module, FAST_ATTRIBUTE, FastRegion)

    def restore():
        if getattr(module, FAST_ATTRIBUTE, None) is FastRegion:
            setattr(module, FAST_ATTRIBUTE, original)
        # FastRegion._type stays: a FastRegion made while tracing may still be
        # entered or left after stop
    return restore


def _torch_code(module_name, class_name, function_name):
    module = sys.modules.get(module_name)
    cls = getattr(module, class_name, None)
    function = getattr(cls, function_name, None)
    return getattr(function, "__code__", None)


def tensor_metadata(tensor):
    """Shape, dtype, device and requires_grad of a tensor; never its values."""
    if tensor is None:
        return None
    shape = getattr(tensor, "shape", None)
    if shape is None:                                   # a Python number in optimizer state
        if isinstance(tensor, (int, float, bool)):
            return {"value": tensor}
        return {"type": type(tensor).__name__}
    return {
        "shape": list(shape),
        "dtype": str(getattr(tensor, "dtype", "")).replace("torch.", ""),
        "device": str(getattr(tensor, "device", "")),
        "requires_grad": bool(getattr(tensor, "requires_grad", False)),
    }


def _grad_metadata(tensor):
    grad = getattr(tensor, "grad", None)
    if grad is None:
        return None
    return {"shape": list(grad.shape), "dtype": str(grad.dtype).replace("torch.", "")}


def parameter_metadata(name, parameter):
    entry = {"name": name}
    if parameter is None:
        entry["tensor"] = None
        return entry
    entry.update(tensor_metadata(parameter))
    entry["grad"] = _grad_metadata(parameter)
    return entry


class TorchWatcher:
    """Names module calls and optimizer steps as torch.profiler does, and keeps
    their parameter metadata when record_params is set."""

    def __init__(self, record_params=False, steps_kept=None, collectives=False):
        self.record_params = record_params
        # the flight recorder's: torch.distributed's collective calls (_collectives.py)
        self.collectives = None
        if collectives:
            from ._collectives import CollectiveLog
            self.collectives = CollectiveLog()
        self.steps_kept = steps_kept    # record_params' steps kept (None: all)
        self.tags = [None]              # tag -> {"kind", "name", ...}; 0 means none
        self.modules = []               # params.json "modules"
        self.optimizer_steps = []       # params.json "optimizer_steps"
        self._module_tags = {}          # id(module) -> tag
        self._held = []                 # modules and optimizers seen: ids never alias
        self._instances_per_class = {}  # id(class) -> instances of it seen
        self._optimizer_ids = {}        # id(optimizer) -> ordinal
        self._steps_taken = {}          # optimizer ordinal -> steps seen
        self._optimizer_tags = {}       # optimizer ordinal -> its steps' tag
        self._parameter_names = {}      # id(parameter) -> "Linear_0.weight"
        self._region_tags = {}          # region name -> tag of the __enter__ calls opening it
        self._region_exit_tag = 0
        self._restore_fast = None       # undoes patch_fast_regions
        self._ended = False             # end() ran: nothing is patched again

    def begin(self):
        """At start: FastRegion takes _RecordFunctionFast's place if torch is loaded."""
        if self._restore_fast is None and not self._ended:
            self._restore_fast = patch_fast_regions()

    def end(self):
        """At stop (and in a forked child that drops the session): torch's type back,
        for good: a classification after it (a question about new code still
        answered as the session stops) must not patch again, or torch's type would
        stay replaced with no session left to restore it."""
        self._ended = True
        restore, self._restore_fast = self._restore_fast, None
        if restore is not None:
            restore()

    def watch_spec(self):
        names = set(WATCHED_NAMES)
        if self.collectives is not None:
            from ._collectives import COLLECTIVES
            names |= COLLECTIVES
        return (names, self.classify, self.tag)

    def classify(self, code):
        if self._restore_fast is None and FAST_MODULE in sys.modules:
            self.begin()        # torch imported after start: the first watched code after
        if is_fast_region_code(code):
            return 1
        if self.collectives is not None and code.co_name not in WATCHED_NAMES:
            from ._collectives import is_collective_code
            return int(is_collective_code(code))
        if code is _torch_code("torch.nn.modules.module", "Module", "_wrapped_call_impl"):
            return 1
        if code is _torch_code("torch.optim.optimizer", "Optimizer", "_optimizer_step_code"):
            return 1
        if code is _torch_code("torch.autograd.profiler", "record_function", "__enter__"):
            return 1
        if code is _torch_code("torch.autograd.profiler", "record_function", "__exit__"):
            return 1
        return 0

    def tag(self, frame):
        name = frame.f_code.co_name
        if name not in WATCHED_NAMES:       # a collective (classify said so): noted only
            self.collectives.on_call(frame)
            return 0
        if name == "__exit__":          # needs no locals (f_locals builds a dict on 3.9-3.12)
            if not self._region_exit_tag:
                self._region_exit_tag = len(self.tags)
                self.tags.append({"kind": REGION_EXIT, "name": ""})
            return self._region_exit_tag
        owner = frame.f_locals.get("self")
        if owner is None:
            return 0
        if name == "_wrapped_call_impl":
            return self._module_tag(owner)
        if name == "__enter__":
            return self._region_tag(owner)
        return self._optimizer_tag(owner)

    def _region_tag(self, region):
        name = getattr(region, "name", None)
        if not isinstance(name, str):
            return 0
        tag = self._region_tags.get(name)
        if tag is None:
            tag = self._region_tags[name] = len(self.tags)
            self.tags.append({"kind": REGION_ENTER, "name": name})
        return tag

    def _module_tag(self, module):
        tag = self._module_tags.get(id(module))
        if tag is not None:
            return tag
        # torch.profiler numbers instances per class object, not per class name
        # (two classes named Linear each have a Linear_0), and its "Python module
        # id" is that same number: Linear_1 has id 1.
        klass = type(module)
        number = self._instances_per_class.get(id(klass))
        if number is None:
            number = 0
            self._held.append(klass)        # its id must not be reused by another class
        self._instances_per_class[id(klass)] = number + 1
        cls = klass.__name__
        name = f"nn.Module: {cls}_{number}"
        module_id = number
        tag = len(self.tags)
        self.tags.append({"kind": MODULE_CALL, "name": name, "module_id": module_id,
                          "class": cls})
        self._module_tags[id(module)] = tag
        self._held.append(module)
        if self.record_params:
            parameters = getattr(module, "_parameters", None) or {}
            entries = []
            for pname, parameter in parameters.items():
                entries.append(parameter_metadata(pname, parameter))
                if parameter is not None:
                    self._parameter_names[id(parameter)] = f"{cls}_{number}.{pname}"
            self.modules.append({"module_id": module_id, "name": name, "class": cls,
                                 "parameters": entries})
        return tag

    def _optimizer_tag(self, optimizer):
        cls = type(optimizer).__name__
        optimizer_id = self._optimizer_ids.get(id(optimizer))
        if optimizer_id is None:
            optimizer_id = self._optimizer_ids[id(optimizer)] = len(self._optimizer_ids)
            self._held.append(optimizer)
        step = self._steps_taken.get(optimizer_id, 0)
        self._steps_taken[optimizer_id] = step + 1
        # One tag per optimizer, not per step: a tag per step grew the session (and
        # every flight dump) by ~300 bytes a step, forever.
        tag = self._optimizer_tags.get(optimizer_id)
        if tag is None:
            tag = self._optimizer_tags[optimizer_id] = len(self.tags)
            self.tags.append({"kind": OPTIMIZER_STEP, "name": f"Optimizer.step#{cls}.step",
                              "optimizer_id": optimizer_id, "class": cls})
        if self.record_params:
            self.optimizer_steps.append(self._describe_step(optimizer, optimizer_id, cls, step))
            if self.steps_kept is not None and len(self.optimizer_steps) > self.steps_kept:
                del self.optimizer_steps[0]     # a ring keeps the newest events only
        return tag

    def _describe_step(self, optimizer, optimizer_id, cls, step):
        groups = []
        state = getattr(optimizer, "state", {}) or {}
        for index, group in enumerate(getattr(optimizer, "param_groups", []) or []):
            params = []
            for parameter in group.get("params", []):
                entry = parameter_metadata(self._parameter_names.get(id(parameter)), parameter)
                entry["state"] = {key: tensor_metadata(value)
                                  for key, value in (state.get(parameter) or {}).items()}
                params.append(entry)
            options = {k: v for k, v in group.items()
                       if k != "params" and isinstance(v, (int, float, bool, str))}
            groups.append({"index": index, "options": options, "params": params})
        return {"optimizer_id": optimizer_id, "class": cls, "step": step,
                "param_groups": groups}
