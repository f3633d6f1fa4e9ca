"""Callables sharing one C function (tests/ext/shared_dispatch.c, built by the
shared_dispatch_ext fixture), called in a fixed pattern: each name a distinct count."""
import shared_dispatch as sd

# The name each callable must get and how often run() calls it: every count
# differs, so merged or swapped names show in the per-name counts.
EXPECTED = {
    "shared_dispatch.f1": 3,
    "shared_dispatch.f2": 5,
    "shared_dispatch.f3": 7,
    "shared_dispatch.r1": 2,
    "shared_dispatch.r2": 4,
    "shared_dispatch.r3": 6,
    "shared_dispatch.c1": 1,
    "shared_dispatch.c2": 8,
    "shared_dispatch.__sizeof__": 9,
    "n1": 10,
    "n2": 11,
    "shared_dispatch.Thing.ping": 12,
    "shared_dispatch.Thing.pong": 13,
}


def run():
    thing = sd.Thing()
    results = []
    # interleaved, and each called directly by run (not through a variable
    # holding many callables), as a program would
    for i in range(13):
        if i < 3:
            results.append(sd.f1() is sd)
        if i < 5:
            results.append(sd.f2() is sd)
        if i < 7:
            results.append(sd.f3() is sd)
        if i < 2:
            results.append(type(sd.r1()).__name__)
        if i < 4:
            sd.r2()
        if i < 6:
            sd.r3()
        if i < 1:
            sd.c1()
        if i < 8:
            sd.c2()
        if i < 9:
            sd.__sizeof__()
        if i < 10:
            results.append(sd.n1())
        if i < 11:
            sd.n2()
        if i < 12:
            results.append(thing.ping())
        sd.Thing.pong(thing)              # a method descriptor called unbound
    return results
