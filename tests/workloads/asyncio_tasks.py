import asyncio


async def leaf(i):
    await asyncio.sleep(0)
    return i * i


async def branch(n):
    results = await asyncio.gather(*(leaf(i) for i in range(n)))
    return sum(results)


async def main():
    task = asyncio.ensure_future(branch(4))
    other = await branch(3)
    return other + await task


def run():
    return asyncio.run(main())
