"""The concurrency bound of a served subject (shared/bus_slots.py): never more than `limit`
handlers at once, waiting plain requests and queued batch items served in arrival order, a
cancelled waiter loses no slot, and the queue of items is bounded in count and bytes."""

from __future__ import annotations

import asyncio

from shared.bus_slots import Slots


async def test_items_beyond_the_limit_wait_their_turn_in_order() -> None:
    slots = Slots(2)
    started: list[str] = []
    assert slots.start(started.append, "a", 1)
    assert slots.start(started.append, "b", 1)
    assert slots.start(started.append, "c", 1)
    assert slots.start(started.append, "d", 1)
    assert started == ["a", "b"]
    slots.release()
    assert started == ["a", "b", "c"]
    slots.release()
    slots.release()
    slots.release()
    assert started == ["a", "b", "c", "d"]
    assert slots.free == 2


async def test_plain_waiters_and_items_share_the_bound_in_arrival_order() -> None:
    slots = Slots(1)
    order: list[str] = []
    await slots.acquire()

    async def plain() -> None:
        await slots.acquire()
        order.append("plain")

    waiter = asyncio.ensure_future(plain())
    await asyncio.sleep(0)  # let it queue
    slots.start(order.append, "item", 1)
    assert order == []
    slots.release()
    await waiter
    assert order == ["plain"]
    slots.release()
    assert order == ["plain", "item"]
    slots.release()
    assert slots.free == 1


async def test_a_cancelled_waiter_loses_no_slot() -> None:
    slots = Slots(1)
    await slots.acquire()
    waiter = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    slots.release()
    assert slots.free == 1
    # Cancelled right after the slot was handed over: the slot comes back.
    await slots.acquire()
    handed = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    slots.release()
    handed.cancel()
    await asyncio.gather(handed, return_exceptions=True)
    assert slots.free == 1


async def test_the_item_queue_is_bounded_in_count_and_bytes() -> None:
    started: list[int] = []
    by_count = Slots(1, max_queued=2)
    assert by_count.start(started.append, 1, 10)
    assert by_count.start(started.append, 2, 10)
    assert by_count.start(started.append, 3, 10)
    assert not by_count.start(started.append, 4, 10)
    by_bytes = Slots(1, max_bytes=100)
    assert by_bytes.start(started.append, 5, 80)
    assert by_bytes.start(started.append, 6, 80)
    assert not by_bytes.start(started.append, 7, 30)
    by_bytes.release()  # 6 starts: its bytes leave the queue
    assert by_bytes.start(started.append, 8, 90)
    assert started == [1, 5, 6]
