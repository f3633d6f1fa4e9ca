"""A small multi-threaded program to try the tracer on (from the repository's root,
as in README.md; then open examples/demo.html):

    pip install . && cd examples && python -m pytrace_cffi run -o demo.html demo.py
"""
import json
import threading


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def parse_records(count):
    records = [json.dumps({"id": i, "name": f"item{i}"}) for i in range(count)]
    return sorted((json.loads(r) for r in records), key=lambda r: -r["id"])


def worker(k, results):
    results[k] = fib(12 + k) + len(parse_records(50))


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
