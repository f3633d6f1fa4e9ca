"""PyTorch awareness against torch.profiler itself (torch 2.13 CPU, Python 3.11);
skipped where torch is not installed."""
import collections
import importlib.util
import json
import os

import pytest

import pytrace_cffi

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile  # noqa: E402


class Gate(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = torch.nn.Linear(width, width)
        self.act = torch.nn.GELU()

    def forward(self, x):
        return self.act(self.proj(x)) * torch.sigmoid(x)


class Tower(torch.nn.Module):
    """Nested and repeated classes: Gate inside Tower, Linear at three depths."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(6, 8)
        self.gates = torch.nn.ModuleList([Gate(8), Gate(8)])
        self.norm = torch.nn.LayerNorm(8)
        self.head = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(),
                                        torch.nn.Linear(4, 1))

    def forward(self, x):
        x = self.inp(x)
        for gate in self.gates:
            x = x + gate(x)
        return self.head(self.norm(x))


STEPS = 3


def make():
    torch.manual_seed(0)
    model = Tower()
    return model, torch.optim.Adam(model.parameters(), lr=1e-3), torch.randn(5, 6)


def train(model, optimizer, x):
    for _ in range(STEPS):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()


def module_counts(names):
    return collections.Counter(n for n in names if n.startswith("nn.Module: "))


def torch_profiler_slices(run, path):
    """The complete events torch.profiler writes for run() (after a warm-up run)."""
    run()
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, with_modules=True) as p:
        run()
    p.export_chrome_trace(str(path))
    return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]


def our_slices(run, path):
    """The complete events our Chrome export writes for run() (after a warm-up run)."""
    run()
    with pytrace_cffi.trace() as t:
        run()
    t.trace.export_chrome_trace(str(path))
    return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]


def module_ids(events):
    """Module slice name -> the set of "Python module id" values its events carry."""
    ids = collections.defaultdict(set)
    for e in events:
        if e["name"].startswith("nn.Module: "):
            ids[e["name"]].add(e["args"]["Python module id"])
    return dict(ids)


@pytest.fixture(scope="module")
def torch_profiler_events(tmp_path_factory):
    model, optimizer, x = make()
    return torch_profiler_slices(lambda: train(model, optimizer, x),
                                 tmp_path_factory.mktemp("torch") / "torch.json")


@pytest.fixture(scope="module")
def torch_profiler_names(torch_profiler_events):
    return [e["name"] for e in torch_profiler_events]


@pytest.fixture(scope="module")
def ours():
    model, optimizer, x = make()
    train(model, optimizer, x)
    with pytrace_cffi.trace(record_params=True) as t:
        train(model, optimizer, x)
    return t.trace, model, optimizer


def test_module_slices_equal_torch_profiler(torch_profiler_names, ours):
    trace, _, _ = ours
    expected = module_counts(torch_profiler_names)
    assert expected, "torch.profiler recorded no module slices"
    assert module_counts(c.name for c in trace) == expected
    assert {"nn.Module: Linear_0", "nn.Module: Linear_3", "nn.Module: Gate_1",
            "nn.Module: Tower_0"} <= set(expected)


def test_module_slices_nest_like_the_model(ours):
    trace, _, _ = ours
    calls = list(trace)
    by_id = {c.id: c for c in calls}

    def module_ancestor(call):
        while call.parent is not None:
            call = by_id[call.parent]
            if call.name.startswith("nn.Module: "):
                return call.name
        return None

    parents = {module_ancestor(c) for c in calls if c.name == "nn.Module: Gate_0"}
    assert parents == {"nn.Module: Tower_0"}
    assert {module_ancestor(c) for c in calls if c.name == "nn.Module: Linear_1"} == \
        {"nn.Module: Gate_0"}


def test_optimizer_steps_are_named_and_span_the_step(torch_profiler_names, ours):
    trace, _, _ = ours
    steps = [c for c in trace if c.name == "Optimizer.step#Adam.step"]
    assert len(steps) == STEPS == torch_profiler_names.count("Optimizer.step#Adam.step")
    calls = list(trace)
    by_id = {c.id: c for c in calls}

    def ancestors(call):
        while call.parent is not None:
            call = by_id[call.parent]
            yield call

    adam_steps = [c for c in calls if c.name.startswith("torch/optim/adam.py(")
                  and c.name.endswith(": step")]
    assert len(adam_steps) == STEPS
    for step, adam in zip(steps, adam_steps):
        # the whole step: Adam.step's body runs inside the named slice
        assert step in ancestors(adam)
        assert step.start_ns <= adam.start_ns and adam.end_ns <= step.end_ns


def test_module_ids_equal_torch_profiler(torch_profiler_events, ours, tmp_path):
    trace, _, _ = ours
    path = tmp_path / "t.json"
    trace.export_chrome_trace(str(path))
    ours_ids = module_ids(json.loads(path.read_text())["traceEvents"])
    expected = module_ids(torch_profiler_events)
    # torch writes the instance's index within its class: Linear_3 -> 3, Gate_1 -> 1
    assert expected["nn.Module: Linear_3"] == {3} and expected["nn.Module: Gate_1"] == {1}
    assert ours_ids == expected


class Linear(torch.nn.Module):
    """Not torch.nn.Linear: another class of the same name, holding one."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.inner(x)


def test_classes_sharing_a_name_are_numbered_apart_as_torch_does(tmp_path):
    # torch.profiler counts instances per class object: torch.nn.Linear and this
    # file's Linear both have a Linear_0 (and a Linear_1), each with its own id.
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), Linear(), torch.nn.Linear(3, 3), Linear())
    x = torch.randn(2, 3)

    def run():
        model(x)

    def in_order(events):
        return [(e["name"], e["args"]["Python module id"])
                for e in sorted(events, key=lambda e: e["ts"])
                if e["name"].startswith("nn.Module: ")]

    expected = in_order(torch_profiler_slices(run, tmp_path / "torch.json"))
    assert expected == [("nn.Module: Sequential_0", 0),
                        ("nn.Module: Linear_0", 0), ("nn.Module: Linear_0", 0),
                        ("nn.Module: Linear_1", 1), ("nn.Module: Linear_2", 2),
                        ("nn.Module: Linear_1", 1), ("nn.Module: Linear_3", 3)]
    assert in_order(our_slices(run, tmp_path / "ours.json")) == expected


def test_params_cover_every_parameter_and_optimizer_state(ours):
    trace, model, optimizer = ours
    modules = trace.params["modules"]
    recorded = {}
    for module in modules:
        for p in module["parameters"]:
            recorded[(module["name"], p["name"])] = p
    # every parameter of every module, with shape, dtype, device, grad
    expected = sum(len(m._parameters) for m in model.modules())
    assert len(recorded) == expected == sum(1 for _ in model.named_parameters())
    linear0 = recorded[("nn.Module: Linear_0", "weight")]
    assert linear0["shape"] == [8, 6] and linear0["dtype"] == "float32"
    assert linear0["device"] == "cpu" and linear0["requires_grad"] is True
    assert linear0["grad"] is None        # zero_grad() set it to None before forward
    steps = trace.params["optimizer_steps"]
    assert len(steps) == STEPS
    params = steps[-1]["param_groups"][0]["params"]
    assert len(params) == len(list(model.parameters()))
    for entry, parameter in zip(params, model.parameters()):
        assert entry["shape"] == list(parameter.shape)
        assert set(entry["state"]) == set(optimizer.state[parameter]) == \
            {"step", "exp_avg", "exp_avg_sq"}
        assert entry["state"]["exp_avg"]["shape"] == list(parameter.shape)
        assert entry["grad"]["shape"] == list(parameter.shape)
        assert entry["name"] is not None and "." in entry["name"]
    assert steps[-1]["param_groups"][0]["options"]["lr"] == 1e-3


def test_torch_frames_are_trimmed(ours):
    trace, _, _ = ours
    names = {c.name for c in trace if c.kind == "python"}
    assert any(n.startswith("torch/nn/modules/module.py(") and n.endswith(": _call_impl")
               for n in names)
    assert not [n for n in names if "site-packages" in n]


def test_torch_imported_after_start_is_recognised(run_python):
    code = (
        "import pytrace_cffi\n"
        "pytrace_cffi.start()\n"
        "import torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "m(torch.ones(1, 2)).sum().backward(); opt.step()\n"
        "t = pytrace_cffi.stop()\n"
        "names = [c.name for c in t]\n"
        "print(sorted(n for n in set(names) if n.startswith(('nn.Module', 'Optimizer'))))\n"
    )
    out = run_python(code).stdout.strip()
    assert out == ("['Optimizer.step#SGD.step', 'nn.Module: Linear_0', 'nn.Module: Linear_1', "
                   "'nn.Module: Sequential_0']")


def test_without_modules_option_torch_calls_keep_their_function_names():
    model, optimizer, x = make()
    with pytrace_cffi.trace(with_modules=False) as t:
        model(x)
    assert not [c for c in t.trace if c.name.startswith("nn.Module")]
    assert [c for c in t.trace if c.name.endswith(": _wrapped_call_impl")]


def load_stand_in_workload():
    """tests/torch_stand_in/workload.py, here run with the real torch."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_stand_in",
                        "workload.py")
    spec = importlib.util.spec_from_file_location("stand_in_workload_real_torch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stand_in_expectations_are_torch_profilers_own(tmp_path):
    # test_torch_stand_in.py checks, on every interpreter, the names and ids below
    # for this workload run on a stand-in torch; here torch.profiler itself, and
    # our tracer on the real torch, give exactly those.
    from test_torch_stand_in import EXPECTED_MODULE_CALLS, STEPS
    workload = load_stand_in_workload()
    assert workload.STEPS == STEPS
    model, optimizers, x = workload.make()

    def run():
        workload.train(model, optimizers, x)

    def in_order(events, prefix):
        return [(e["name"], e["args"].get("Python module id"))
                for e in sorted(events, key=lambda e: e["ts"]) if e["name"].startswith(prefix)]

    expected_steps = [("Optimizer.step#SGD.step", None), ("Optimizer.step#Adam.step", None)]
    torch_events = torch_profiler_slices(run, tmp_path / "torch.json")
    assert in_order(torch_events, "nn.Module: ") == EXPECTED_MODULE_CALLS * STEPS
    assert in_order(torch_events, "Optimizer.step#") == expected_steps * STEPS
    ours = our_slices(run, tmp_path / "ours.json")
    assert in_order(ours, "nn.Module: ") == EXPECTED_MODULE_CALLS * STEPS
    assert in_order(ours, "Optimizer.step#") == expected_steps * STEPS


def annotations_with_enclosing(events):
    """(name, innermost enclosing user_annotation or None) of each user_annotation
    event, in time order: nesting as torch.profiler's Chrome trace shows it."""
    annotations = sorted((e for e in events if e.get("cat") == "user_annotation"),
                         key=lambda e: e["ts"])
    result = []
    for a in annotations:
        around = [b for b in annotations if b is not a and b["tid"] == a["tid"]
                  and b["ts"] <= a["ts"] and a["ts"] + a["dur"] <= b["ts"] + b["dur"]]
        inner = max(around, key=lambda b: b["ts"]) if around else None
        result.append((a["name"], inner["name"] if inner else None))
    return result


def test_torch_regions_equal_torch_profilers_user_annotations(tmp_path):
    # torch's own record_function regions (DataLoader, zero_grad, optimizer step, and
    # the user's torch.profiler.record_function block and decorator): the names and
    # nesting torch.profiler writes, which test_torch_stand_in.py expects too
    from test_torch_stand_in import EXPECTED_REGIONS, regions_with_enclosing
    workload = load_stand_in_workload()
    model, optimizers, x = workload.make()

    def run():
        workload.train_with_regions(model, optimizers, x)

    run()
    with profile(activities=[ProfilerActivity.CPU]) as p:
        run()
    p.export_chrome_trace(str(tmp_path / "torch.json"))
    torch_events = json.loads((tmp_path / "torch.json").read_text())["traceEvents"]
    assert annotations_with_enclosing(torch_events) == EXPECTED_REGIONS
    with pytrace_cffi.trace() as t:
        run()
    calls = [c._asdict() for c in t.trace]
    assert regions_with_enclosing(calls) == EXPECTED_REGIONS
    t.trace.export_chrome_trace(str(tmp_path / "ours.json"))
    ours = json.loads((tmp_path / "ours.json").read_text())["traceEvents"]
    assert annotations_with_enclosing(ours) == EXPECTED_REGIONS


def regions_with_enclosing_in(events, names):
    """(name, innermost enclosing region or None) of the complete events whose name
    is in names (any category), in time order."""
    picked = [e for e in events if e.get("ph") == "X" and e["name"] in names]
    return annotations_with_enclosing([dict(e, cat="user_annotation") for e in picked])


def test_fast_regions_equal_torch_profilers_own(tmp_path):
    # torch._C._profiler._RecordFunctionFast, a C type entered without Python code:
    # torch.profiler writes its regions (as cpu_op events) with these names and this
    # nesting; test_torch_stand_in.py expects the same of ours on every interpreter
    from test_torch_stand_in import EXPECTED_FAST_REGIONS, regions_with_enclosing
    workload = load_stand_in_workload()
    x = torch.ones(2, 3)
    names = {name for name, _ in EXPECTED_FAST_REGIONS}
    workload.fast_regions(x)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        workload.fast_regions(x)
    p.export_chrome_trace(str(tmp_path / "torch.json"))
    torch_events = json.loads((tmp_path / "torch.json").read_text())["traceEvents"]
    assert regions_with_enclosing_in(torch_events, names) == EXPECTED_FAST_REGIONS
    fast_type = torch._C._profiler._RecordFunctionFast
    with pytrace_cffi.trace() as t:
        workload.fast_regions(x)
    assert torch._C._profiler._RecordFunctionFast is fast_type      # put back at stop
    calls = [c._asdict() for c in t.trace]
    assert regions_with_enclosing(calls) == EXPECTED_FAST_REGIONS


class _FxModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)).sum()


def test_fx_graph_regions_equal_torch_profilers_own(tmp_path):
    # torch.fx's generated forward (with enrich_profiler_metadata) enters a
    # _RecordFunctionFast region for the graph and one per node by explicit
    # __enter__/__exit__ calls. Traced by both at once, our regions have the names
    # and nesting of torch.profiler's events, and each holds its node's call.
    import torch.fx
    import torch.fx.experimental._config as fx_config
    from test_torch_stand_in import regions_with_enclosing
    with fx_config.patch(enrich_profiler_metadata=True):    # read when the code is made
        gm = torch.fx.symbolic_trace(_FxModel())
    assert "_RecordFunctionFast" in gm.code
    x = torch.ones(2, 4)
    gm(x)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        with pytrace_cffi.trace() as t:
            gm(x)
    p.export_chrome_trace(str(tmp_path / "torch.json"))
    torch_events = json.loads((tmp_path / "torch.json").read_text())["traceEvents"]
    names = {e["name"] for e in torch_events
             if e.get("ph") == "X" and e["name"].startswith("## ")}
    expected = regions_with_enclosing_in(torch_events, names)
    assert len(expected) == 4 and [n for n, _ in expected[1:]] == \
        ["## 1 ##", "## 2 ##", "## 3 ##"]
    calls = [c._asdict() for c in t.trace]
    assert regions_with_enclosing(calls) == expected
    by_id = {c["id"]: c for c in calls}
    for region, inside in (("## 1 ##", "nn.Module: Linear_0"), ("## 2 ##", "relu"),
                           ("## 3 ##", "torch.Tensor.sum")):
        region_id = next(c["id"] for c in calls if c["name"] == region)
        assert any(c["name"] == inside and c["parent"] == region_id for c in calls), region
    graph = next(c for c in calls if c["name"] == expected[0][0])
    assert by_id[graph["parent"]]["name"].endswith(": forward")


def test_compile_regions_are_named_as_torch_profilers_own(tmp_path):
    # torch.compile's machinery (dynamo's compile events, "Pregraph bytecode") opens
    # _RecordFunctionFast regions while torch.profiler runs: traced by both at once,
    # each has its region of ours with torch's name, as often. (They are left in other
    # functions than the ones that entered them: ours end with those functions; see
    # README.)
    import collections

    def f(x):
        return torch.relu(x * 2).sum()

    compiled = torch.compile(f, backend="eager")
    x = torch.ones(8)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        with pytrace_cffi.trace() as t:
            compiled(x)
            compiled(x)
    p.export_chrome_trace(str(tmp_path / "torch.json"))
    torch_events = json.loads((tmp_path / "torch.json").read_text())["traceEvents"]
    from_python = collections.Counter(
        e["name"] for e in torch_events if e.get("ph") == "X" and (
            e["name"] == "Pregraph bytecode" or "compile_id=" in e["name"]
            or e["name"].endswith(" (dynamo_timed)")))
    assert from_python["Pregraph bytecode"] == 2 and len(from_python) > 5
    ours = collections.Counter(c.name for c in t.trace if c.kind == "annotation")
    assert {name: ours[name] for name in from_python} == dict(from_python)
    assert torch._C._profiler._RecordFunctionFast.__name__ == "RecordFunctionFast"


def test_a_watcher_classifying_after_its_end_patches_nothing():
    """The watcher patches torch lazily (torch imported after start: at the first
    watched code it classifies). A classification after end() (a question about
    new code answered while the session stops) patched again, and nothing was
    left to restore torch's type: it stays torch's own now."""
    from pytrace_cffi._torch import FastRegion, TorchWatcher
    module = torch._C._profiler
    own = module._RecordFunctionFast
    watcher = TorchWatcher()
    try:
        watcher.begin()
        assert module._RecordFunctionFast is FastRegion
        watcher.end()
        assert module._RecordFunctionFast is own
        watcher.classify(test_a_watcher_classifying_after_its_end_patches_nothing.__code__)
        assert module._RecordFunctionFast is own
    finally:
        module._RecordFunctionFast = own


def test_a_fast_region_left_in_place_is_undone_by_the_next_trace():
    """FastRegion left in torch's place (a session's watcher classified torch's code
    after its stop and patched again): the next trace puts torch's own type back
    (test_compile_regions_are_named_as_torch_profilers_own found ours after
    other tests had run)."""
    from pytrace_cffi._torch import FastRegion
    module = torch._C._profiler
    own = module._RecordFunctionFast
    assert own is not FastRegion
    FastRegion._type = own
    module._RecordFunctionFast = FastRegion
    try:
        with pytrace_cffi.trace():
            pass
        assert module._RecordFunctionFast is own
    finally:
        module._RecordFunctionFast = own
