"""torch.distributed's collectives in the flight recorder's dumps, torch never
imported here (issue 30 item 9).

Recording, with the flight recorder only and once the program has imported
torch.distributed: the torch watcher (_torch.py) has the C core ask about each
new code object named as one of COLLECTIVES; torch's own (in
torch/distributed/distributed_c10d.py) are watched, and each of their calls runs
CollectiveLog.on_call(frame), which notes its kind, its group's name, the
sequence number torch gives it (the group's count of collectives issued, plus
one: torch counts a collective as it issues it) and its input tensors' shapes,
dtype and bytes, in a ring of CALLS_KEPT. It adds no event: the call stays an
ordinary call of the trace. Without the flight recorder, or before the program
imports torch.distributed, nothing of this runs (a code object's name is looked
up once, when the C core first sees it).

At a dump, dump_field() (a field of dump.json, "collectives") says, reading
only, never calling a collective: this process's rank and world size, each
process group (name, description, global ranks, torch's count of collectives
issued in it), the collective each thread is in now (from its frames), the
calls noted, and the entries of torch's own flight recorder when it keeps them
(TORCH_FR_BUFFER_SIZE > 0: torch._C._distributed_c10d._dump_fr_trace_json, in
a thread of ours waited for TORCH_WAIT_S at most). Everything is bounded in
number and length; whatever fails is a line in "problems", never an exception.
flight/collectives.py reads it back for `report`.
"""
import collections
import json
import os
import sys
import threading
import time

C10D = "torch.distributed.distributed_c10d"
C10D_FILE = os.path.join("distributed", "distributed_c10d.py")
# torch.distributed's collectives, by their functions' names in distributed_c10d.
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_coalesced", "all_gather_object", "all_to_all", "all_to_all_single",
    "barrier", "broadcast", "broadcast_object_list", "gather", "gather_object",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
    "scatter_object_list", "_all_gather_base", "_reduce_scatter_base",
})
# A collective's input, by the name of its argument: the first one present counts.
INPUTS = ("tensor", "input_tensor", "input", "input_tensor_list", "input_list", "tensors",
          "tensor_list", "object_list", "obj")
CALLS_KEPT = 32             # calls noted (a ring)
GROUPS_KEPT = 64            # process groups described in a dump
SHAPES_KEPT = 8             # shapes kept of one call's input list
TORCH_ENTRIES_KEPT = 32     # the newest entries of torch's flight recorder
TORCH_WAIT_S = 2.0          # for torch's flight recorder to answer
TEXT_KEPT = 200             # characters of a name, a description, a problem
# (flight/recorder.py's THREAD_NAME begins it: a dump's stacks leave it out)
THREAD_NAME = "pytrace_cffi: flight: torch"
TORCH_BUFFER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def is_collective_code(code):
    """Whether code is one of torch.distributed's collectives (torch loaded)."""
    return (code.co_name in COLLECTIVES and C10D in sys.modules
            and code.co_filename.endswith(C10D_FILE))


class CollectiveLog:
    """The collectives this process called, newest CALLS_KEPT (see the module's
    doc): each as the raw facts read at its call (_raw_call), made words at a dump
    (described)."""

    def __init__(self):
        self.calls = collections.deque(maxlen=CALLS_KEPT)

    def on_call(self, frame):
        """A call of a watched collective, its frame current: noted. Never raises."""
        try:
            self.calls.append(_raw_call(frame, 1))
        except Exception:           # noqa: BLE001 - the program's call goes on
            pass


def _raw_call(frame, ahead):
    """(kind, group name, seq, native id, monotonic ns, raw input) of a
    collective's frame, read as cheaply as can be (the call waits for it): seq is
    torch's count plus ahead (1 as the call begins: torch counts it as it issues
    it); the input's shapes and dtype stay objects until a dump (_described)."""
    arguments = frame.f_locals
    group = arguments.get("group")
    if group is None:
        c10d = sys.modules.get(C10D)
        try:
            group = c10d._get_default_group()
        except Exception:           # noqa: BLE001 - not initialised
            group = None
    seq = _count(group)
    return (frame.f_code.co_name, _name(group), None if seq is None else seq + ahead,
            threading.get_native_id(), time.monotonic_ns(), _raw_input(arguments))


def _raw_input(arguments):
    """(shapes, how many more, dtype, elements) of the first of INPUTS present,
    elements None when not counted; None when it holds no tensor."""
    for name in INPUTS:
        value = arguments.get(name)
        if value is None:
            continue
        if hasattr(value, "shape"):         # one tensor: the common case, kept cheap
            try:
                return (value.shape,), 0, getattr(value, "dtype", None), value.numel()
            except Exception:       # noqa: BLE001 - not a torch tensor after all
                return (value.shape,), 0, getattr(value, "dtype", None), None
        tensors = value[:1000] if isinstance(value, (list, tuple)) else (value,)
        tensors = [t for t in tensors if hasattr(t, "shape")]
        if not tensors:
            return None
        try:
            elements = sum(t.numel() for t in tensors)
        except Exception:           # noqa: BLE001 - not a torch tensor after all
            elements = None
        return (tuple(t.shape for t in tensors[:SHAPES_KEPT]),
                max(0, len(tensors) - SHAPES_KEPT), getattr(tensors[0], "dtype", None),
                elements)
    return None


def _described(raw):
    """A raw call (_raw_call) as dump.json says it."""
    kind, group, seq, native_id, monotonic_ns, raw_input = raw
    call = {"kind": kind, "group": group, "seq": seq, "native_id": native_id,
            "monotonic_ns": monotonic_ns}
    if raw_input is not None:
        shapes, more, dtype, elements = raw_input
        width = getattr(dtype, "itemsize", None)
        call.update(shapes=[[int(n) for n in shape][:16] for shape in shapes],
                    more_shapes=more, dtype=None if dtype is None
                    else _text(str(dtype).replace("torch.", "")),
                    bytes=elements * width if isinstance(elements, int)
                    and isinstance(width, int) else None)
    return call


def _name(group):
    try:
        return _text(group.group_name)
    except Exception:               # noqa: BLE001
        return None


def _count(group):
    try:
        count = group._get_sequence_number_for_group()   # (a getter: no communication)
        return count if isinstance(count, int) else None
    except Exception:               # noqa: BLE001
        return None


def _text(value):
    return value[:TEXT_KEPT] if isinstance(value, str) else None


# -- at a dump ---------------------------------------------------------------------

def dump_field(log, frames=None):
    """dump.json's "collectives" of this process, or None when the program has not
    imported torch.distributed or has no default group. log: the CollectiveLog
    (None: not recorded); frames: sys._current_frames() (read when None). Never
    raises."""
    c10d = sys.modules.get(C10D)
    if c10d is None:
        return None
    problems = []
    try:
        if not c10d.is_initialized():
            return None
        field = {"rank": c10d.get_rank(), "world_size": c10d.get_world_size()}
    except Exception as exc:        # noqa: BLE001 - a torch API failing is a line
        return {"problems": [_problem("torch.distributed's rank", exc)]}
    calls = [_described(raw) for raw in (list(log.calls) if log is not None else ())]
    field["groups"] = _groups(c10d, problems)
    field["waiting"] = _waiting(calls, frames, problems)
    field["calls"] = calls
    field["recorded"] = log is not None
    field["torch_flight_recorder"] = torch_flight_recorder(problems)
    field["problems"] = problems
    return field


def _groups(c10d, problems):
    """Each process group: name, description, global ranks, torch's count."""
    groups = []
    try:
        members = dict(c10d._world.pg_group_ranks)      # group -> {global rank: its rank}
    except Exception as exc:        # noqa: BLE001
        problems.append(_problem("torch.distributed's groups", exc))
        return groups
    for group, ranks in list(members.items())[:GROUPS_KEPT]:
        try:
            description = _text(getattr(group, "group_desc", None))
            groups.append({"name": _name(group),
                           "description": None if description == "undefined" else description,
                           "ranks": sorted(ranks)[:4096], "seq": _count(group)})
        except Exception as exc:    # noqa: BLE001
            problems.append(_problem("a process group", exc))
    if len(members) > GROUPS_KEPT:
        problems.append(f"{len(members) - GROUPS_KEPT} more process groups not described")
    return groups


def _waiting(calls, frames, problems):
    """The collective each thread is in now, its innermost one, from its frames."""
    try:
        frames = sys._current_frames() if frames is None else frames
        threads = {t.ident: t for t in threading.enumerate()}
        waiting = []
        for ident, frame in frames.items():
            while frame is not None and not is_collective_code(frame.f_code):
                frame = frame.f_back
            if frame is None:
                continue
            thread = threads.get(ident)
            native_id = getattr(thread, "native_id", None)
            call = _described(_raw_call(frame, 0))
            call.update(native_id=native_id, thread=_text(getattr(thread, "name", None)))
            del call["monotonic_ns"]
            noted = _noted(calls, native_id, call["kind"], call["group"])
            if noted is not None and noted["seq"] is not None and (
                    call["seq"] is None or noted["seq"] > call["seq"]):
                call["seq"] = noted["seq"]  # (not issued yet: torch has not counted it)
            waiting.append(call)
        return waiting
    except Exception as exc:        # noqa: BLE001
        problems.append(_problem("the collectives threads are in", exc))
        return []


def _noted(calls, native_id, kind, group):
    """The newest of calls of that thread, kind and group, or None."""
    for call in reversed(calls):
        if call["native_id"] == native_id and call["kind"] == kind and call["group"] == group:
            return call
    return None


def torch_flight_recorder(problems):
    """The newest entries of torch's own flight recorder and its groups' status,
    or {"off": why} when torch keeps none (never asked then)."""
    size = None
    for variable in TORCH_BUFFER_VARIABLES:
        if os.environ.get(variable):
            size = os.environ[variable]
            break
    try:
        entries = int(size or 0)
    except ValueError:
        entries = 0
    if entries <= 0:
        return {"off": "torch's flight recorder keeps nothing (TORCH_FR_BUFFER_SIZE is "
                       f"{'unset' if size is None else repr(_text(size))})"}
    answer = _ask_torch()
    if isinstance(answer, str):
        problems.append(answer)
        return {"off": answer}
    return answer


def _ask_torch():
    """torch's _dump_fr_trace_json, parsed and cut down, or a problem in words;
    asked from a thread of ours and waited for TORCH_WAIT_S at most."""
    c10d_c = sys.modules.get("torch._C._distributed_c10d")
    dump = getattr(c10d_c, "_dump_fr_trace_json", None)
    if dump is None:
        return "torch's flight recorder: this torch has no _dump_fr_trace_json"
    result = []

    def ask():
        from ._core import lib
        from ._own_threads import own_thread_begin
        own_thread_begin()                      # (never traced, takes no signal)
        try:
            result.append(dump(includeCollectives=True, onlyActive=False))
        except Exception as exc:                # noqa: BLE001
            result.append(exc)
        finally:
            lib.pt_own_thread_end()

    thread = threading.Thread(target=ask, name=THREAD_NAME, daemon=True)
    thread.start()
    thread.join(TORCH_WAIT_S)
    if not result:
        return f"torch's flight recorder did not answer within {TORCH_WAIT_S:g} s"
    if isinstance(result[0], Exception):
        return _problem("torch's flight recorder", result[0])
    try:
        data = json.loads(result[0][:64 << 20])
        entries = [_entry(e) for e in data.get("entries", [])[-TORCH_ENTRIES_KEPT:]]
        status = {_text(str(k)): {_text(str(a)): _text(str(b)) for a, b in list(v.items())[:8]}
                  for k, v in list(data.get("pg_status", {}).items())[:GROUPS_KEPT]}
        return {"version": _text(str(data.get("version"))), "entries": entries,
                "pg_status": status}
    except Exception as exc:        # noqa: BLE001
        return _problem("torch's flight recorder's answer", exc)


DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4,
               "Short": 2, "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8,
               "ComplexDouble": 16}


def _entry(entry):
    """One entry of torch's flight recorder, as the calls noted here."""
    kind = str(entry.get("profiling_name", ""))
    group = entry.get("process_group") or [None]
    sizes = entry.get("input_sizes") or []
    dtypes = entry.get("input_dtypes") or []
    total = 0
    for shape, dtype in zip(sizes, dtypes):
        width = DTYPE_BYTES.get(dtype)
        if width is None or total is None:
            total = None
            continue
        count = 1
        for n in shape:
            count *= int(n)
        total += count * width
    return {"kind": _text(kind.split(":")[-1]), "group": _text(str(group[0])),
            "seq": entry.get("collective_seq_id"), "state": _text(str(entry.get("state"))),
            "retired": entry.get("retired"),
            "shapes": [[int(n) for n in s][:16] for s in sizes[:SHAPES_KEPT]],
            "more_shapes": max(0, len(sizes) - SHAPES_KEPT),
            "dtype": _text(str(dtypes[0])) if dtypes else None,
            "bytes": total if sizes else None}


def _problem(what, exc):
    return _text(f"{what}: {exc.__class__.__name__}: {exc}")
