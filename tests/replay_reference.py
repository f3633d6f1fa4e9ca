"""The tests' independent reference for the streaming walk (c_src/pt_walk.c): the
slice table made another way, as the package made it before every table came from
the walk. Replay (tests/c_oracle/pt_replay.c, built by oracle_build.py) pairs each thread's events into slices whole;
then the slice pipeline works on the whole table: torch regions inserted
(pt_insert_regions), tagged calls named, calls shorter than min_duration dropped
(pt_drop_short_slices), carriers dropped (pt_drop_keys).

reference_table(trace) is that table for a trace whose events are at hand (a
stopped session's, a loaded spilled directory's); table_checked_against_replay
holds the trace's own table (Trace.thread_slices, the walk's) to it, field for
field. test_streaming, test_html_stream and test_oracle use it on traces of
threads, options (max_events drops, filters, min_duration), spilled directories
and torch (real and the stand-in).
"""
import json

from pytrace_cffi._core import ffi, lib
from pytrace_cffi._torch import MODULE_CALL, OPTIMIZER_STEP

from oracle_build import oracle_lib

SLICE_FIELDS = ("start", "end", "key", "flags", "parent", "tag", "depth")


def reference_table(trace):
    """[(pt_slice array, n)] per thread by replay and the slice pipeline, with the
    keys of the trace's KeyPlan; None for a trace without events (slices.bin, a
    joined job, a JSON read back)."""
    streams = trace._streams
    if streams is None or not hasattr(streams, "plan"):
        return None
    streams.stats                   # the scans ran: record_function args have their keys
    plan, clock = streams.plan, streams.clock
    hidden = plan.hidden
    slices = []
    for source in streams.sources:
        table, n = _replay(source, streams.stop_ticks, hidden, clock)
        assert lib.pt_validate_slices(table, n, len(plan.names)) == -1
        slices.append(insert_regions(plan.regions, table, n))
    name_tagged_calls(plan.tags, plan.annotation_args, slices, plan.names, plan.key_kinds,
                      plan.key_args, plan)
    # named first: a step's parent keeps its name when the step is too short to keep
    slices = [(table, drop_short(table, n, streams.min_duration_ns)) for table, n in slices]
    return drop_carriers(slices, hidden)


def _replay(source, stop_ticks, hidden, clock):
    """A thread's events (a stopped session's chunks, a spill file's blocks, a
    test's list: each in runs), replayed from all of them at once."""
    replay = oracle_lib()
    raw = b"".join(bytes(ffi.buffer(events, n * ffi.sizeof("pt_event")))
                   for events, n in source.runs())
    n_events = len(raw) // ffi.sizeof("pt_event")
    events = ffi.from_buffer("pt_event[]", raw) if raw else ffi.new("pt_event[]", 1)
    n_calls = replay.pt_count_calls(events, n_events)
    table = ffi.new("pt_slice[]", max(1, n_calls))
    n_out = ffi.new("uint64_t *")
    assert replay.pt_replay_buffer(events, n_events, source.base_ticks, stop_ticks, hidden,
                                   len(hidden), clock["tick0"], clock["ns0"],
                                   clock["ns_per_tick"], table, n_calls, n_out) == lib.PT_OK
    return table, n_out[0]


def rows(table, n):
    """A thread's slices as tuples of SLICE_FIELDS."""
    return [tuple(getattr(table[i], field) for field in SLICE_FIELDS) for i in range(n)]


def table_checked_against_replay(trace):
    """Builds the trace's slice table (the walk's) and, when the trace has events,
    checks it equals the reference's, thread by thread and field by field.
    Returns whether it had events to check against (a loaded slices.bin, a joined
    job or a JSON read back has none)."""
    expected = reference_table(trace)
    got = [(slices, n) for _, slices, n in trace.thread_slices()]
    assert trace.slices_built()
    if expected is None:
        return False
    assert len(got) == len(expected)
    for index, ((table, n), (want, want_n)) in enumerate(zip(got, expected)):
        assert rows(table, n) == rows(want, want_n), f"thread {index}"
    return True


# --- the slice pipeline ------------------------------------------------------------

def insert_regions(regions, slices, n):
    """(slices, n) with the torch regions of regions (a trace.TorchRegions) inserted:
    the same array when there are none."""
    if regions.keys is None or not n:
        return slices, n
    replay = oracle_lib()
    extra = replay.pt_insert_regions(slices, n, regions.keys, regions.n_tags, ffi.NULL, 0,
                                  ffi.NULL)
    if not extra:
        return slices, n
    out = ffi.new("pt_slice[]", n + extra)
    scratch = ffi.new("int64_t[]", n + 2 * extra)
    written = replay.pt_insert_regions(slices, n, regions.keys, regions.n_tags, out, n + extra,
                                    scratch)
    assert written == n + extra, f"torch regions: {written} slices written, {n + extra} expected"
    return out, written


def drop_carriers(slices, hidden):
    """After name_tagged_calls: the calls of code the filters left out that were
    kept for the name they carry (torch's record_function.__enter__/__exit__, an
    optimizer step's hook, an nn.Module call the watcher could not name) go,
    each alone, now that the named slices exist."""
    drop = bytes(1 if hide == lib.PT_HIDE_CARRIER else 0 for hide in hidden)
    if not any(drop):
        return slices
    dropped = []
    for thread_slices, n in slices:
        if n:
            n = oracle_lib().pt_drop_keys(thread_slices, n, drop, len(drop), ffi.new("int64_t[]", n))
        dropped.append((thread_slices, n))
    return dropped


def drop_short(slices, n, min_duration_ns):
    """Leaves out calls shorter than min_duration_ns; returns how many remain."""
    if not min_duration_ns or not n:
        return n
    scratch = ffi.new("int64_t[]", n)
    return oracle_lib().pt_drop_short_slices(slices, n, min_duration_ns, scratch)


def _new_tagged_keys(names, key_kinds, key_args):
    """(key_for(tag info), key_with_args(key, args)): new keys, each made once,
    appended to names, key_kinds and key_args."""
    key_for_name = {}
    key_for_args = {}

    def key_with_args(key, args):
        identity = (key, json.dumps(args, sort_keys=True))
        found = key_for_args.get(identity)
        if found is None:
            found = key_for_args[identity] = len(names)
            names.append(names[key])
            key_kinds.append(key_kinds[key])
            key_args[found] = dict(args)
        return found

    def key_for(tag_info):
        key = key_for_name.get(tag_info["name"])
        if key is None:
            key = key_for_name[tag_info["name"]] = len(names)
            names.append(tag_info["name"])
            key_kinds.append("python")
            if tag_info["kind"] == MODULE_CALL:
                key_args[key] = {"Python module id": tag_info["module_id"]}
        return key
    return key_for, key_with_args


def name_tagged_calls(tags, annotation_args, slices, names, key_kinds, key_args, plan=None):
    """Gives tagged calls keys of their own: a module call becomes "nn.Module:
    Linear_0"; the call that ran an optimizer step (the parent of the tagged
    _optimizer_step_code call) becomes "Optimizer.step#Adam.step" unless torch's
    own region of that name already is that parent; a record_function region with
    args gets a key carrying those args. plan: a walk.KeyPlan whose keys to use."""
    if len(tags) <= 1 and not annotation_args:
        return
    if plan is not None:            # the keys the streaming walks use (walk.KeyPlan)
        key_for, key_with_args = plan.key_for, plan.key_with_args
    else:
        key_for, key_with_args = _new_tagged_keys(names, key_kinds, key_args)

    for thread_slices, n in slices:
        count = oracle_lib().pt_tagged_slices(thread_slices, n, ffi.NULL, 0)
        if not count:
            continue
        indices = ffi.new("uint64_t[]", count)
        oracle_lib().pt_tagged_slices(thread_slices, n, indices, count)
        for i in indices:
            s = thread_slices[i]
            if s.tag & lib.PT_TAG_ARGS_BIT:
                index = s.tag & ~lib.PT_TAG_ARGS_BIT
                # empty args need no key of their own (and would export as ",")
                if index < len(annotation_args) and annotation_args[index]:
                    s.key = key_with_args(s.key, annotation_args[index])
                continue
            if s.tag >= len(tags):
                continue            # a damaged file's stray tag: keep the plain name
            info = tags[s.tag]
            if info["kind"] == MODULE_CALL:
                s.key = key_for(info)
            elif info["kind"] == OPTIMIZER_STEP and s.parent >= 0:
                parent = thread_slices[s.parent]
                # torch's wrapper calls _optimizer_step_code inside its own
                # record_function region of that name: that region is the step,
                # as in torch.profiler. Without it, the wrapper call is named.
                if not (key_kinds[parent.key] == "annotation"
                        and names[parent.key] == info["name"]):
                    parent.key = key_for(info)
