"""Named torch slices under include/exclude filters: an exclude matching the torch
package leaves out torch's own functions but keeps every nn.Module call, optimizer
step and record_function region (the call that carries the name survives, with
the user's code called inside it nested under it). The stand-in torch
(tests/torch_stand_in/) runs in a subprocess, so this runs on every interpreter;
tests/test_torch.py checks the real torch on 3.11."""
import collections
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "torch_stand_in")

PROGRAM = r"""
import json, sys
import pytrace_cffi
real = sys.argv[3] == "1"
if real:
    sys.path.append(sys.argv[1])        # workload.py only: the real torch comes first
import torch, workload
assert torch.__file__.startswith(sys.argv[1]) != real, torch.__file__
model, optimizers, x = workload.make()
workload.train_with_regions(model, optimizers, x)
torch_dir = __import__("os").path.dirname(torch.__file__)
options = json.loads(sys.argv[2])
if options.pop("exclude_torch", False):
    options["exclude"] = [torch_dir + "/*"]
with pytrace_cffi.trace(**options) as t:
    workload.train_with_regions(model, optimizers, x)
result = t.trace
if isinstance(result, pytrace_cffi.SpilledTrace):
    result = result.load()
calls = [dict(zip(("id", "name", "start_ns", "end_ns", "thread", "parent", "kind"), c))
         for c in result]
print(json.dumps(calls))
"""



def run(tmp_path, real=False, **options):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        ([] if real else [STAND_IN]) + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p])
    proc = subprocess.run([sys.executable, "-c", PROGRAM, STAND_IN, json.dumps(options),
                           "1" if real else "0"],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def named(calls):
    return collections.Counter(c["name"] for c in calls if c["name"].startswith(
        ("nn.Module: ", "Optimizer.", "enumerate(DataLoader)", "train_step", "loss")))


def is_torch(call):
    return call["name"].startswith("torch/")


@pytest.mark.parametrize("c_calls", [True, False])
def test_exclude_torch_keeps_every_named_slice_and_no_other_torch_function(tmp_path, c_calls):
    everything = run(tmp_path, c_calls=c_calls)
    filtered = run(tmp_path, c_calls=c_calls, exclude_torch=True)
    assert named(filtered) == named(everything)
    assert sum(named(everything).values()) > 30
    assert [c for c in everything if is_torch(c)]
    assert not [c["name"] for c in filtered if is_torch(c)]
    # the user's forward methods stay, each nested under its module's slice
    by_id = {c["id"]: c for c in filtered}
    forwards = [c for c in filtered if c["name"].endswith(": forward")]
    assert len(forwards) == len([c for c in everything
                                 if c["name"].startswith("workload.py(")
                                 and c["name"].endswith(": forward")]) > 0
    for forward in forwards:
        assert by_id[forward["parent"]]["name"].startswith("nn.Module: ")
    check_builtins(everything, filtered)


def check_builtins(everything, filtered):
    """The built-ins torch's kept calls make are left out with torch's code: the
    filtered trace's are those its own code calls."""
    by_id = {c["id"]: c for c in everything}

    def caller(call):       # torch's regions are no callers: the code around them is
        call = by_id[call["parent"]]
        while call["kind"] == "annotation":
            call = by_id[call["parent"]]
        return call

    own = collections.Counter(c["name"] for c in everything if c["kind"] == "c" and
                              c["parent"] is not None and not is_torch(caller(c)))
    assert collections.Counter(c["name"] for c in filtered if c["kind"] == "c") == own


def test_named_slices_survive_the_filter_in_a_spilled_trace(tmp_path):
    everything = run(tmp_path)
    filtered = run(tmp_path, exclude_torch=True, max_events=100,
                   output=str(tmp_path / "spilled"))
    assert named(filtered) == named(everything)
    assert not [c["name"] for c in filtered if is_torch(c)]


def test_include_not_matching_torch_keeps_the_named_slices(tmp_path):
    everything = run(tmp_path)
    filtered = run(tmp_path, include=[os.path.join(STAND_IN, "workload.py")])
    assert named(filtered) == named(everything)
    assert not [c["name"] for c in filtered if is_torch(c)]


def test_real_torch_exclude_site_packages_keeps_the_named_slices(tmp_path):
    pytest.importorskip("torch")
    everything = run(tmp_path, real=True)
    filtered = run(tmp_path, real=True, exclude_torch=True)
    assert named(filtered) == named(everything)
    assert named(everything)["Optimizer.step#Adam.step"] == 2
    assert named(everything)["nn.Module: Sequential_0"] == 2
    assert [c for c in everything if is_torch(c)]
    assert not [c["name"] for c in filtered if is_torch(c)]
    by_id = {c["id"]: c for c in filtered}
    forwards = [c for c in filtered if c["name"].endswith(": forward")]
    assert forwards and all(by_id[f["parent"]]["name"].startswith("nn.Module: ")
                            for f in forwards)
    check_builtins(everything, filtered)
