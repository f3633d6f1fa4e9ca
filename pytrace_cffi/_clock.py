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
