#!/usr/bin/env python3
"""The fixed cost of a traced run: an empty script under `run -o OUT`, against the
same script untraced and under `python -m cProfile -o` (issue 22, item 5). Run by
hand; not a test:

    python benchmarks/fixed_cost.py [--python PYTHON] [--rounds 21] [--out-suffix .json]

Each round runs every command once, in turn (the order rotates each round), and
the minimum wall time of each over the rounds is reported, in milliseconds, with
its difference to cProfile's. The minimum: start-up is a fixed amount of work,
and everything above its least is the machine's noise. PYTHON defaults to the
one running this; its installed pytrace_cffi is measured unless PYTHONPATH says
otherwise. Measure in a virtual environment: a site-packages with .pth files
(certifi, distutils hacks) adds its own import time to every command alike.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def commands(python, script, out_dir, suffix):
    out = os.path.join(out_dir, "out" + suffix)
    return {
        "untraced": [python, script],
        "cProfile -o": [python, "-m", "cProfile", "-o", os.path.join(out_dir, "out.prof"),
                        script],
        "run -o": [python, "-m", "pytrace_cffi", "run", "-o", out, script],
        "run --no-follow -o": [python, "-m", "pytrace_cffi", "run", "--no-follow",
                               "-o", out, script],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--out-suffix", default=".json",
                        help="the output format of run, by its suffix")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as where:
        script = os.path.join(where, "empty.py")
        with open(script, "w") as f:
            f.write("")
        runs = commands(args.python, script, where, args.out_suffix)
        names = list(runs)
        best = {name: float("inf") for name in names}
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)     # as an installed package runs
        for round_ in range(args.rounds + 1):
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            for name in order:
                t0 = time.perf_counter()
                subprocess.run(runs[name], env=env, check=True, cwd=where,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                elapsed = time.perf_counter() - t0
                if round_:                           # the first round warms the caches
                    best[name] = min(best[name], elapsed)
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True).stdout.strip()
    print(f"empty script, CPython {version}, best of {args.rounds} rounds (ms)")
    for name in names:
        print(f"{name:20s} {best[name] * 1000:7.1f}  "
              f"{(best[name] - best['cProfile -o']) * 1000:+7.1f} vs cProfile")


if __name__ == "__main__":
    main()
