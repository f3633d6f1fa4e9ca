"""torch record_function regions made slices by the tests' reference (trace.TorchRegions'
keys, C pt_insert_regions: replay_reference.py, which test_streaming holds the
walk to) on hand-built call trees: nesting, unclosed and unmatched regions. Needs
no torch; the traced cases are in test_torch_stand_in.py (every interpreter) and
test_torch.py (real torch)."""
from pytrace_cffi._core import ffi, lib
from pytrace_cffi.model.walk import TorchRegions

from oracle_build import oracle_lib
from replay_reference import insert_regions, name_tagged_calls

# tags as the TorchWatcher hands them out: 1 and 2 open regions "a" and "b", 3 closes
TAGS = [None, {"kind": "region", "name": "a"}, {"kind": "region", "name": "b"},
        {"kind": "region_end", "name": ""}, {"kind": "module", "name": "nn.Module: X_0",
                                             "module_id": 0, "class": "X"}]
A, B, EXIT, MODULE = 1, 2, 3, 4


def replayed(rows):
    """rows: (name, start, end, parent index or -1, tag) in start order -> pt_slice[]."""
    names = ["?"] + sorted({r[0] for r in rows})
    out = ffi.new("pt_slice[]", len(rows))
    for i, (name, start, end, parent, tag) in enumerate(rows):
        s = out[i]
        s.start, s.end, s.key, s.parent, s.tag = start, end, names.index(name), parent, tag
        s.depth = 0 if parent < 0 else out[parent].depth + 1
    return names, out


def with_regions(rows):
    names, slices = replayed(rows)
    kinds = ["python"] * len(names)
    out, n = insert_regions(TorchRegions(TAGS, names, kinds), slices, len(rows))
    assert lib.pt_validate_slices(out, n, len(names)) == -1
    result = []
    for i in range(n):
        s = out[i]
        parent = names[out[s.parent].key] if s.parent >= 0 else None
        result.append((names[s.key], s.start, s.end, parent, kinds[s.key]))
    return result


def test_regions_opened_beside_each_other_nest_and_close_innermost_first():
    rows = [("f", 0, 100, -1, 0),
            ("enter", 10, 12, 0, A), ("enter", 13, 14, 0, B), ("g", 20, 30, 0, MODULE),
            ("h", 21, 29, 3, 0), ("exit", 40, 41, 0, EXIT), ("exit", 50, 51, 0, EXIT),
            ("after", 60, 70, 0, 0)]
    assert with_regions(rows) == [
        ("f", 0, 100, None, "python"),
        ("a", 10, 51, "f", "annotation"), ("enter", 10, 12, "a", "python"),
        ("b", 13, 41, "a", "annotation"), ("enter", 13, 14, "b", "python"),
        ("g", 20, 30, "b", "python"), ("h", 21, 29, "g", "python"),
        ("exit", 40, 41, "b", "python"),
        ("exit", 50, 51, "a", "python"),
        ("after", 60, 70, "f", "python")]


def test_an_unclosed_region_ends_with_the_call_that_opened_it():
    rows = [("f", 0, 100, -1, 0), ("enter", 10, 12, 0, A), ("g", 20, 70, 0, 0),
            ("k", 25, 60, 2, 0), ("exit", 40, 41, 3, EXIT),    # an __exit__ one level down
            ("next", 200, 300, -1, 0)]
    assert with_regions(rows) == [
        ("f", 0, 100, None, "python"),
        ("a", 10, 100, "f", "annotation"), ("enter", 10, 12, "a", "python"),
        ("g", 20, 70, "a", "python"), ("k", 25, 60, "g", "python"),
        ("exit", 40, 41, "k", "python"),
        ("next", 200, 300, None, "python")]


def test_a_root_region_without_exit_lasts_to_the_threads_end():
    rows = [("enter", 10, 12, -1, A), ("g", 20, 30, -1, 0), ("h", 22, 28, 1, 0),
            ("last", 40, 90, -1, 0)]
    assert with_regions(rows) == [
        ("a", 10, 90, None, "annotation"), ("enter", 10, 12, "a", "python"),
        ("g", 20, 30, "a", "python"), ("h", 22, 28, "g", "python"),
        ("last", 40, 90, "a", "python")]


def test_an_exit_without_a_region_and_no_regions_change_nothing():
    rows = [("f", 0, 100, -1, 0), ("exit", 10, 12, 0, EXIT), ("g", 20, 30, 0, MODULE)]
    names, slices = replayed(rows)
    kinds = ["python"] * len(names)
    out, n = insert_regions(TorchRegions(TAGS, names, kinds), slices, len(rows))
    assert n == 3 and out == slices             # no region opened: the same array
    out, n = insert_regions(TorchRegions(TAGS[:1] + TAGS[3:], list(names), list(kinds)),
                            slices, len(rows))
    assert out == slices and TorchRegions(TAGS[:1] + TAGS[3:], [], []).keys is None


def test_the_step_is_named_on_torchs_region_or_else_on_the_wrapper():
    step_name = "Optimizer.step#Adam.step"
    tags = [None, {"kind": "region", "name": step_name}, {"kind": "region_end", "name": ""},
            {"kind": "optimizer", "name": step_name, "optimizer_id": 0, "class": "Adam",
             "step": 0}]

    def named(with_region):
        # the profile_hook_step wrapper: record_function(step name) around the step,
        # then the tagged _optimizer_step_code call
        rows = [("wrapper", 0, 100, -1, 0), ("enter", 1, 2, 0, 1 if with_region else 0),
                ("step_code", 50, 51, 0, 3), ("exit", 90, 91, 0, 2 if with_region else 0)]
        names, slices = replayed(rows)
        kinds = ["python"] * len(names)
        out, n = insert_regions(TorchRegions(tags, names, kinds), slices, len(rows))
        name_tagged_calls(tags, [], [(out, n)], names, kinds, {})
        return [(names[out[i].key], kinds[out[i].key]) for i in range(n)]

    # torch's region is the step, as in torch.profiler; the wrapper keeps its name
    assert named(True) == [("wrapper", "python"), (step_name, "annotation"),
                           ("enter", "python"), ("step_code", "python"), ("exit", "python")]
    # no region around it: the wrapper call carries the step's name
    assert named(False) == [(step_name, "python"), ("enter", "python"),
                            ("step_code", "python"), ("exit", "python")]


def test_a_short_output_buffer_is_refused_not_overrun():
    rows = [("f", 0, 100, -1, 0), ("enter", 10, 12, 0, A), ("exit", 40, 41, 0, EXIT)]
    names, slices = replayed(rows)
    keys = ffi.new("uint32_t[]", [0, 1, 2, lib.PT_REGION_EXIT])
    assert oracle_lib().pt_insert_regions(slices, 3, keys, 4, ffi.NULL, 0, ffi.NULL) == 1
    out = ffi.new("pt_slice[]", 4)
    scratch = ffi.new("int64_t[]", 3 + 2)
    assert oracle_lib().pt_insert_regions(slices, 3, keys, 4, out, 3, scratch) == 2 ** 64 - 1
    assert oracle_lib().pt_insert_regions(slices, 3, keys, 4, out, 4, scratch) == 4
