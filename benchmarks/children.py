"""What following child processes costs: a DataLoader job with 4 worker processes,
timed end to end (start-up, the job, writing the trace) as a command:

    untraced            python job.py
    ours, parent only   python -m pytrace_cffi run --no-follow -o OUT.json job.py
    ours, following     python -m pytrace_cffi run -o OUT.json job.py
    VizTracer           python -m viztracer -o OUT.json job.py   (follows by default)

Each row is the median of --rounds runs (interleaved), with the trace's size and
its calls per process when known. Needs torch; VizTracer when it imports.

    python benchmarks/children.py [--rounds 5] [--items 2000]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

JOB = '''
import sys, torch
from torch.utils.data import DataLoader, Dataset

def work(i):
    total = 0
    for k in range(200):            # Python calls the tracers record
        total += abs(k - i) % 7
    return total

class Items(Dataset):
    def __len__(self):
        return int(sys.argv[1])
    def __getitem__(self, i):
        return torch.tensor([float(work(i))])

if __name__ == "__main__":
    n = 0
    for batch in DataLoader(Items(), batch_size=16, num_workers=4):
        n += len(batch)
    print(n)
'''


def timed(command, cwd, timeout=900):
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{command}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return elapsed, proc.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--items", type=int, default=2000)
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("this benchmark needs torch")
    try:
        import viztracer  # noqa: F401
        have_viztracer = True
    except ImportError:
        have_viztracer = False
    with tempfile.TemporaryDirectory() as tmp:
        job = os.path.join(tmp, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        out = os.path.join(tmp, "out.json")
        py = sys.executable
        items = str(args.items)
        configs = [("untraced", [py, job, items]),
                   ("ours, parent only (--no-follow)",
                    [py, "-m", "pytrace_cffi", "run", "--no-follow", "-o", out, job, items]),
                   ("ours, following (default)",
                    [py, "-m", "pytrace_cffi", "run", "-o", out, job, items])]
        if have_viztracer:
            configs.append(("VizTracer (follows)",
                            [py, "-m", "viztracer", "--quiet", "-o", out, job, items]))
        times = {name: [] for name, _ in configs}
        sizes, notes = {}, {}
        for _ in range(args.rounds):
            for name, command in configs:
                if os.path.exists(out):
                    os.unlink(out)
                elapsed, stderr = timed(command, tmp)
                times[name].append(elapsed)
                sizes[name] = os.path.getsize(out) if os.path.exists(out) else 0
                notes[name] = " | ".join(line.split("pytrace_cffi:", 1)[1].strip()
                                         for line in stderr.splitlines()
                                         if line.startswith("pytrace_cffi:"))
        base = statistics.median(times["untraced"])
        print(f"DataLoader, 4 workers, {args.items} items; median of {args.rounds} rounds; "
              f"Python {sys.version.split()[0]}")
        print(f"{'configuration':34} {'seconds':>8} {'x untraced':>10} {'trace MB':>9}")
        for name, _ in configs:
            median = statistics.median(times[name])
            print(f"{name:34} {median:8.2f} {median / base:10.2f} "
                  f"{sizes[name] / 1e6:9.1f}")
        for name, note in notes.items():
            if note:
                print(f"  {name}: {note}")


if __name__ == "__main__":
    main()
