"""Built-ins whose calls nest or whose owner is unusual: the same built-in open
twice at once on selfs of different types, and a metaclass's method called on
one of its classes, then on the metaclass itself."""


class SortedList(list):
    pass


class Meta(type):
    pass


class WithMeta(metaclass=Meta):
    pass


def inner_sort_key(value):
    plain = [3, 1, 2]
    plain.sort()                    # list.sort on a list, inside SortedList.sort
    return -value


def run():
    outer = SortedList([3, 1, 2])
    outer.sort(key=inner_sort_key)  # list.sort on a SortedList, calling Python
    nested = sorted([5, 4, 6], key=lambda v: sorted([v, 0])[1])
    of_class = WithMeta.mro()       # type.mro with self an instance of Meta
    of_meta = type.mro(Meta)        # type.mro with self the metaclass itself
    again = WithMeta.mro()
    return (list(outer), nested, [c.__name__ for c in of_class],
            [c.__name__ for c in of_meta], len(again))
