"""A trace's realtime anchor (Trace.realtime_anchor): the CLOCK_MONOTONIC /
CLOCK_REALTIME readings paired at start and at stop, what puts its calls on
wall-clock time (torch.profiler's timeline, the job's hosts). Part of the model:
read back from files (checked_anchor) and used by the merges; the recorder
makes one (anchor_from)."""


ANCHOR_FIELDS = ("monotonic_ns", "realtime_ns", "spread_ns")


def anchor_from(values):
    """{"start": {...}, "stop": {...}}: the CLOCK_MONOTONIC / CLOCK_REALTIME
    readings the C core paired at start and at stop (see pt_take_anchor), each
    {"monotonic_ns", "realtime_ns", "spread_ns"}, from the six values of
    pt_stop_facts.anchor; what puts a trace on wall-clock time, e.g. on
    torch.profiler's timeline."""
    return {"start": {"monotonic_ns": values[0], "realtime_ns": values[1],
                      "spread_ns": values[2]},
            "stop": {"monotonic_ns": values[3], "realtime_ns": values[4],
                     "spread_ns": values[5]}}


def checked_anchor(value):
    """A realtime anchor read from a file: None when absent (files written before
    anchors existed), else the same dict; ValueError when malformed."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"start", "stop"}:
        raise ValueError("realtime_anchor must have exactly start and stop")
    for moment in value.values():
        if not isinstance(moment, dict) or set(moment) != set(ANCHOR_FIELDS) or not all(
                type(moment[f]) is int and 0 <= moment[f] < 2 ** 63 for f in ANCHOR_FIELDS):
            raise ValueError("realtime_anchor: each moment needs monotonic_ns, realtime_ns "
                             "and spread_ns as non-negative integers")
    return {name: dict(value[name]) for name in ("start", "stop")}


def monotonic_to_realtime(anchor, monotonic_ns):
    """Realtime ns for a monotonic reading: the offset between the clocks taken
    from the start and stop anchors, linearly in between (NTP may slew
    CLOCK_REALTIME while tracing), held constant outside."""
    start, stop = anchor["start"], anchor["stop"]
    offset0 = start["realtime_ns"] - start["monotonic_ns"]
    offset1 = stop["realtime_ns"] - stop["monotonic_ns"]
    span = stop["monotonic_ns"] - start["monotonic_ns"]
    if span <= 0:
        return monotonic_ns + offset0
    fraction = min(1.0, max(0.0, (monotonic_ns - start["monotonic_ns"]) / span))
    return monotonic_ns + offset0 + round((offset1 - offset0) * fraction)
