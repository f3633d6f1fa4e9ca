import threading


def square(i):
    return i * i


def work(k, out):
    total = 0
    for i in range(300):
        total += len(str(i * k)) + square(i)
    out[k] = total


def run():
    out = {}
    threads = [threading.Thread(target=work, args=(k, out), name=f"oracle-worker-{k}")
               for k in range(3)]
    for t in threads:
        t.start()
    work(9, out)
    for t in threads:
        t.join()
    return sorted(out.items())
