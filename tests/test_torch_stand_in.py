"""torch awareness on every interpreter, with a stand-in torch (tests/torch_stand_in/)
that has the shapes the watcher keys on: Module.__call__ = _wrapped_call_impl, and
the optimizer step wrapper that calls _optimizer_step_code. Real torch runs only on
3.11 here; these tests are what exercises the sys.monitoring path (3.12+) that names
module calls and optimizer steps. The stand-in is importable as `torch` only in the
subprocesses started here (its directory first on PYTHONPATH), so it never shadows
a real torch in this process. tests/test_torch.py checks on 3.11 that the expected
names and ids below are what the real torch.profiler writes for the same workload
(tests/torch_stand_in/workload.py)."""
import collections
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "torch_stand_in")
STEPS = 2           # workload.STEPS

# Module calls of one forward pass of workload.make()'s model, in call order, with
# their "Python module id": instances are counted per class object, so workload.py's
# own Linear class has a Linear_0 beside torch.nn.Linear's.
EXPECTED_MODULE_CALLS = [
    ("nn.Module: Sequential_0", 0),
    ("nn.Module: Linear_0", 0), ("nn.Module: ReLU_0", 0),
    ("nn.Module: Block_0", 0), ("nn.Module: Linear_1", 1), ("nn.Module: ReLU_1", 1),
    ("nn.Module: Block_1", 1), ("nn.Module: Linear_2", 2), ("nn.Module: ReLU_2", 2),
    ("nn.Module: Linear_0", 0), ("nn.Module: Linear_3", 3),
    ("nn.Module: Linear_4", 4),
]
# The module-call parent of each module call above (None: the model itself).
EXPECTED_MODULE_PARENTS = [
    None,
    "nn.Module: Sequential_0", "nn.Module: Sequential_0",
    "nn.Module: Sequential_0", "nn.Module: Block_0", "nn.Module: Block_0",
    "nn.Module: Sequential_0", "nn.Module: Block_1", "nn.Module: Block_1",
    "nn.Module: Sequential_0", "nn.Module: Linear_0",
    "nn.Module: Sequential_0",
]

TRACE_WORKLOAD = r"""
import json, sys
import pytrace_cffi
{before}
import torch, workload
assert torch.__file__.startswith(sys.argv[2]), torch.__file__    # the stand-in, never torch
model, optimizers, x = workload.make()
{run}
trace.export_chrome_trace(sys.argv[1])
print(json.dumps({{
    "calls": [list(c) for c in trace],
    "params": trace.params,
    "backend": trace.backend,
}}))
"""

TRACED_RUN = """
workload.train(model, optimizers, x)          # warm up, as with real torch
with pytrace_cffi.trace(record_params=True) as t:
    workload.train(model, optimizers, x)
trace = t.trace
"""

# torch's own record_function regions of workload.train_with_regions(), in time
# order, each with its innermost enclosing region (None: none): the DataLoader's
# __next__ (one more ends the loop), the user's "train_step" block and "loss"
# decorator, and the optimizers' zero_grad and step regions.
_ONE_STEP_REGIONS = [
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", None),
    ("train_step", None),
    ("Optimizer.zero_grad#SGD.zero_grad", "train_step"),
    ("Optimizer.zero_grad#Adam.zero_grad", "train_step"),
    ("loss", "train_step"),
    ("Optimizer.step#SGD.step", "train_step"),
    ("Optimizer.step#Adam.step", "train_step"),
]
EXPECTED_REGIONS = _ONE_STEP_REGIONS * STEPS + _ONE_STEP_REGIONS[:1]

REGIONS_RUN = """
workload.train_with_regions(model, optimizers, x)
with pytrace_cffi.trace({options}) as t:
    workload.train_with_regions(model, optimizers, x)
trace = t.trace
"""

# torch imported after tracing started: its code objects are classified when first
# seen, which is after the import.
STARTED_BEFORE_IMPORT = "pytrace_cffi.start(record_params=True)\n"
RUN_AFTER_START = "workload.train(model, optimizers, x)\ntrace = pytrace_cffi.stop()\n"


def run_workload(tmp_path, before="", run=TRACED_RUN):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [STAND_IN] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    chrome = tmp_path / "trace.json"
    code = TRACE_WORKLOAD.format(before=before, run=run)
    proc = subprocess.run([sys.executable, "-c", code, str(chrome), STAND_IN], env=env,
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    calls = [dict(zip(("id", "name", "start_ns", "end_ns", "thread", "parent", "kind"), c))
             for c in facts["calls"]]
    events = [e for e in json.loads(chrome.read_text())["traceEvents"] if e.get("ph") == "X"]
    return calls, events, facts


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    return run_workload(tmp_path_factory.mktemp("stand_in"))


def module_calls(calls):
    return [c for c in sorted(calls, key=lambda c: c["start_ns"])
            if c["name"].startswith("nn.Module: ")]


def ancestors(call, by_id):
    while call["parent"] is not None:
        call = by_id[call["parent"]]
        yield call


def test_runs_on_this_interpreters_backend(traced):
    _, _, facts = traced
    assert facts["backend"] == ("sys.monitoring" if sys.version_info >= (3, 12)
                                else "PyEval_SetProfile")


def test_module_calls_are_named_and_numbered_as_torch_profiler(traced):
    calls, events, _ = traced
    names = [c["name"] for c in module_calls(calls)]
    assert names == [name for name, _ in EXPECTED_MODULE_CALLS] * STEPS
    # the Chrome export carries torch's "Python module id" on every module slice
    exported = [(e["name"], e["args"]["Python module id"])
                for e in sorted(events, key=lambda e: e["ts"])
                if e["name"].startswith("nn.Module: ")]
    assert exported == EXPECTED_MODULE_CALLS * STEPS
    assert not [e for e in events if not e["name"].startswith("nn.Module: ")
                and "Python module id" in e["args"]]


def test_module_calls_nest_like_the_model_and_span_forward(traced):
    calls, _, _ = traced
    by_id = {c["id"]: c for c in calls}

    def module_parent(call):
        return next((a["name"] for a in ancestors(call, by_id)
                     if a["name"].startswith("nn.Module: ")), None)

    assert [module_parent(c) for c in module_calls(calls)] == EXPECTED_MODULE_PARENTS * STEPS
    # a module slice is the __call__ (_wrapped_call_impl) frame: _call_impl is its
    # child, forward its grandchild, and both end inside it
    for call in module_calls(calls):
        children = [c for c in calls if c["parent"] == call["id"]]
        assert [c["name"].rsplit(": ", 1)[1] for c in children] == ["_call_impl"]
        forward = [c for c in calls if c["parent"] == children[0]["id"]]
        assert [c["name"].rsplit(": ", 1)[1] for c in forward] == ["forward"]
        assert call["start_ns"] <= forward[0]["start_ns"] <= forward[0]["end_ns"] <= \
            call["end_ns"]
        assert call["name"].startswith("nn.Module: ") and "torch/nn/modules/" in \
            children[0]["name"]


def test_optimizer_steps_are_named_and_span_the_step(traced):
    calls, events, _ = traced
    by_id = {c["id"]: c for c in calls}
    steps = [c for c in sorted(calls, key=lambda c: c["start_ns"])
             if c["name"].startswith("Optimizer.step#")]
    assert [c["name"] for c in steps] == \
        ["Optimizer.step#SGD.step", "Optimizer.step#Adam.step"] * STEPS
    for cls, module in (("SGD", "sgd"), ("Adam", "adam")):
        bodies = [c for c in calls if c["name"].startswith(f"torch/optim/{module}.py(")
                  and c["name"].endswith(": step")]
        named = [c for c in steps if c["name"] == f"Optimizer.step#{cls}.step"]
        assert len(bodies) == len(named) == STEPS
        for step, body in zip(named, bodies):
            # the whole step, through _use_grad, runs inside the named slice, and
            # the tagged _optimizer_step_code call is its child
            assert step in list(ancestors(body, by_id))
            assert step["start_ns"] <= body["start_ns"] and body["end_ns"] <= step["end_ns"]
            hook = [c for c in calls if c["parent"] == step["id"]
                    and c["name"].endswith(": _optimizer_step_code")]
            assert len(hook) == 1
    # the step is torch's own record_function region of that name (a user_annotation,
    # as torch.profiler writes it), opened in the wrapper call, which keeps its name
    for step in steps:
        assert step["kind"] == "annotation"
        assert by_id[step["parent"]]["name"].endswith(": wrapper")
    assert sorted((e["name"], e["cat"]) for e in events
                  if e["name"].startswith("Optimizer.step#")) == \
        sorted((c["name"], "user_annotation") for c in steps)


def test_record_params_keeps_module_and_optimizer_metadata(traced):
    _, _, facts = traced
    params = facts["params"]
    modules = params["modules"]
    # each module once, at its first call, with torch's module id
    assert [(m["name"], m["module_id"]) for m in modules] == EXPECTED_MODULE_CALLS
    linear0 = modules[1]
    assert linear0["class"] == "Linear" and [p["name"] for p in linear0["parameters"]] == \
        ["weight", "bias"]
    weight = linear0["parameters"][0]
    assert weight == {"name": "weight", "shape": [3, 4], "dtype": "float32", "device": "cpu",
                      "requires_grad": True, "grad": None}     # zero_grad() ran before forward
    assert modules[-1]["parameters"][1] == {"name": "bias", "tensor": None}    # bias=False
    assert modules[0]["parameters"] == [] and modules[3]["parameters"] == []

    steps = params["optimizer_steps"]
    assert [(s["class"], s["optimizer_id"], s["step"]) for s in steps] == \
        [("SGD", 0, 0), ("Adam", 1, 0), ("SGD", 0, 1), ("Adam", 1, 1)]
    sgd, adam = steps[2], steps[3]
    assert sgd["param_groups"][0]["options"] == \
        {"lr": 0.1, "momentum": 0.9, "differentiable": False}
    assert [p["name"] for p in sgd["param_groups"][0]["params"]] == \
        ["Linear_0.weight", "Linear_0.bias", "Linear_1.weight", "Linear_1.bias"]
    first = sgd["param_groups"][0]["params"][0]
    assert first["shape"] == [3, 4] and first["grad"] == {"shape": [3, 4], "dtype": "float32"}
    assert first["state"] == {"momentum_buffer": {"shape": [3, 4], "dtype": "float32",
                                                  "device": "cpu", "requires_grad": False}}
    adam_params = adam["param_groups"][0]["params"]
    # workload.py's own Linear has a Linear_0 too: its inner torch Linear is Linear_3
    assert [p["name"] for p in adam_params] == \
        ["Linear_2.weight", "Linear_2.bias", "Linear_3.weight", "Linear_3.bias",
         "Linear_4.weight"]
    assert set(adam_params[0]["state"]) == {"step", "exp_avg", "exp_avg_sq"}
    assert adam_params[0]["state"]["step"]["shape"] == []
    assert adam_params[-1]["state"]["exp_avg_sq"]["shape"] == [2, 3]


def test_torch_imported_after_start_is_recognised(tmp_path):
    calls, events, facts = run_workload(tmp_path, before=STARTED_BEFORE_IMPORT,
                                        run=RUN_AFTER_START)
    assert [c["name"] for c in module_calls(calls)] == \
        [name for name, _ in EXPECTED_MODULE_CALLS] * STEPS
    assert sorted(c["name"] for c in calls if c["name"].startswith("Optimizer.step#")) == \
        ["Optimizer.step#Adam.step"] * STEPS + ["Optimizer.step#SGD.step"] * STEPS
    assert [(m["name"], m["module_id"]) for m in facts["params"]["modules"]] == \
        EXPECTED_MODULE_CALLS


def test_without_modules_option_the_calls_keep_their_function_names(tmp_path):
    run = ("with pytrace_cffi.trace(with_modules=False) as t:\n"
           "    workload.train(model, optimizers, x)\n"
           "trace = t.trace\n")
    calls, _, _ = run_workload(tmp_path, run=run)
    names = [c["name"] for c in calls]
    assert not [n for n in names if n.startswith(("nn.Module", "Optimizer"))]
    assert len([n for n in names if n.endswith(": _wrapped_call_impl")]) == \
        len(EXPECTED_MODULE_CALLS) * STEPS
    assert len([n for n in names if n.endswith(": wrapper")]) == 2 * STEPS


def regions_with_enclosing(calls):
    """(name, innermost enclosing region or None) of each region, in time order."""
    by_id = {c["id"]: c for c in calls}
    regions = sorted((c for c in calls if c["kind"] == "annotation"),
                     key=lambda c: c["start_ns"])
    return [(r["name"], next((a["name"] for a in ancestors(r, by_id)
                              if a["kind"] == "annotation"), None)) for r in regions]


@pytest.fixture(scope="module")
def regions_traced(tmp_path_factory):
    return run_workload(tmp_path_factory.mktemp("regions"), run=REGIONS_RUN.format(options=""))


def test_torch_regions_are_named_and_nested_as_torch_profiler(regions_traced):
    calls, events, _ = regions_traced
    assert regions_with_enclosing(calls) == EXPECTED_REGIONS
    # exported as torch.profiler writes them: complete events in user_annotation
    exported = [e["name"] for e in sorted(events, key=lambda e: e["ts"])
                if e["cat"] == "user_annotation"]
    assert exported == [name for name, _ in EXPECTED_REGIONS]


def test_torch_region_spans_its_with_block(regions_traced):
    calls, _, _ = regions_traced
    by_id = {c["id"]: c for c in calls}
    regions = [c for c in calls if c["kind"] == "annotation"]
    for region in regions:
        children = sorted((c for c in calls if c["parent"] == region["id"]),
                          key=lambda c: c["start_ns"])
        # from record_function.__enter__ to __exit__, the block's calls in between
        assert children[0]["name"].endswith("autograd/profiler.py(13): __enter__")
        assert children[-1]["name"].endswith("autograd/profiler.py(16): __exit__")
        assert region["start_ns"] == children[0]["start_ns"]
        assert region["end_ns"] == children[-1]["end_ns"]
        parent = by_id[region["parent"]]
        assert parent["start_ns"] <= region["start_ns"] <= region["end_ns"] <= parent["end_ns"]
    step = next(r for r in regions if r["name"] == "train_step")
    assert by_id[step["parent"]]["name"].endswith(": train_with_regions")
    step_children = [c["name"] for c in calls if c["parent"] == step["id"]]
    assert sum(n.endswith(": zero_grad") for n in step_children) == 2
    assert sum(n.endswith(": wrapper") for n in step_children) == 2
    loss = next(r for r in regions if r["name"] == "loss")
    assert by_id[loss["parent"]]["name"].endswith(": inner")      # ContextDecorator's
    # the model runs inside the loss region
    model_calls = [c for c in calls if c["name"] == "nn.Module: Sequential_0"]
    assert loss in list(ancestors(model_calls[0], by_id))
    loader = next(r for r in regions if r["name"].startswith("enumerate(DataLoader)#"))
    assert by_id[loader["parent"]]["name"].endswith("dataloader.py(27): __next__")


def _torch_like_regions(calls, anchor, pid, base):
    """torch.profiler's user_annotation events for our regions, placed as torch
    places its own: from inside the record_function.__enter__ call that opens the
    region to inside the __exit__ that closes it."""
    from pytrace_cffi.model.realtime import monotonic_to_realtime
    events = []
    for region in (c for c in calls if c["kind"] == "annotation"):
        children = sorted((c for c in calls if c["parent"] == region["id"]),
                          key=lambda c: c["start_ns"])
        enter, exit_ = children[0], children[-1]
        if not (enter["name"].endswith(": __enter__") and exit_["name"].endswith(": __exit__")):
            continue
        start, end = ((monotonic_to_realtime(anchor, (c["start_ns"] + c["end_ns"]) // 2) - base)
                      for c in (enter, exit_))
        events.append({"ph": "X", "cat": "user_annotation", "name": region["name"], "pid": pid,
                       "tid": region["thread"], "ts": start / 1000, "dur": (end - start) / 1000,
                       "args": {"External id": len(events) + 1}})
    return events


def test_merged_with_torchs_regions_each_is_kept_once_and_every_track_nests(tmp_path):
    """The geometry of torch.profiler's regions (tests/test_merge.py has the real
    torch on 3.11): merged, torch's region replaces ours and our calls nest around
    and inside it on every interpreter's backend, in .json and .pftrace."""
    from helpers import chrome_crossings
    import pytrace_cffi
    calls, _, _ = run_workload(tmp_path, run=REGIONS_RUN.format(options=""))
    ours = json.loads((tmp_path / "trace.json").read_text())
    anchor, pid = ours["otherData"]["realtime_anchor"], ours["traceEvents"][0]["pid"]
    base = anchor["start"]["realtime_ns"] - 10 ** 9
    regions = _torch_like_regions(calls, anchor, pid, base)
    steps = [r for r in regions if r["name"].startswith("Optimizer.step#")]
    assert len(steps) == 2 * STEPS and len(regions) > len(steps)
    (tmp_path / "torch.json").write_text(json.dumps({"baseTimeNanoseconds": base,
                                                     "traceEvents": regions}))
    pytrace_cffi.merge_torch(str(tmp_path / "trace.json"), tmp_path / "torch.json",
                             tmp_path / "merged.json")
    merged = json.loads((tmp_path / "merged.json").read_text())
    events = merged["traceEvents"]
    assert chrome_crossings(events) == []
    named = collections.Counter(e["name"] for e in events
                                if e.get("cat") == "user_annotation")
    assert named == collections.Counter(r["name"] for r in regions)     # torch's, once
    assert merged["pytrace_cffi"]["our_regions_replaced_by_torchs"] == len(regions)
    mine = [e for e in events if "Python id" in e.get("args", {})]
    for step in steps:
        start, end = step["ts"], step["ts"] + step["dur"]
        around = [e["name"] for e in mine if e["ts"] <= start and end <= e["ts"] + e["dur"]]
        inside = [e["name"] for e in mine if start <= e["ts"] and e["ts"] + e["dur"] <= end]
        assert any(name.endswith(": wrapper") for name in around), step
        assert any(name.endswith(": _optimizer_step_code") for name in inside), step
    # The same in a .pftrace (torch's events on tracks of their own beside ours):
    # the same calls of ours kept, each thread's tracks nested as one.
    from helpers import perfetto_protos, pftrace_thread_events
    from pytrace_cffi.render.perfetto import write_perfetto
    from pytrace_cffi.reading import read_trace
    perfetto_protos()
    from test_perfetto import decode
    write_perfetto(read_trace(str(tmp_path / "trace.json")), tmp_path / "ours.pftrace")
    our_tracks = set(decode(tmp_path / "ours.pftrace")["threads"])
    pytrace_cffi.merge_torch(str(tmp_path / "trace.json"), tmp_path / "torch.json",
                             tmp_path / "merged.pftrace")
    decoded = decode(tmp_path / "merged.pftrace", named_tracks=True)
    slices = pftrace_thread_events(decoded, our_tracks)
    assert chrome_crossings(slices) == []
    assert collections.Counter(e["name"] for e in slices if not e["ours"]) == \
        collections.Counter(r["name"] for r in regions)                # torch's, once
    assert collections.Counter(e["name"] for e in slices if e["ours"]) == \
        collections.Counter(e["name"] for e in mine)
    info = next(i for i in decoded["instants"] if i["name"] == "torch.profiler")
    assert info["args"]["our_regions_replaced_by_torchs"] == len(regions)
    for name in ("our_calls_crossing_torchs_regions_left_out", "our_regions_replaced_by_torchs"):
        assert info["args"][name] == merged["pytrace_cffi"][name]


def test_torch_regions_survive_spilling_and_loading(tmp_path):
    spilled = tmp_path / "spilled"
    run = REGIONS_RUN.format(options=f"max_events=64, output={str(spilled)!r}") + \
        "trace = trace.load()\n"
    calls, _, _ = run_workload(tmp_path, run=run)
    assert regions_with_enclosing(calls) == EXPECTED_REGIONS
    saved = tmp_path / "saved"
    run = REGIONS_RUN.format(options="") + \
        f"trace.save({str(saved)!r})\ntrace = pytrace_cffi.load({str(saved)!r})\n"
    calls, _, _ = run_workload(tmp_path, run=run)
    assert regions_with_enclosing(calls) == EXPECTED_REGIONS


def test_without_modules_option_torch_regions_are_left_alone(tmp_path):
    calls, _, _ = run_workload(tmp_path, run=REGIONS_RUN.format(options="with_modules=False"))
    assert not [c for c in calls if c["kind"] == "annotation"]


# workload.fast_regions()'s torch._C._profiler._RecordFunctionFast regions (and the
# record_function one between them), in time order with their enclosing region, as
# torch.profiler writes them (checked in test_torch.py).
EXPECTED_FAST_REGIONS = [("fast_outer", None), ("slow_middle", "fast_outer"),
                         ("fast_inner", "slow_middle"), ("fast_explicit", None)]

FAST_RUN = """
fast = torch._C._profiler._RecordFunctionFast
workload.fast_regions(x)
{start}
assert torch._C._profiler._RecordFunctionFast is not fast or not {patched}
workload.fast_regions(x)
trace = pytrace_cffi.stop()
assert torch._C._profiler._RecordFunctionFast is fast     # torch's type back at stop
"""


def fast_run(start="pytrace_cffi.start()", patched=True):
    return FAST_RUN.format(start=start, patched=patched)


def test_fast_regions_are_named_and_nested_as_torch_profiler(tmp_path):
    calls, events, _ = run_workload(tmp_path, run=fast_run())
    assert regions_with_enclosing(calls) == EXPECTED_FAST_REGIONS
    exported = [e["name"] for e in sorted(events, key=lambda e: e["ts"])
                if e["cat"] == "user_annotation"]
    assert exported == [name for name, _ in EXPECTED_FAST_REGIONS]
    by_id = {c["id"]: c for c in calls}
    regions = {c["name"]: c for c in calls if c["kind"] == "annotation"}
    # each region spans what its block ran, inside fast_regions() itself
    for name, inside in (("fast_outer", "ones_like"), ("fast_inner", "ones_like"),
                         ("fast_explicit", "zeros_like")):
        region = regions[name]
        assert by_id[region["parent"]]["name"].endswith(": fast_regions") or \
            by_id[region["parent"]]["kind"] == "annotation"
        children = [c["name"] for c in calls if c["parent"] == region["id"]]
        assert any(n.endswith(inside) for n in children), (name, children)
    # the stand-in type's region machinery is not shown as our own Python calls
    assert not [c for c in calls if "pytrace_cffi" in c["name"]]


def test_fast_regions_of_torch_imported_after_start(tmp_path):
    calls, _, _ = run_workload(tmp_path, before=STARTED_BEFORE_IMPORT,
                               run="workload.fast_regions(x)\ntrace = pytrace_cffi.stop()\n"
                                   "assert torch._C._profiler._RecordFunctionFast.__module__ "
                                   "== 'torch._C._profiler'\n")
    # the first region is entered before any watched code ran after the import
    # (FastRegion takes the type's place then): the later ones are recognised
    names = [name for name, _ in regions_with_enclosing(calls)]
    assert names == ["slow_middle", "fast_inner", "fast_explicit"], names


def test_without_modules_option_fast_regions_are_left_alone(tmp_path):
    calls, _, _ = run_workload(
        tmp_path, run=fast_run("pytrace_cffi.start(with_modules=False)", patched=False))
    assert not [c for c in calls if c["kind"] == "annotation"]


def test_fast_regions_survive_spilling_and_loading(tmp_path):
    spilled = tmp_path / "spilled"
    run = fast_run(f"pytrace_cffi.start(max_events=16, output={str(spilled)!r})") + \
        "trace = trace.load()\n"
    calls, _, _ = run_workload(tmp_path, run=run)
    assert regions_with_enclosing(calls) == EXPECTED_FAST_REGIONS
    assert not [c for c in calls if "pytrace_cffi" in c["name"]]


def test_fast_regions_are_kept_under_filters(tmp_path):
    # FastRegion's code lives in pytrace_cffi (in site-packages once installed):
    # filters that leave out its file, or torch's, keep the regions, nested alike
    start = ("pytrace_cffi.start(exclude=['*/pytrace_cffi/*', '*/torch_stand_in/*', "
             "'*site-packages*'])")
    calls, _, _ = run_workload(tmp_path, run=fast_run(start))
    assert regions_with_enclosing(calls) == EXPECTED_FAST_REGIONS
