"""threads_mix made steadier for paired comparisons: the same mix of Python and
built-in calls on four threads, but the threads wait at a barrier and start
their work together, and each does four times the work, so that thread start-up
(what made threads_mix move by up to 18% between runs of one build) is a small
part of the time."""
import threading


def _work(k, barrier):
    barrier.wait()
    total = 0
    for i in range(12000):
        total += len(str(i * k)) + _square(i)
    return total


def _square(i):
    return i * i


def run():
    barrier = threading.Barrier(4)
    ts = [threading.Thread(target=_work, args=(k, barrier), name=f"worker-{k}")
          for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


if __name__ == "__main__":
    run()
