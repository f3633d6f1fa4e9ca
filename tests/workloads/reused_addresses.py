"""A finished built-in call's callable freed, its memory at once reused by a
callable that is not a built-in and is called on the same argument, inside an
open call of the first built-in's kind: a tracer that remembered the finished
call by address would close the open call early. The reuse is pymalloc's: a
freed block is the next one handed out in its size class, and a bound built-in
and an instance of a five-slot class are both 72 bytes (3.9-3.13)."""


class FiveSlots:
    __slots__ = ("a", "b", "c", "d", "e")

    def __call__(self):
        return 0


def sort_key(value):
    other = [2, 1]
    for _ in range(3):
        bound = other.sort          # list.sort bound to a list: a fresh object
        bound()                     # list.sort on a list, no argument
        del bound                   # its block goes back to the pool
        lookalike = FiveSlots()     # likely the same block
        lookalike()                 # not a built-in, no argument
        del lookalike
    return -value


def run():
    outer = [3, 1, 2]
    outer_sort = outer.sort         # bound, as `bound` is: one key for both on 3.12+
    outer_sort(key=sort_key)        # list.sort on a list, open while sort_key runs
    return outer
