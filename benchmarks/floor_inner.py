"""The hook floor, as the benchmarks' measuring processes define it: pasted into
their scripts (they run as `python -c`), after `sys.path` holds the floor module
_mon's directory (../../shared/bench/floor_build.py builds it) and `sys` and
`time` are imported. floor(w) times w() under an empty C hook: on 3.12+ a
sys.monitoring tool, before it a profile function on every thread."""
FLOOR = r'''
import _mon
if sys.version_info >= (3, 12):
    floor_on, floor_off = (lambda: _mon.lib.mon_start(1)), _mon.lib.mon_stop
else:
    floor_on, floor_off = _mon.lib.noop_start_threads, _mon.lib.noop_stop_threads


def floor(w):
    t0 = time.perf_counter(); floor_on(); w(); floor_off()
    return time.perf_counter() - t0
'''


def measuring_env():
    """The environment of a measuring process run from "/": PYTHONPATH made
    absolute, so it measures the pytrace_cffi this process imports (a source tree
    given as PYTHONPATH=.), not an installed one."""
    import os
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in
                                        env.get("PYTHONPATH", "").split(os.pathsep) if p)
    return env
