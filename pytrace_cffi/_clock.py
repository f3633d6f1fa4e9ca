"""The event clock and its mapping to nanoseconds.

On x86-64 Linux, when the kernel itself uses the TSC as its clocksource (so it is
invariant and synchronised across cores), the C core stamps events with the TSC
(~10 ns a read against ~24 ns for clock_gettime here). Ticks become nanoseconds
of CLOCK_MONOTONIC (time.monotonic_ns) by a linear map: anchored at the trace's
start, with the slope measured between a reading taken when this module was
imported and one taken at stop (at least 20 ms apart). Elsewhere, or with
PYTRACE_CFFI_CLOCK=monotonic, events carry CLOCK_MONOTONIC nanoseconds directly.
"""
import os
import time

from ._core import ffi, lib

CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
MIN_CALIBRATION_NS = 20_000_000


def _tsc_usable():
    if not lib.pt_tsc_supported() or os.environ.get("PYTRACE_CFFI_CLOCK") == "monotonic":
        return False
    try:
        with open(CLOCKSOURCE, encoding="ascii") as f:
            return f.read().strip() == "tsc"
    except OSError:
        return False


USE_TSC = _tsc_usable()


def reading():
    """(ticks, ns) read at the same moment."""
    ticks, ns = ffi.new("int64_t *"), ffi.new("int64_t *")
    lib.pt_clock_pair(USE_TSC, ticks, ns)
    return ticks[0], ns[0]


_BASELINE = reading()


def ns_per_tick(now=None):
    """The slope of ticks -> ns, measured over the longest span available; now:
    a (ticks, ns) pair just read, if the caller has one."""
    if not USE_TSC:
        return 1.0
    ticks0, ns0 = _BASELINE
    ticks1, ns1 = now or reading()
    if ns1 - ns0 < MIN_CALIBRATION_NS:
        time.sleep((MIN_CALIBRATION_NS - (ns1 - ns0)) / 1e9)
        ticks1, ns1 = reading()
    return (ns1 - ns0) / (ticks1 - ticks0)


def ticks_for_ns(ns):
    """About how many ticks ns nanoseconds are (the flight recorder's age bound)."""
    return int(ns / ns_per_tick()) if USE_TSC else int(ns)


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
