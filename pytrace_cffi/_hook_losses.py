"""What losing the profile hook to other code cost a trace, told in words: the
Trace.hook_lost entries (which thread, since when, taken by what, what the
trace holds from before) and stop()'s warning. _tracer.Session notices the
losses; this module describes them once the session stopped."""
import sys

from . import _clock
from ._core import ffi, lib
from ._status import check
from ._stopped import thread_name
from .model.trace import StoredTrace

USE_MONITORING = sys.version_info >= (3, 12)    # (as _tracer's: no thread hook to check)


def describe_hook_losses(session, raw_losses):
    """Trace.hook_lost entries: one dict per thread that lost our hook (scope
    "thread"), for sys.monitoring losing it on every thread ("process"), or for
    threads started later not being followed ("new threads"). after_ms: the last
    event recorded before the loss, in ms after start (the loss came after it;
    None when unknown); noticed_ms: when pytrace_cffi saw it; taken_by: what was
    found instead; events: what was recorded (on that thread, or in all); calls
    is filled by count_calls once the trace exists."""
    if not raw_losses:
        return []
    ms = _ms_after_start(session)
    infos = []
    for index in range(lib.pt_thread_count(session.ptr)):
        info = ffi.new("pt_thread_info *")
        check(lib.pt_thread_get_info(session.ptr, index, info), session.ptr, "thread info")
        infos.append(info)
    losses = []
    for scope, index, last, noticed, cause in raw_losses:
        entry = {"scope": scope, "thread": None, "native_id": None, "after_ms": ms(last),
                 "noticed_ms": ms(noticed), "taken_by": cause, "calls": None,
                 "thread_index": index}
        if index is not None:
            info = infos[index]
            entry["thread"] = thread_name(session, info)
            entry["native_id"] = (info.native_id
                                  or session.thread_native_id(info.ident) or None)
            entry["events"] = info.n_events
        else:
            entry["events"] = sum(info.n_events for info in infos)
        losses.append(entry)
    return losses


def _ms_after_start(session):
    """ticks -> milliseconds after start (None stays None)."""
    tick0 = lib.pt_start_ticks(session.ptr)
    ms_per_tick = _clock.ns_per_tick() / 1e6
    return lambda ticks: None if ticks is None else round((ticks - tick0) * ms_per_tick, 3)


def finish_hook_losses(session, result):
    """The Trace.hook_lost entries of a stopped session, once its trace exists:
    adds threads that lost the hook and ended before any check could see it
    (3.9-3.11: a thread that ends with our hook returns from all its frames, so
    one gone at stop with calls still open had lost it), then counts calls.
    Only a thread that ended with a call open (pt_thread_ends_open, a read of its
    events) has the trace count its calls: stop() stays O(threads) otherwise."""
    losses = list(session.hook_losses)
    if not USE_MONITORING and not isinstance(result, StoredTrace):
        reported = {loss.get("thread_index") for loss in losses}
        last = ffi.new("int64_t *")
        suspects = [index for index in range(lib.pt_thread_count(session.ptr))
                    if index not in reported
                    and lib.pt_thread_at_stop(session.ptr, index, last) == 0
                    and lib.pt_thread_ends_open(session.ptr, index) == 1]
        counts = {thread.index: (thread, n, open_calls)
                  for thread, n, open_calls, _ in result.thread_counts()} if suspects else {}
        ms = _ms_after_start(session) if suspects else None
        for index in suspects:
            thread, n, open_calls = counts[index]
            if not n or not open_calls:
                continue
            lib.pt_thread_at_stop(session.ptr, index, last)
            losses.append({
                "scope": "thread", "thread": thread.name, "native_id": thread.native_id or None,
                "after_ms": ms(last[0]), "noticed_ms": ms(lib.pt_stop_ticks(session.ptr)),
                "taken_by": (f"the thread ended with {open_calls} calls open (closed at stop "
                             "time here): its hook went before, to something unknown"),
                "calls": None, "thread_index": thread.index, "events": thread.n_events})
    return count_calls(losses, result)


def count_calls(losses, result):
    """Fills each loss's calls with what the trace holds (on that thread, or in
    all): an in-memory Trace counts them; a spilled one leaves None (events say)."""
    counts = None
    if losses and not isinstance(result, StoredTrace):
        counts = {thread.index: n for thread, n, _, _ in result.thread_counts()}
    for loss in losses:
        index = loss.pop("thread_index", None)
        if counts is not None:
            loss["calls"] = counts.get(index, 0) if index is not None else sum(counts.values())
    return losses


def hook_loss_message(losses):
    """The TraceWarning text for stop(): which hooks went when, and what was kept."""
    lines = ["pytrace_cffi lost its hook to other code while tracing; nothing was "
             "recorded where it was lost, from then on:"]
    for loss in losses:
        if loss["scope"] == "thread":
            where = f"thread {loss['thread']!r} (native id {loss['native_id']})"
        elif loss["scope"] == "process":
            where = "every thread"
        else:
            where = "threads started afterwards (not followed)"
        if loss["after_ms"] is not None:
            when = (f"after {loss['after_ms']:.3f} ms, its last recorded event "
                    f"(noticed at {loss['noticed_ms']:.3f} ms)")
        else:
            when = f"noticed at {loss['noticed_ms']:.3f} ms"
        kept = "on that thread" if loss["scope"] == "thread" else "in all"
        recorded = (f"{loss['events']} events" if loss["calls"] is None
                    else f"{loss['calls']} calls")
        lines.append(f"  {where}: {when}; {loss['taken_by']}; the trace holds "
                     f"{recorded} {kept}, from before")
    lines.append("(times in ms after start(); details in the trace's hook_lost)")
    return "\n".join(lines)
