class Boom(Exception):
    pass


def deep(n):
    if n == 0:
        raise Boom("bottom")
    return deep(n - 1)


def swallow():
    try:
        deep(5)
    except Boom:
        return "caught"


def reraise():
    try:
        int("not a number")                # a builtin that raises
    except ValueError as exc:
        raise Boom("wrapped") from exc


def finally_path():
    try:
        return len([1, 2])
    finally:
        str(3)


def run():
    results = [swallow(), finally_path()]
    for _ in range(3):
        try:
            reraise()
        except Boom:
            results.append("boom")
    try:
        {}["missing"]
    except KeyError:
        results.append("key")
    return results
