"""Makes the golden fixture traces once (their outputs' hashes are kept in
hashes.json; tests/test_golden_outputs.py writes every format of each and compares).
Run from the repository root with the package importable and the stand-in torch:
    PYTHONPATH=.:tests/torch_stand_in python tests/data/golden/make_fixtures.py
It records real runs, so running it again gives other traces: do it only when the
saved format itself changes, then rewrite hashes.json (see the test's docstring)."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

PROGRAM = r'''
import sys, threading
import pytrace_cffi

def leaf(i):
    return sorted(range(i % 5))

def branch(n):
    return [leaf(i) for i in range(n)]

def worker():
    with pytrace_cffi.record_function("in a thread", {"n": 2}):
        branch(4)
    pytrace_cffi.instant("thread done", {"ok": True})

def main():
    t = threading.Thread(target=worker, name="golden-worker")
    t.start()
    with pytrace_cffi.record_function("load", {"batch": 32, "name": "x", "ratio": 0.5}):
        branch(6)
    pytrace_cffi.counter("memory", {"rss": 10, "heap": 2.5})
    pytrace_cffi.instant("midway")
    t.join()
    branch(3)
'''



def _run(code, env=None):
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.path.join(root, "tests",
                                                                          "torch_stand_in")]))
    for name in ("threads", "spilled", "job", "torch"):
        shutil.rmtree(os.path.join(HERE, name), ignore_errors=True)
    # threads, marks, regions: a saved directory
    _run(PROGRAM + f'''
pytrace_cffi.start()
main()
trace = pytrace_cffi.stop()
trace.save({os.path.join(HERE, "threads")!r})
''', env)
    # the same, spilled while recording (events.bin)
    _run(PROGRAM + f'''
pytrace_cffi.start(max_events=256, output={os.path.join(HERE, "spilled")!r})
main()
pytrace_cffi.stop()
''', env)
    # a job: this process, a forked worker and a Python child
    _run(PROGRAM + f'''
import multiprocessing as mp, subprocess
pytrace_cffi.start(follow_children=True, output={os.path.join(HERE, "job")!r})
main()
p = mp.get_context("fork").Process(target=branch, args=(5,))
p.start(); p.join()
subprocess.run([sys.executable, "-c", "def child(): return 1\\nfor _ in range(3): child()"],
               check=True)
pytrace_cffi.stop()
''', env)
    # torch names through the stand-in: module calls, optimizer steps, params
    _run(f'''
import workload, pytrace_cffi
model, optimizer, data = workload.make()
pytrace_cffi.start(record_params=True)
workload.train_with_regions(model, optimizer, data)
trace = pytrace_cffi.stop()
trace.save({os.path.join(HERE, "torch")!r})
''', env)


if __name__ == "__main__":
    main()
