#!/usr/bin/env python3
"""Tracer overhead benchmark for pytrace_cffi. Run by hand; it is not a test.

For each shared workload, times run() under several configurations, interleaved
in one process (every pass runs each configuration once, in an order rotating from
pass to pass; a round is one pass, or several for short workloads) and reports medians:

    no tracer | floor (pytrace_cffi hooks, nothing recorded) | ours (pytrace_cffi)
    | cProfile | VizTracer (if installed) | torch.profiler (torch_mlp, if installed)

Only run() is timed; starting, stopping and dropping the trace are not, and the
garbage collector runs between samples. Then, on one pure-Python fib trace of
about 786k events, it measures the resident memory per event while tracing, the
replay speed of stop(), the speed of export_chrome_trace() and of VizTracer's
save().

    python benchmarks/overhead.py [--rounds N] [--quick] [--only NAME]

Workloads come from ../../shared/workloads relative to this file, or from
$PYTRACE_WORKLOADS. Needs only the standard library and pytrace_cffi;
viztracer and torch are used when they import.
"""
import argparse
import cProfile
import ctypes
import datetime
import gc
import importlib
import importlib.util
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import warnings

import pytrace_cffi

WORKLOADS_DIR = os.environ.get("PYTRACE_WORKLOADS") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "workloads")
WORKLOAD_NAMES = ("fib", "builtins_mix", "threads_mix", "torch_mlp")
TORCH_PROFILER_WORKLOADS = ("torch_mlp",)
TRACE_COSTS = "trace-costs"          # the --only name of the single-trace section
OURS, FLOOR = "ours", "floor"        # pytrace_cffi, and its hooks recording nothing

DEFAULT_ROUNDS = 7
QUICK_ROUNDS = 2
MIN_ROUND_SECONDS = 0.15   # a round makes as many passes as untraced runs fit in this...
MAX_PASSES = 8             # ...up to this many (a pass runs each configuration once)
VIZTRACER_ENTRIES = 5_000_000        # far above any workload's call count: nothing dropped
COSTS_FIB_N = 26                     # fib(26): 392,835 calls, about 786k events


# ---------------------------------------------------------------- configurations

class NoTracer:
    """The baseline: run() alone."""
    name = "no tracer"

    def start(self):
        pass

    def finish(self):
        pass


class Pytrace:
    """pytrace_cffi with the given start() options; keeps the last trace's size."""

    def __init__(self, name, **options):
        self.name = name
        self.options = options
        self.last_events = self.last_dropped = 0

    def start(self):
        pytrace_cffi.start(**self.options)

    def finish(self):
        trace = pytrace_cffi.stop()
        self.last_events = count_events(trace)
        self.last_dropped = trace.dropped_events


class CProfile:
    name = "cProfile"

    def start(self):
        self._profile = cProfile.Profile()
        self._profile.enable()

    def finish(self):
        self._profile.disable()
        self._profile = None


class VizTracer:
    """One VizTracer reused for every run, its buffer cleared after each.

    On 3.11 and older, creating a VizTracer installs its hook as threading's
    profile hook and as this thread's profile function (dormant until start), which
    would slow every other configuration (and pytrace_cffi refuses to start over
    another profiler's hook). So its hooks are installed only while it records."""
    name = "VizTracer"

    def __init__(self, viztracer_module):
        hook_before = threading_profile_hook()
        profile_before = sys.getprofile()
        self._tracer = viztracer_module.VizTracer(verbose=0, tracer_entries=VIZTRACER_ENTRIES)
        self._thread_hook = threading_profile_hook()
        threading.setprofile(hook_before)
        sys.setprofile(profile_before)
        self._hook_before_start = None

    def start(self):
        self._hook_before_start = threading_profile_hook()
        threading.setprofile(self._thread_hook)
        self._tracer.start()

    def stop(self):
        self._tracer.stop()
        threading.setprofile(self._hook_before_start)

    def save(self, path):
        self._tracer.save(path)

    def clear(self):
        self._tracer.clear()

    def finish(self):
        self.stop()
        self.clear()


class TorchProfiler:
    name = "torch.profiler"

    def __init__(self, torch_module):
        self._profiler = torch_module.profiler

    def start(self):
        self._profile = self._profiler.profile(
            activities=[self._profiler.ProfilerActivity.CPU], with_stack=True)
        self._profile.__enter__()

    def finish(self):
        self._profile.__exit__(None, None, None)
        self._profile = None


def count_events(trace):
    return sum(thread.n_events for thread in trace.threads)


def threading_profile_hook():
    getter = getattr(threading, "getprofile", None)     # 3.10+
    return getter() if getter else threading._profile_hook


# ---------------------------------------------------------------- optional imports

def import_optional(name):
    """The module, or None when it is not installed or fails to import."""
    if importlib.util.find_spec(name) is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # e.g. torch without numpy
            return importlib.import_module(name)
    except Exception:
        return None


def load_workload(name):
    """The workload module, or None if it needs something not installed."""
    if name == "torch_mlp" and import_optional("torch") is None:
        return None
    path = os.path.join(WORKLOADS_DIR, name + ".py")
    spec = importlib.util.spec_from_file_location("workload_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- timing

def time_one_run(config, run):
    """Seconds of one run() under config; the trace is stopped and dropped after."""
    gc.collect()
    config.start()
    try:
        started = time.perf_counter()
        run()
        elapsed = time.perf_counter() - started
    finally:
        config.finish()
    return elapsed


def passes_per_round(seconds_per_run):
    """How many passes a round makes: as many runs as fit in MIN_ROUND_SECONDS."""
    return max(1, min(MAX_PASSES, math.ceil(MIN_ROUND_SECONDS / seconds_per_run)))


def pass_order(configs, pass_index):
    """configs rotated by pass_index // 2, reversed on odd passes. Over
    2 * len(configs) passes each configuration takes every position twice, and
    it does not always run right after the same one (torch.profiler, say, may
    leave work behind for the next run)."""
    shift = (pass_index // 2) % len(configs)
    order = configs[shift:] + configs[:shift]
    return order[::-1] if pass_index % 2 else order


def sample_seconds(run, configs, passes):
    """{config name: [seconds of pass 0, pass 1, ...]}. Each pass runs every
    configuration once, in an order that changes from pass to pass, so that a
    slow spell of the machine falls on all of them alike."""
    samples = {config.name: [] for config in configs}
    for pass_index in range(passes):
        for config in pass_order(configs, pass_index):
            samples[config.name].append(time_one_run(config, run))
    return samples


def paired_ratio(samples, name, other):
    """(median, lower quartile, upper quartile) of name/other over the passes.
    The runs of one pass are milliseconds apart, so drifts of the machine slower
    than that (this VM alternates between a fast and a slow phase, each lasting a
    fraction of a second to seconds) cancel in each ratio, where a ratio of two
    medians can pair one configuration's fast phase with another's slow one."""
    ratios = sorted(a / b for a, b in zip(samples[name], samples[other]))
    if len(ratios) < 4:
        middle = statistics.median(ratios)
        return middle, ratios[0], ratios[-1]
    low, middle, high = statistics.quantiles(ratios, n=4)
    return middle, low, high


def benchmark_workload(name, run, configs, rounds):
    """Medians of every configuration, with the size of ours' trace."""
    ours = next(config for config in configs if config.name == OURS)
    for config in configs:                   # warm-up: imports, caches, first-seen keys
        time_one_run(config, run)
    untraced = statistics.median(time_one_run(configs[0], run) for _ in range(3))
    passes = rounds * passes_per_round(untraced)
    samples = sample_seconds(run, configs, passes)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {"name": name, "events": ours.last_events, "dropped": ours.last_dropped,
            "samples": passes, "medians": medians, "runs": samples}


# ---------------------------------------------------------------- single-trace costs

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def return_free_memory_to_os():
    """Frees pytrace_cffi's pooled buffers and, with glibc, trims the C heap, so
    that memory freed by earlier runs cannot absorb the next trace's growth."""
    gc.collect()
    pytrace_cffi.release_memory()
    malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if malloc_trim is not None:
        malloc_trim(0)


def timed(function, *args):
    """(result, seconds) of one call."""
    started = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - started


def measure_trace_costs(viztracer, directory):
    """Memory per event, replay and export speeds on one fib(COSTS_FIB_N) trace."""
    return_free_memory_to_os()
    rss_before_start = resident_bytes()
    pytrace_cffi.start()
    fib(COSTS_FIB_N)
    rss_before_stop = resident_bytes()
    trace, replay_seconds = timed(pytrace_cffi.stop)
    events = count_events(trace)
    costs = {"events": events, "calls": len(trace), "dropped": trace.dropped_events,
             "bytes_per_event": (rss_before_stop - rss_before_start) / events,
             "replay": replay_seconds}
    for suffix in (".json", ".json.gz"):
        path = os.path.join(directory, "fib" + suffix)
        costs["export" + suffix] = timed(trace.export_chrome_trace, path)[1]
        costs["size" + suffix] = os.path.getsize(path)
    del trace
    gc.collect()
    if viztracer is not None:
        costs["viztracer_save"] = viztracer_save_seconds(viztracer, directory)
    return costs


def viztracer_save_seconds(viztracer, directory):
    """Seconds of VizTracer's save() (parsing its buffer, then writing JSON)."""
    viztracer.start()
    fib(COSTS_FIB_N)
    viztracer.stop()
    seconds = timed(viztracer.save, os.path.join(directory, "fib_viztracer.json"))[1]
    viztracer.clear()
    return seconds


# ---------------------------------------------------------------- report

def print_header(viztracer_module, torch_module):
    def version_of(module):
        return getattr(module, "__version__", "?") if module else "not installed"

    print("pytrace_cffi overhead benchmark")
    print(f"  python       {platform.python_implementation()} {sys.version.split()[0]}"
          f" ({sys.executable})")
    print(f"  platform     {platform.platform()}, {os.cpu_count()} CPUs")
    print(f"  date         {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M:%S %z}")
    print(f"  pytrace_cffi {pytrace_cffi.__version__} ({os.path.dirname(pytrace_cffi.__file__)})")
    print(f"  viztracer    {version_of(viztracer_module)}")
    print(f"  torch        {version_of(torch_module)}")
    print(f"  workloads    {os.path.normpath(WORKLOADS_DIR)}")
    print()


def print_overhead_table(results, rounds):
    print(f"Median seconds of run() ({rounds} rounds, configurations interleaved)")
    print(f"{'workload':<14}{'events':>10}  {'samples':>7}  {'config':<16}{'median s':>10}"
          f"{'vs none':>9}")
    for result in results:
        medians = result["medians"]
        baseline = medians[NoTracer.name]
        first = True
        for config_name, seconds in medians.items():
            lead = (f"{result['name']:<14}{result['events']:>10,}  {result['samples']:>7}  "
                    if first else " " * 35)
            print(f"{lead}{config_name:<16}{seconds:>10.5f}{seconds / baseline:>8.2f}x")
            first = False
        if result["dropped"]:
            print(f"{'':35}(ours dropped {result['dropped']:,} events)")
    print()


def print_ratio_table(results):
    others = [other for other in (FLOOR, VizTracer.name, CProfile.name, TorchProfiler.name)
              if any(other in result["medians"] for result in results)]
    print("Ratios ours / other, paired within each pass: median (quartiles); "
          "below 1 means ours is faster")
    print(f"{'workload':<14}" + "".join(f"{'ours/' + other:>22}" for other in others))
    for result in results:
        cells = []
        for other in others:
            if other in result["runs"]:
                middle, low, high = paired_ratio(result["runs"], OURS, other)
                cells.append(f"{middle:>9.2f}x ({low:.2f}-{high:.2f})")
            else:
                cells.append(f"{'-':>22}")
        print(f"{result['name']:<14}" + "".join(cells))
    print()


def print_trace_costs(costs):
    events = costs["events"]

    def speed(seconds):
        return f"{events / seconds / 1e6:6.2f} M events/s  ({seconds:.3f} s)"

    print(f"One fib({COSTS_FIB_N}) trace: {events:,} events, {costs['calls']:,} calls,"
          f" {costs['dropped']} dropped")
    print(f"  resident memory while tracing   {costs['bytes_per_event']:6.2f} bytes/event")
    print(f"  replay, stop()                  {speed(costs['replay'])}")
    for suffix in (".json", ".json.gz"):
        print(f"  export_chrome_trace {suffix:<9}   {speed(costs['export' + suffix])}"
              f"  {costs['size' + suffix] / 1e6:.1f} MB")
    ours_stop_and_save = costs["replay"] + costs["export.json"]
    print(f"  ours stop() + export .json      {speed(ours_stop_and_save)}")
    if "viztracer_save" in costs:
        print(f"  VizTracer save() .json          {speed(costs['viztracer_save'])}")
    print()


# ---------------------------------------------------------------- main

def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds per workload (default {DEFAULT_ROUNDS})")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_ROUNDS} rounds unless --rounds is given")
    parser.add_argument("--only", action="append", metavar="NAME",
                        choices=WORKLOAD_NAMES + (TRACE_COSTS,),
                        help="run only this workload or the trace-costs section; repeatable"
                             f" (choices: {', '.join(WORKLOAD_NAMES + (TRACE_COSTS,))})")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def configs_for(workload_name, viztracer, torch_module):
    configs = [NoTracer(), Pytrace(FLOOR, noop=True), Pytrace(OURS), CProfile()]
    if viztracer is not None:
        configs.append(viztracer)
    if torch_module is not None and workload_name in TORCH_PROFILER_WORKLOADS:
        configs.append(TorchProfiler(torch_module))
    return configs


def load_workloads(names):
    """{name: run function} of those workloads that can run here."""
    names = list(names)
    if names and not os.path.isdir(WORKLOADS_DIR):
        sys.exit(f"no workloads directory {os.path.normpath(WORKLOADS_DIR)};"
                 " set PYTRACE_WORKLOADS")
    runs = {}
    for name in names:
        module = load_workload(name)
        if module is None:
            print(f"{name}: skipped (needs torch)\n")
        else:
            runs[name] = module.run
    return runs


def main(argv=None):
    args = parse_args(argv)
    selected = args.only or WORKLOAD_NAMES + (TRACE_COSTS,)
    viztracer_module = import_optional("viztracer")
    torch_module = import_optional("torch")
    print_header(viztracer_module, torch_module)
    viztracer = VizTracer(viztracer_module) if viztracer_module is not None else None
    workload_runs = load_workloads(name for name in WORKLOAD_NAMES if name in selected)
    gc.freeze()     # what is imported by now is never collected: gc.collect() stays quick

    results = [benchmark_workload(name, run, configs_for(name, viztracer, torch_module),
                                  args.rounds)
               for name, run in workload_runs.items()]
    if results:
        print_overhead_table(results, args.rounds)
        print_ratio_table(results)

    if TRACE_COSTS in selected:
        with tempfile.TemporaryDirectory() as directory:
            print_trace_costs(measure_trace_costs(viztracer, directory))


if __name__ == "__main__":
    main()
