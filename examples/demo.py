"""A small multi-threaded program to try the tracer on (from the repository's root,
as in README.md; then open examples/demo.html):

    pip install . && cd examples && python -m pytrace_cffi run -o demo.html demo.py
"""
import json
import threading
import time


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fetch(count):
    time.sleep(0.002)           # waiting for I/O: the other threads run meanwhile
    return [json.dumps({"id": i, "name": f"item{i}"}) for i in range(count)]


def parse_records(records):
    return sorted((json.loads(r) for r in records), key=lambda r: -r["id"])


def worker(k, results):
    parsed = sum(len(parse_records(fetch(30))) for _ in range(3))
    results[k] = fib(12 + k) + parsed


def main():
    results = {}
    threads = [threading.Thread(target=worker, args=(k, results), name=f"worker-{k}")
               for k in range(3)]
    for t in threads:
        t.start()
    worker(3, results)
    for t in threads:
        t.join()
    print("results:", [results[k] for k in sorted(results)])


if __name__ == "__main__":
    main()
