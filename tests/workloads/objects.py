import functools
from contextlib import contextmanager


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __repr__(self):
        return f"Point({self.x}, {self.y})"

    @property
    def norm(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5

    @classmethod
    def origin(cls):
        return cls(0, 0)

    @staticmethod
    def parse(text):
        return Point(*map(int, text.split(",")))

    def __add__(self, other):
        return Point(self.x + other.x, self.y + other.y)


def logged(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


@logged
def scaled(p, k=2):
    return Point(p.x * k, p.y * k)


@contextmanager
def managed(label):
    yield label.upper()


def make_adder(k):
    def add(v):
        return v + k
    return add


def run():
    p = Point.parse("3,4") + Point.origin()
    q = scaled(p, k=3)
    with managed("block") as label:
        norms = [pt.norm for pt in (p, q)]
    add5 = make_adder(5)
    squares = [add5(i) for i in range(10)]            # inlined from 3.12 (PEP 709)
    evens = {i for i in squares if i % 2 == 0}
    table = {i: str(i) for i in range(5)}
    ordered = sorted([q, p, Point(1, 1)], key=lambda pt: pt.norm)   # C calls Python
    mapped = list(map(add5, range(4)))
    return repr(ordered), label, norms, evens, table, mapped
