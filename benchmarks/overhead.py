#!/usr/bin/env python3
"""Tracer overhead benchmark for pytrace_cffi. Run by hand; it is not a test.

For each shared workload, times run() under several tracers, interleaved in one
process (every pass runs each tracer once, in an order rotating from pass to pass;
a round is one pass, or several for short workloads):

    no tracer | floor (pytrace_cffi hooks, nothing recorded) | ours (pytrace_cffi)
    | cProfile | VizTracer (if installed) | torch.profiler (fib, torch_mlp; if installed)

Every traced run is timed three ways at once, each against the untraced run of the
same pass (a paired ratio, see paired_ratio):

    during the run   run() alone, the tracer already started
    start to stop    from the tracer's start call through its stop call
    start to file    the same, plus writing the trace file with the tracer's own writer

plus the file's size and the teardown (dropping the result), which no figure includes.
Then, on one fib trace of about 786k events, it measures the resident memory per
event, and the speeds of ours' replay (stop()) and export and of VizTracer's save().

    python benchmarks/overhead.py [--rounds N] [--quick] [--only NAME] [--json FILE]
                                  [--markdown FILE] [--readme docs/PERFORMANCE.md]
    python benchmarks/overhead.py --from a.json [--from b.json ...] [--markdown FILE]
                                  [--readme docs/PERFORMANCE.md]

--json saves the measurements; --from renders saved ones (several interpreters'
runs side by side) without measuring. --markdown writes the two tables of
docs/PERFORMANCE.md, --readme replaces them in place between their marker
comments, so that every number there comes from the same runs.

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
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import warnings

try:
    import pytrace_cffi
except ImportError:         # enough to render saved runs (--from)
    pytrace_cffi = None

WORKLOADS_DIR = os.environ.get("PYTRACE_WORKLOADS") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "workloads")
WORKLOAD_NAMES = ("fib", "builtins_mix", "threads_mix", "torch_mlp")
TORCH_WORKLOADS = ("torch_mlp",)                  # need torch to run at all
TORCH_PROFILER_WORKLOADS = ("fib", "torch_mlp")   # torch.profiler's exit takes 0.2-1 s
COMPARE_WORKLOADS = ("fib", "torch_mlp")          # the columns of "How it compares"
TRACE_COSTS = "trace-costs"          # the --only name of the single-trace section
UNTRACED, FLOOR, OURS = "no tracer", "floor", "ours"

DEFAULT_ROUNDS = 7
QUICK_ROUNDS = 2
MIN_ROUND_SECONDS = 0.15   # a round makes as many passes as untraced runs fit in this...
MAX_PASSES = 8             # ...up to this many (a pass runs each tracer once)
VIZTRACER_ENTRIES = 5_000_000        # far above any workload's call count: nothing dropped
COSTS_FIB_N = 26                     # fib(26): 392,835 calls, about 786k events

# The three timings of a traced run, in the order the tables show them.
IN_RUN, TO_STOP, TO_FILE = "in_run", "to_stop", "to_file"
MODES = (IN_RUN, TO_STOP, TO_FILE)
MODE_TITLES = {IN_RUN: "during the run", TO_STOP: "start to stop",
               TO_FILE: "start to file"}

README_BLOCKS = ("compare", "benchmarks")


def marker(block, end):
    return f"<!-- benchmarks/overhead.py {block} {'end' if end else 'begin'} -->"


# ---------------------------------------------------------------- tracers
#
# One class per way of tracing. The benchmark calls, on one object, for every run:
#   start()              before run() (timed in start to stop and start to file)
#   stop() -> result     after run(): whatever the tracer hands back
#   write(result, path)  only if suffix is set: the tracer's own trace writer
#   drop(result)         teardown, timed apart and in no ratio
# `events(result)` may give the number of events recorded (ours only).
# A new configuration (two tracers at once, another option set, another
# tracer) is one more class and one more line in configs_for().

class Tracer:
    name = "?"
    suffix = None          # the file write() makes; None: this configuration writes none
    describe = ""          # for the Markdown legend: what start, stop and write are

    def start(self):
        pass

    def stop(self):
        return None

    def write(self, result, path):
        raise NotImplementedError

    def drop(self, result):
        pass

    def events(self, result):
        return None


class NoTracer(Tracer):
    """The baseline: run() alone."""
    name = UNTRACED


class Pytrace(Tracer):
    """pytrace_cffi with the given start() options. stop() returns the Trace: the
    calls are paired and named there (the replay), so it is ready to iterate."""
    suffix = ".json"
    describe = ("`pytrace_cffi.start()`; `stop()` returns the Trace, calls paired and named"
                " (the replay); `export_chrome_trace(path.json)`")

    def __init__(self, name, writes=True, **options):
        self.name = name
        self.options = options
        if not writes:
            self.suffix = None

    def start(self):
        pytrace_cffi.start(**self.options)

    def stop(self):
        return pytrace_cffi.stop()

    def write(self, trace, path):
        trace.export_chrome_trace(path)

    def events(self, trace):
        return sum(thread.n_events for thread in trace.threads), trace.dropped_events


class CProfile(Tracer):
    """cProfile: stop is disable(); its per-function table is built by
    dump_stats() (or pstats.Stats), so that cost lands in start to file."""
    name = "cProfile"
    suffix = ".prof"
    describe = ("`cProfile.Profile()` + `enable()`; `disable()`; `dump_stats(path)` (builds"
                " the per-function table, then writes it: aggregates, not a timeline)")

    def start(self):
        self._profile = cProfile.Profile()
        self._profile.enable()

    def stop(self):
        profile, self._profile = self._profile, None
        profile.disable()
        return profile

    def write(self, profile, path):
        profile.dump_stats(path)


class VizTracer(Tracer):
    """One VizTracer reused for every run; stop() leaves its events unparsed in its
    C buffer, save() parses them and writes JSON, drop() clears the buffer.

    On 3.11 and older, creating a VizTracer installs its hook as threading's
    profile hook and as this thread's profile function (dormant until start), which
    would slow every other configuration (and pytrace_cffi refuses to start over
    another profiler's hook). So its hooks are installed only while it records."""
    name = "VizTracer"
    suffix = ".json"
    describe = (f"one `VizTracer(tracer_entries={VIZTRACER_ENTRIES:_})`: `start()`; `stop()`"
                " (its events stay raw in its C buffer); `save(path.json)` (parses, then writes)")

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
        return self._tracer

    def write(self, tracer, path):
        tracer.save(path)

    def drop(self, tracer):
        tracer.clear()


class TorchProfiler(Tracer):
    """torch.profiler with Python stacks. Its __exit__ does torch's post-processing
    (with_stack's call tree); the per-op event list is built later, lazily, only if
    asked for (export_chrome_trace does not need it)."""
    name = "torch.profiler"
    suffix = ".json"
    describe = ("`torch.profiler.profile(activities=[CPU], with_stack=True)`: `__enter__`;"
                " `__exit__` (incl. its processing); `export_chrome_trace(path.json)`")

    def __init__(self, torch_module):
        self._profiler = torch_module.profiler

    def start(self):
        self._profile = self._profiler.profile(
            activities=[self._profiler.ProfilerActivity.CPU], with_stack=True)
        self._profile.__enter__()

    def stop(self):
        profile, self._profile = self._profile, None
        profile.__exit__(None, None, None)
        return profile

    def write(self, profile, path):
        profile.export_chrome_trace(path)


class PytraceWithTorchProfiler(Tracer):
    """pytrace_cffi and torch.profiler without with_stack at once, then merged:
    torch's ops (and kernels) with full Python stacks on one timeline (the README's
    torch.profiler recipe), against torch.profiler(with_stack=True) above."""
    name = "ours + torch.profiler"
    suffix = ".json"
    describe = ("`torch.profiler.profile(activities=[CPU])` (no stack): `__enter__`, then"
                " `pytrace_cffi.start()`; `pytrace_cffi.stop()`, then `__exit__`; torch's"
                " `export_chrome_trace` and `pytrace_cffi.merge_torch(trace, it, path.json)`")

    def __init__(self, torch_module):
        self._profiler = torch_module.profiler

    def start(self):
        self._profile = self._profiler.profile(
            activities=[self._profiler.ProfilerActivity.CPU])
        self._profile.__enter__()
        pytrace_cffi.start()

    def stop(self):
        trace = pytrace_cffi.stop()
        profile, self._profile = self._profile, None
        profile.__exit__(None, None, None)
        return trace, profile

    def write(self, result, path):
        trace, profile = result
        torch_path = path + ".torch.json"
        profile.export_chrome_trace(torch_path)
        pytrace_cffi.merge_torch(trace, torch_path, path)
        os.remove(torch_path)


def threading_profile_hook():
    getter = getattr(threading, "getprofile", None)     # 3.10+
    return getter() if getter else threading._profile_hook


def configs_for(workload_name, viztracer, torch_module):
    """The tracers a workload runs under; the first is the untraced baseline."""
    configs = [NoTracer(), Pytrace(FLOOR, writes=False, noop=True), Pytrace(OURS), CProfile()]
    if viztracer is not None:
        configs.append(viztracer)
    if torch_module is not None and workload_name in TORCH_PROFILER_WORKLOADS:
        configs.append(TorchProfiler(torch_module))
    if torch_module is not None and workload_name in TORCH_WORKLOADS:
        configs.append(PytraceWithTorchProfiler(torch_module))
    return configs


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
    if name in TORCH_WORKLOADS and import_optional("torch") is None:
        return None
    path = os.path.join(WORKLOADS_DIR, name + ".py")
    spec = importlib.util.spec_from_file_location("workload_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- timing

def time_one_run(config, run, directory):
    """{mode: seconds, "teardown": seconds, "bytes": file size or None, "events": ...}
    of one run() under config. The file is deleted once measured. The clock is read
    between the tracer's calls, so the three timings come from the same run."""
    gc.collect()
    clock = time.perf_counter
    begin = clock()
    config.start()
    try:
        started = clock()
        run()
        ended = clock()
    finally:
        result = config.stop()
    stopped = clock()
    size = None
    written = stopped
    if config.suffix is not None:
        path = os.path.join(directory, "trace" + config.suffix)
        config.write(result, path)
        written = clock()
        size = os.path.getsize(path)
        os.unlink(path)
    events = config.events(result)
    before_drop = clock()
    config.drop(result)
    del result
    gc.collect()        # what the result held in reference cycles is freed here, not later
    dropped = clock()
    return {IN_RUN: ended - started, TO_STOP: stopped - begin, TO_FILE: written - begin,
            "teardown": dropped - before_drop, "bytes": size, "events": events}


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


def sample_runs(run, configs, passes, directory):
    """{config name: [measurement of pass 0, pass 1, ...]}. Each pass runs every
    configuration once, in an order that changes from pass to pass, so that a
    slow spell of the machine falls on all of them alike."""
    samples = {config.name: [] for config in configs}
    for pass_index in range(passes):
        for config in pass_order(configs, pass_index):
            samples[config.name].append(time_one_run(config, run, directory))
    return samples


def quartiles(values):
    """(median, lower quartile, upper quartile)."""
    values = sorted(values)
    if len(values) < 4:
        return statistics.median(values), values[0], values[-1]
    low, middle, high = statistics.quantiles(values, n=4)
    return middle, low, high


def paired_ratio(numerators, denominators):
    """(median, lower quartile, upper quartile) of numerators[i] / denominators[i]
    over the passes i. The runs of one pass are milliseconds to a second apart, so
    drifts of the machine slower than that (this VM alternates between a fast and a
    slow phase, each lasting a fraction of a second to seconds) cancel in each
    ratio, where a ratio of two medians can pair one configuration's fast phase with
    another's slow one."""
    return quartiles([a / b for a, b in zip(numerators, denominators)])


def benchmark_workload(name, run, configs, rounds, directory):
    """The workload's measurements: per configuration and pass, every timing."""
    for config in configs:                   # warm-up: imports, caches, first-seen keys
        time_one_run(config, run, directory)
    untraced = statistics.median(time_one_run(configs[0], run, directory)[IN_RUN]
                                 for _ in range(3))
    passes = rounds * passes_per_round(untraced)
    samples = sample_runs(run, configs, passes, directory)
    events, dropped = samples[OURS][-1]["events"]
    return {"name": name, "events": events, "dropped": dropped, "passes": passes,
            "configs": [config.name for config in configs], "runs": samples}


def workload_ratios(result, name, mode, other=UNTRACED, other_mode=IN_RUN):
    """Paired ratio of name's mode timing over other's (the untraced run by default)."""
    runs = result["runs"]
    return paired_ratio([sample[mode] for sample in runs[name]],
                        [sample[other_mode] for sample in runs[other]])


def file_bytes(result, name):
    sizes = [sample["bytes"] for sample in result["runs"][name] if sample["bytes"] is not None]
    return statistics.median(sizes) if sizes else None


def teardown_seconds(result, name):
    return statistics.median(sample["teardown"] for sample in result["runs"][name])


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
    events = sum(thread.n_events for thread in trace.threads)
    costs = {"events": events, "calls": len(trace), "dropped": trace.dropped_events,
             "bytes_per_event": (rss_before_stop - rss_before_start) / events,
             "replay": replay_seconds}
    for suffix in (".json", ".json.gz"):
        path = os.path.join(directory, "fib" + suffix)
        costs["export" + suffix] = timed(trace.export_chrome_trace, path)[1]
        costs["size" + suffix] = os.path.getsize(path)
        os.unlink(path)
    del trace
    gc.collect()
    if viztracer is not None:
        costs["viztracer_save"] = viztracer_save_seconds(viztracer, directory)
    return costs


def viztracer_save_seconds(viztracer, directory):
    """Seconds of VizTracer's save() (parsing its buffer, then writing JSON)."""
    viztracer.start()
    fib(COSTS_FIB_N)
    tracer = viztracer.stop()
    path = os.path.join(directory, "fib_viztracer.json")
    seconds = timed(tracer.save, path)[1]
    os.unlink(path)
    viztracer.drop(tracer)
    return seconds


# ---------------------------------------------------------------- the run's facts

def environment(viztracer_module, torch_module, rounds):
    def version_of(module):
        return getattr(module, "__version__", "?") if module else None

    return {"python": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "cpu": cpu_model(),
            "date": f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M:%S %z}",
            "pytrace_cffi": pytrace_cffi.__version__,
            "pytrace_cffi_path": os.path.dirname(pytrace_cffi.__file__),
            "viztracer": version_of(viztracer_module),
            "torch": version_of(torch_module),
            "workloads": os.path.normpath(WORKLOADS_DIR),
            "rounds": rounds,
            "describe": {config.name: config.describe
                         for config in (Pytrace(OURS), CProfile, VizTracer, TorchProfiler)}}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


# ---------------------------------------------------------------- console report

def print_header(env):
    print("pytrace_cffi overhead benchmark")
    print(f"  python       {env['implementation']} {env['python']} ({env['executable']})")
    print(f"  platform     {env['platform']}, {env['cpus']} CPUs, {env['cpu']}")
    print(f"  date         {env['date']}")
    print(f"  pytrace_cffi {env['pytrace_cffi']} ({env['pytrace_cffi_path']})")
    print(f"  viztracer    {env['viztracer'] or 'not installed'}")
    print(f"  torch        {env['torch'] or 'not installed'}")
    print(f"  workloads    {env['workloads']}")
    print(f"  rounds       {env['rounds']}")
    print()


def cell(ratio):
    middle, low, high = ratio
    return f"{middle:.2f}x ({low:.2f}-{high:.2f})"


def print_overhead_table(results):
    print("Slowdown against the untraced run of the same pass: median (quartiles) over passes;")
    print("file: median size written; teardown: median ms to drop the result and gc.collect()"
          " (in no ratio; the untraced row is gc.collect() alone)")
    print(f"{'workload':<14}{'events':>9}{'passes':>7}  {'tracer':<22}"
          + "".join(f"{MODE_TITLES[mode]:>25}" for mode in MODES)
          + f"{'file':>10}{'teardown':>10}")
    for result in results:
        untraced = statistics.median(sample[IN_RUN] for sample in result["runs"][UNTRACED])
        first = True
        for name in result["configs"]:
            lead = (f"{result['name']:<14}{result['events']:>9,}{result['passes']:>7}  "
                    if first else " " * 32)
            first = False
            if name == UNTRACED:
                print(f"{lead}{name:<22}{'median ' + format(untraced * 1e3, '.2f') + ' ms':>25}"
                      f"{'':>50}{'-':>10}{teardown_seconds(result, name) * 1e3:>8.1f}ms")
                continue
            cells = "".join(f"{cell(workload_ratios(result, name, mode)):>25}" for mode in MODES)
            print(f"{lead}{name:<22}{cells}{megabytes(file_bytes(result, name)):>10}"
                  f"{teardown_seconds(result, name) * 1e3:>8.1f}ms")
        if result["dropped"]:
            print(f"{'':32}(ours dropped {result['dropped']:,} events)")
    print()


def print_ratio_table(results):
    others = [name for name in (FLOOR, CProfile.name, VizTracer.name, TorchProfiler.name,
                                PytraceWithTorchProfiler.name)
              if any(name in result["runs"] for result in results)]
    print("Ratios ours / other, paired within each pass, during the run | start to file:"
          " median (quartiles); below 1 means ours is faster")
    for result in results:
        cells = []
        for other in others:
            if other not in result["runs"]:
                continue
            parts = [cell(workload_ratios(result, OURS, IN_RUN, other, IN_RUN))]
            if other != FLOOR:
                parts.append(cell(workload_ratios(result, OURS, TO_FILE, other, TO_FILE)))
            cells.append(f"ours/{other} " + " | ".join(parts))
        print(f"{result['name']:<14}" + ";  ".join(cells))
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
    print(f"  ours stop() + export .json      {speed(costs['replay'] + costs['export.json'])}")
    if "viztracer_save" in costs:
        print(f"  VizTracer save() .json          {speed(costs['viztracer_save'])}")
    print()


# ---------------------------------------------------------------- Markdown report

def short_python(run_data):
    return ".".join(run_data["env"]["python"].split(".")[:2])


def python_version(run_data):
    return tuple(int(part) for part in run_data["env"]["python"].split(".")[:2])


def cprofile_sees_one_thread(run_data, workload, name):
    """cProfile follows only the thread that enabled it before 3.12."""
    return (workload == "threads_mix" and name == CProfile.name
            and python_version(run_data) < (3, 12))


def megabytes(size):
    if size is None:
        return "-"
    return f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size / 1e3:.0f} kB"


def find_result(run_data, workload):
    return next((result for result in run_data["results"] if result["name"] == workload), None)


def tracer_names(runs):
    """The tracers compared, in table order, that some run measured."""
    measured = {name for run_data in runs for result in run_data["results"]
                for name in result["runs"]}
    return [name for name in (OURS, CProfile.name, VizTracer.name, TorchProfiler.name)
            if name in measured]


def joined(runs, value_of):
    """'a / b' over the runs (one per interpreter), '-' where one has no value."""
    values = [value_of(run_data) for run_data in runs]
    if all(value is None for value in values):
        return None
    return " / ".join("-" if value is None else value for value in values)


def ratio_of(run_data, workload, name, mode, digits=1):
    result = find_result(run_data, workload)
    if result is None or name not in result["runs"]:
        return None
    return f"{workload_ratios(result, name, mode)[0]:.{digits}f}x"


def size_of(run_data, workload, name):
    result = find_result(run_data, workload)
    if result is None or name not in result["runs"]:
        return None
    return megabytes(file_bytes(result, name))


def machine_sentence(runs):
    env = runs[0]["env"]
    pythons = " and ".join(f"CPython {run_data['env']['python']}" for run_data in runs)
    tools = []
    versions = {}
    for run_data in runs:
        for tool in ("viztracer", "torch"):
            if run_data["env"][tool]:
                versions.setdefault(tool, {}).setdefault(run_data["env"][tool], []).append(
                    short_python(run_data))
    for tool, label in (("viztracer", "VizTracer"), ("torch", "torch")):
        for version, used_on in versions.get(tool, {}).items():
            where = "" if len(used_on) == len(runs) else f" ({', '.join(used_on)} only)"
            tools.append(f"{label} {version}{where}")
    dates = sorted({run_data["env"]["date"][:10] for run_data in runs})
    rounds = sorted({run_data["env"]["rounds"] for run_data in runs})
    return (f"Measured {' and '.join(dates)} by `python benchmarks/overhead.py`"
            f" (rounds: {'/'.join(map(str, rounds))}) on {env['cpus']} CPUs ({env['cpu']}),"
            f" {env['platform']}; {pythons}"
            + (f"; {', '.join(tools)}" if tools else "") + ".")


def markdown_compare(runs):
    """The "How it compares" numbers: one row per tracer, what a user feels."""
    pythons = " / ".join(short_python(run_data) for run_data in runs)
    workloads = [workload for workload in COMPARE_WORKLOADS
                 if any(find_result(run_data, workload) for run_data in runs)]
    header = ["tracer"]
    for workload in workloads:
        header += [f"{workload}: during the run", f"{workload}: start to file written",
                   f"{workload}: file"]
    lines = [f"Times as long as the same program untraced, Python {pythons}"
             " (a dash: not measured there):", "",
             "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name in tracer_names(runs):
        row = [name if name != OURS else "pytrace_cffi"]
        for workload in workloads:
            row += [joined(runs, lambda r: ratio_of(r, workload, name, IN_RUN)) or "-",
                    joined(runs, lambda r: ratio_of(r, workload, name, TO_FILE)) or "-",
                    joined(runs, lambda r: size_of(r, workload, name)) or "-"]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", machine_sentence(runs) + " \"During the run\" is what the program feels"
              " while it is traced: at 4.0x, what takes 1 s untraced takes 4 s."
              " \"Start to file written\" is what you wait for a trace you can open: from"
              " starting the tracer until its file is written (cProfile's is a per-function"
              " table, not a timeline), over the untraced run time. The file is the size on"
              " disk. Details, and the other workloads, under [Benchmarks](#benchmarks)."]
    return "\n".join(lines)


def markdown_benchmarks(runs):
    """The detailed tables: every workload, tracer and timing, then the trace costs."""
    lines = [machine_sentence(runs), "",
             "Every traced run is timed three ways; each figure is that time over the"
             " untraced run of the same pass (the passes interleave all tracers, so a slow"
             " spell of the machine hits them alike), the median over the passes with the"
             " quartiles in brackets:", "",
             "- **during the run**: `run()` alone, the tracer already started: what the"
             " traced program itself feels;",
             "- **start to stop**: from the tracer's start through its stop call, what the"
             " program waits for before it can go on; ours does its replay here, the others"
             " leave their processing to the file writer (or, for torch.profiler, to a later"
             " `events()`);",
             "- **start to file**: the same plus writing the trace with the tracer's own writer"
             " (no fsync): what a trace you can open costs in all;",
             "- **file**: the size written;",
             "- **floor** is `start(noop=True)`, our hooks recording nothing (timed during the"
             " run only): no tracer built on these hooks can go below it, and in the second"
             " table ours/floor at 1.15 means recording adds 15% to what having any hook"
             " installed costs.", "",
             "Dropping the result afterwards is in no figure (the console output shows it)."
             " What each tracer runs:", ""]
    describe = {}
    for run_data in runs:
        describe.update(run_data["env"]["describe"])
    for name in tracer_names(runs):
        lines.append(f"- {name}: {describe.get(name, '')}")
    lines += ["", "| workload | events recorded | Python | tracer | during the run | start to stop"
              " | start to file | file |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for workload in WORKLOAD_NAMES:
        for run_data in runs:
            result = find_result(run_data, workload)
            if result is None:
                continue
            for name in result["configs"]:
                if name == UNTRACED:
                    untraced = statistics.median(sample[IN_RUN] for sample in result["runs"][name])
                    lines.append(f"| {workload} | | {short_python(run_data)} | {name}"
                                 f" | {untraced * 1e3:.2f} ms (median) | | | |")
                    continue
                cells = [cell(workload_ratios(result, name, mode)) for mode in MODES]
                size = megabytes(file_bytes(result, name))
                if name == FLOOR:
                    cells[1] = cells[2] = size = ""
                events = f"{result['events'] / 1e3:.0f}k" if name == OURS else ""
                note = " (main thread only)" if cprofile_sees_one_thread(run_data, workload,
                                                                          name) else ""
                lines.append(f"| {workload} | {events} | {short_python(run_data)} | {name}{note}"
                             f" | {' | '.join(cells)} | {size} |")
    lines += ["", "Ours over each other tracer, paired within each pass (below 1: ours is"
              " faster), during the run / start to file:", ""]
    others = [name for name in (FLOOR, CProfile.name, VizTracer.name, TorchProfiler.name,
                                PytraceWithTorchProfiler.name)
              if any(name in result["runs"] for run_data in runs for result in run_data["results"])]
    lines += ["| workload | Python | " + " | ".join(f"ours/{other}" for other in others) + " |",
              "| --- | --- |" + " --- |" * len(others)]
    for workload in WORKLOAD_NAMES:
        for run_data in runs:
            result = find_result(run_data, workload)
            if result is None:
                continue
            cells = []
            for other in others:
                if other not in result["runs"]:
                    cells.append("")
                    continue
                text = f"{workload_ratios(result, OURS, IN_RUN, other, IN_RUN)[0]:.2f}"
                if cprofile_sees_one_thread(run_data, workload, other):
                    text = "(not comparable: main thread only)"
                elif other != FLOOR:
                    text += f" / {workload_ratios(result, OURS, TO_FILE, other, TO_FILE)[0]:.2f}"
                cells.append(text)
            lines.append(f"| {workload} | {short_python(run_data)} | {' | '.join(cells)} |")
    costs_lines = []
    for run_data in runs:
        costs = run_data.get("costs")
        if not costs:
            continue
        events = costs["events"]

        def rate(seconds):
            return f"{events / seconds / 1e6:.1f} M events/s"

        text = (f"{short_python(run_data)}: {costs['bytes_per_event']:.1f} bytes per event"
                f" resident while tracing; replay (`stop()`) {rate(costs['replay'])};"
                f" `export_chrome_trace` {rate(costs['export.json'])} to `.json`"
                f" ({megabytes(costs['size.json'])}), {rate(costs['export.json.gz'])} to"
                f" `.json.gz` ({megabytes(costs['size.json.gz'])})")
        if "viztracer_save" in costs:
            text += f"; VizTracer's `save()` of the same program {rate(costs['viztracer_save'])}"
        costs_lines.append(f"- {text}.")
    if costs_lines:
        lines += ["", f"One bigger trace, fib({COSTS_FIB_N}) ({runs[0]['costs']['events']:,}"
                  " events), to show how stop and export scale:", ""] + costs_lines
    return "\n".join(lines)


def markdown_blocks(runs):
    return {"compare": markdown_compare(runs), "benchmarks": markdown_benchmarks(runs)}


def write_markdown(path, blocks):
    with open(path, "w") as out:
        for block in README_BLOCKS:
            out.write(f"{marker(block, False)}\n{blocks[block]}\n{marker(block, True)}\n\n")


def update_readme(path, blocks):
    """Replaces each block between its begin and end markers in the README."""
    with open(path) as readme:
        text = readme.read()
    for block in README_BLOCKS:
        begin, end = marker(block, False), marker(block, True)
        if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
            sys.exit(f"{path}: needs exactly one {begin!r} followed by one {end!r}")
        head, rest = text.split(begin)
        tail = rest.split(end)[1]
        text = f"{head}{begin}\n{blocks[block]}\n{end}{tail}"
    with open(path, "w") as readme:
        readme.write(text)


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
    parser.add_argument("--json", metavar="FILE", help="save the measurements to FILE")
    parser.add_argument("--from", dest="sources", action="append", metavar="FILE",
                        help="measure nothing: report the runs saved in FILE (repeatable,"
                             " one per interpreter, shown in this order)")
    parser.add_argument("--markdown", metavar="FILE",
                        help="write the two benchmark tables (with their markers) to FILE")
    parser.add_argument("--readme", metavar="FILE",
                        help="replace the two tables in FILE (docs/PERFORMANCE.md)"
                             " between their marker comments")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.sources and (args.only or args.json or args.quick):
        parser.error("--from reports saved runs: --only, --quick and --json do not apply")
    return args


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


def measure(args):
    """One interpreter's run: {"env", "results", "costs"}, printed as it goes."""
    if pytrace_cffi is None:
        sys.exit("pytrace_cffi does not import: install it, or set PYTHONPATH to a built tree")
    selected = args.only or WORKLOAD_NAMES + (TRACE_COSTS,)
    viztracer_module = import_optional("viztracer")
    torch_module = import_optional("torch")
    env = environment(viztracer_module, torch_module, args.rounds)
    print_header(env)
    viztracer = VizTracer(viztracer_module) if viztracer_module is not None else None
    workload_runs = load_workloads(name for name in WORKLOAD_NAMES if name in selected)
    gc.freeze()     # what is imported by now is never collected: gc.collect() stays quick

    run_data = {"env": env, "results": [], "costs": None}
    with tempfile.TemporaryDirectory() as directory:
        for name, run in workload_runs.items():
            started = time.perf_counter()
            run_data["results"].append(benchmark_workload(
                name, run, configs_for(name, viztracer, torch_module), args.rounds, directory))
            print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
        if run_data["results"]:
            print_overhead_table(run_data["results"])
            print_ratio_table(run_data["results"])
        if TRACE_COSTS in selected:
            run_data["costs"] = measure_trace_costs(viztracer, directory)
            print_trace_costs(run_data["costs"])
    return run_data


def main(argv=None):
    args = parse_args(argv)
    if args.sources:
        runs = []
        for source in args.sources:
            with open(source) as saved:
                runs.append(json.load(saved))
        for run_data in runs:
            print_header(run_data["env"])
            if run_data["results"]:
                print_overhead_table(run_data["results"])
                print_ratio_table(run_data["results"])
            if run_data["costs"]:
                print_trace_costs(run_data["costs"])
    else:
        runs = [measure(args)]
        if args.json:
            with open(args.json, "w") as out:
                json.dump(runs[0], out)
    if args.markdown or args.readme:
        if not any(run_data["results"] for run_data in runs):
            sys.exit("no workload measured: no tables to write")
        blocks = markdown_blocks(runs)
        if args.markdown:
            write_markdown(args.markdown, blocks)
        if args.readme:
            update_readme(args.readme, blocks)


if __name__ == "__main__":
    main()
