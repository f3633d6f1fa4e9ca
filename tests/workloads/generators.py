def count_up(n):
    for i in range(n):
        yield i * 2


def delegating(n):
    yield from count_up(n)
    received = yield "ready"
    return received


def consumer():
    total = 0
    while True:
        value = yield total
        if value is None:
            return total
        total += value


def run():
    total = sum(count_up(20)) + sum(x for x in count_up(5))
    gen = delegating(3)
    items = [next(gen) for _ in range(4)]
    try:
        gen.send("done")
    except StopIteration as stop:
        items.append(stop.value)
    c = consumer()
    next(c)
    for v in range(5):
        c.send(v)
    c.close()
    g = count_up(10)
    next(g)
    try:
        g.throw(ValueError("into the generator"))
    except ValueError:
        pass
    return total, items
