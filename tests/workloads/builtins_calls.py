import abc
import math
import time
from collections import OrderedDict


class MyList(list):
    pass


class AbstractMapping(dict, metaclass=abc.ABCMeta):
    pass


class OtherAbstractMapping(dict, metaclass=abc.ABCMeta):
    pass


def run():
    out = []
    for i in range(200):
        out.append(len(str(i)))            # bound method, module function
    list.append(out, 1)                    # method descriptor called unbound
    words = ",".join(str(i) for i in range(10)).split(",")
    d = dict.fromkeys(words, 0)            # classmethod of a builtin type
    d.get("1"); d.setdefault("x", 1)
    total = sum(out) + max(out) + min(out) + abs(-3) + math.sqrt(16.0)
    sub = MyList()
    sub.append(3)                          # method of a builtin, on a subclass
    sub.extend([4, 5])
    isinstance(sub, list); hasattr(sub, "append"); getattr(d, "keys")()
    time.perf_counter()
    f = out.append                         # a bound builtin called later
    for i in range(5):
        f(i)
    b = bytearray(b"abc"); b.upper(); "x".encode().decode()
    # one C implementation bound to different classes of one metaclass
    AbstractMapping.fromkeys("ab"); OtherAbstractMapping.fromkeys("cd")
    OrderedDict.fromkeys("ef"); dict.fromkeys("gh"); int.from_bytes(b"\x01", "big")
    return total, repr(sub), sorted(d)
