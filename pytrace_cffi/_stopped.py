"""What a stopped session becomes (record side): the facts the recorder kept
besides its events (clock mapping, threads, tags, marks, key names, kinds and
hiding) and the Trace made of them. The arrow points from the recorder to the
model: the trace module never reads a session."""
import os
import sys

from . import _clock
from ._core import ffi, lib
from ._hiding import hiding_rules, key_hiding
from ._names import (distinct_code_names, kind_of_source, name_for_source, path_inputs,
                     path_prefixes, program_name)
from ._status import check
from .model.realtime import anchor_from
from .model.trace import Mark, ThreadInfo, Trace


def trace_from_session(session):
    """The trace of a stopped session, made in O(threads): its events stay where
    they are. The keys' names (O(keys), in Python) are made when first read
    (_held_keys), and each thread is scanned (O(events), in C) when first counted;
    exports and iteration stream from the events, and the slice table is made only
    when something asks for it (thread_slices())."""
    ptr = session.ptr
    facts = _stop_facts(session)
    trace = Trace(names=None, key_kinds=None, key_args=None,
                  threads=list(facts["threads"]), slices=None, start_ns=facts["start_ns"],
                  stop_ns=facts["stop_ns"], pid=facts["pid"], python_version=facts["python"],
                  backend=facts["backend"], clock=facts["clock_name"],
                  params=facts["params"], marks=facts["marks"],
                  realtime_anchor=facts["realtime_anchor"])
    trace._ptr = ptr                      # keeps the raw events alive with the trace
    trace._pending_keys = (_held_keys, session, facts)     # (no cycle through the trace)
    trace.label = facts["label"]
    return trace


def _held_keys(trace, session, facts):
    """The rest of a stopped session's trace (see trace_from_session): key names,
    kinds and hiding, the KeyPlan, and the streams over the held events, which scan
    each thread when first counted (at once when record_function args need keys of
    their own: the names are then complete when first read)."""
    from .model.walk import HeldEvents, KeyPlan, Streams     # (when first read)
    ptr = session.ptr
    facts.update(_key_facts(session, facts))
    clock = facts["clock"]
    names, key_kinds = list(facts["names"]), list(facts["key_kinds"])
    key_args = {}
    plan = KeyPlan(names, key_kinds, key_args, facts["hidden"], facts["tags"],
                   facts["annotation_args"])
    sources = [HeldEvents(ptr, thread.index) for thread in facts["threads"]]
    min_duration_ns = session.min_duration_ns
    streams = Streams(plan, sources, clock, clock["stop_ticks"], min_duration_ns,
                      keep_alive=ptr, lazy=not plan.annotation_args)
    trace.names, trace.key_kinds, trace.key_args, trace._streams = names, key_kinds, key_args, streams
    trace._build_slices = streams.table


def session_facts(session):
    """Everything a stopped session knows besides its events: clock mapping, key
    names, kinds and hiding, threads, tags, marks. Shared by the in-memory trace
    and the spilled one."""
    facts = _stop_facts(session)
    facts.update(_key_facts(session, facts))
    return facts


def _stop_facts(session):
    """What stop() needs of a stopped session, in O(threads): clock mapping,
    threads, tags, marks."""
    ptr = session.ptr
    stopped = ffi.new("pt_stop_facts *")
    check(lib.pt_get_stop_facts(ptr, _clock.USE_TSC, stopped), ptr, "stop facts")
    start_ns, tick0, stop_ticks = stopped.start_ns, stopped.start_ticks, stopped.stop_ticks
    # a slope fixed during the run (follow/live.py's encoder used it) holds
    ns_per_tick = (session.fixed_ns_per_tick
                   or _clock.ns_per_tick((stopped.now_ticks, stopped.now_ns)))

    def to_ns(ticks):
        # Same arithmetic as the C walk (double product, truncated), so calls
        # closed at stop end exactly at stop_ns.
        return start_ns + int(float(ticks - tick0) * ns_per_tick)

    threads = []
    infos = ffi.new("pt_thread_info[]", stopped.n_threads)
    check(lib.pt_thread_infos(ptr, infos, stopped.n_threads), ptr, "thread info")
    for index, info in enumerate(infos):
        native_id = info.native_id or session.thread_native_id(info.ident)
        threads.append(ThreadInfo(index, native_id, info.ident, thread_name(session, info),
                                  info.n_events, info.dropped))
    watcher = session.watcher
    return {
        "clock": {"tick0": tick0, "ns0": start_ns, "ns_per_tick": ns_per_tick,
                  "stop_ticks": stop_ticks},
        "start_ns": start_ns,
        "stop_ns": to_ns(stop_ticks),
        "threads": threads,
        "infos": infos,
        "tags": watcher.tags if watcher else [None],
        "annotation_args": session.annotation_args,
        "params": ({"modules": watcher.modules, "optimizer_steps": watcher.optimizer_steps}
                   if watcher else {"modules": [], "optimizer_steps": []}),
        "marks": [Mark(kind, to_ns(ticks), threads[index].native_id, name, payload)
                  for kind, ticks, index, name, payload in session.marks],
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "label": program_name(),
        # what naming and hiding read when the keys are settled, as they were now
        "path_inputs": path_inputs() if session.trim_paths else None,
        "hiding_rules": hiding_rules(),
        "backend": session.backend_name,
        "clock_name": "tsc" if _clock.USE_TSC else "monotonic",
        "min_duration_ns": session.min_duration_ns,
        "realtime_anchor": anchor_from(stopped.anchor),
    }


def _key_facts(session, facts):
    """A stopped session's keys, in O(keys): names, kinds and how traces hide them."""
    ptr = session.ptr
    sources = []
    check(lib.pt_key_sources(ptr, 1, ffi.cast("void *", id(sources))), ptr, "key sources")
    sources.insert(0, None)
    prefixes = path_prefixes(facts["path_inputs"]) if session.trim_paths else ()
    # Code the filters left out can still have frames seeded at start (its key was
    # classified just after): they are left out alone.
    flags = ffi.new("uint8_t[]", len(sources))
    lib.pt_key_flags(ptr, flags, len(sources))
    rules = facts["hiding_rules"]
    hidden = [key_hiding(source, flags[key], rules) for key, source in enumerate(sources)]
    return {
        "names": distinct_code_names(
            sources, [name_for_source(source, prefixes) for source in sources]),
        "key_kinds": [kind_of_source(source) for source in sources],
        "hidden": hidden,
    }


def thread_name(session, info):
    if not info.tstate_id:              # an asyncio task's lane (log_async)
        lane = session.lane_names.get(info.native_id)
        if lane is not None:
            return lane
    thread = session.thread_objects.get(info.tstate_id)
    if thread is not None:
        return thread.name
    thread = session.known_thread(info.ident, info.native_id)
    if thread is not None:
        return thread.name
    return f"Thread {info.native_id or info.ident}"
