"""ReadBatch: reads of one key in the same loop turn share one get, issued after all of them
were asked; a read asked once that get is out waits for a get of its own."""

from __future__ import annotations

import asyncio

import pytest

from services.secrets.engines.kv.read_batch import ReadBatch
from shared.storage_cache import MISS


class Store:
    """A fetch that counts its calls and can be held open, over a value a test changes."""

    def __init__(self) -> None:
        self.value = 1
        self.fetches = 0
        self.gate: asyncio.Event | None = None
        self.error: Exception | None = None
        self.issued = asyncio.Event()

    async def fetch(self, key: str) -> tuple[str, int]:
        self.fetches += 1
        value = self.value  # read when the get is issued
        self.issued.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return key, value


async def test_reads_of_one_turn_share_one_get() -> None:
    store = Store()
    batch = ReadBatch(store.fetch)
    got = await asyncio.gather(*(batch.get("a") for _ in range(5)), batch.get("b"))
    assert got == [("a", 1)] * 5 + [("b", 1)]
    assert store.fetches == 2  # one per key


async def test_a_read_after_the_get_is_out_sees_later_writes() -> None:
    store = Store()
    store.gate = asyncio.Event()
    batch = ReadBatch(store.fetch)
    first = asyncio.create_task(batch.get("a"))
    await store.issued.wait()  # the first get is out (it read value 1)
    store.value = 2  # a write acknowledged after that get went out
    second = asyncio.create_task(batch.get("a"))
    await asyncio.sleep(0)
    store.gate.set()
    assert await first == ("a", 1)
    assert await second == ("a", 2)
    assert store.fetches == 2


async def test_an_error_reaches_every_read_that_shared_the_get() -> None:
    store = Store()
    store.error = RuntimeError("storage unavailable")
    batch = ReadBatch(store.fetch)
    results = await asyncio.gather(*(batch.get("a") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert store.fetches == 1
    store.error = None
    assert await batch.get("a") == ("a", 1)  # nothing left behind


async def test_cancelled_reads_leave_the_others_answered() -> None:
    store = Store()
    batch = ReadBatch(store.fetch)
    leader = asyncio.create_task(batch.get("a"))
    joiners = [asyncio.create_task(batch.get("a")) for _ in range(3)]
    await asyncio.sleep(0)  # all four asked; the leader waits for its turn to end
    leader.cancel()
    joiners[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    with pytest.raises(asyncio.CancelledError):
        await joiners[0]
    assert await asyncio.gather(*joiners[1:]) == [("a", 1), ("a", 1)]


async def test_a_read_the_cache_can_answer_takes_no_turn_and_no_get() -> None:
    store = Store()
    known: dict[str, object] = {"a": ("a", 7)}
    batch = ReadBatch(store.fetch, lambda key: known.get(key, MISS))
    read = batch.get("a").__await__()
    with pytest.raises(StopIteration) as done:  # finished in its first step: no wait at all
        read.send(None)
    assert done.value.value == ("a", 7)
    assert await batch.get("b") == ("b", 1)  # a miss reads storage as before
    assert store.fetches == 1
