"""Deferred replies on a real nats-server: a long poll parked by its handler holds no handler slot,
is answered when its future resolves (errors included), and is answered at close."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from shared.bus import Bus, CallContext
from shared.deferred import Deferred
from shared.errors import ServiceError
from shared.waiters import IndexWaiters

pytestmark = pytest.mark.nats


class Poll(msgspec.Struct):
    after: int  # 0: answer at once


class Index(msgspec.Struct):
    index: int


async def test_parked_polls_hold_no_slot(nats_url: str, unique: str) -> None:
    server = await Bus.connect(nats_url, "srv")
    client = await Bus.connect(nats_url, "cli")
    waiters = IndexWaiters(index=1)
    deferred = 0
    # Set when the handler has returned this many Deferreds (the bus parks each one before it
    # next yields to the loop, so a waiter woken by this event sees them all parked).
    parked_goal = {51: asyncio.Event(), 52: asyncio.Event()}

    def parked(d: Deferred) -> Deferred:
        nonlocal deferred
        deferred += 1
        if deferred in parked_goal:
            parked_goal[deferred].set()
        return d

    async def handler(msg: Poll, _: CallContext) -> Index | Deferred:
        if msg.after <= 0:
            return Index(waiters.index)
        if msg.after == 99:

            async def fail() -> Index:
                raise ServiceError(409, "the poll failed on wake")

            return parked(Deferred(waiters.wait(100, 30), fail))

        async def finish() -> Index:
            return Index(waiters.index)

        return parked(Deferred(waiters.wait(msg.after + 1, 30), finish))

    try:
        # One slot only: if a parked poll held it, nothing else could be answered.
        await server.serve(f"{unique}.poll", handler, Poll, queue="q", concurrency=1)
        polls = [
            asyncio.ensure_future(
                client.request(f"{unique}.poll", Poll(after=5), Index, timeout=30)
            )
            for _ in range(50)
        ]
        failing = asyncio.ensure_future(
            client.request(f"{unique}.poll", Poll(after=99), Index, timeout=30)
        )
        await asyncio.wait_for(parked_goal[51].wait(), 20)
        assert len(server._parked) == 51
        for _ in range(20):
            got = await client.request(f"{unique}.poll", Poll(after=0), Index, timeout=10)
            assert got == Index(1)
        assert not any(p.done() for p in polls)
        waiters.notify(6)
        assert await asyncio.gather(*polls) == [Index(6)] * 50
        assert not failing.done()
        waiters.notify(100)
        with pytest.raises(ServiceError) as err:
            await failing
        assert (err.value.code, err.value.message) == (409, "the poll failed on wake")

        # At close, a poll still waiting gets its answer from the current state.
        late = asyncio.ensure_future(
            client.request(f"{unique}.poll", Poll(after=500), Index, timeout=30)
        )
        await asyncio.wait_for(parked_goal[52].wait(), 20)
        assert len(server._parked) == 1
        await server.close()
        assert await late == Index(100)
    finally:
        await client.close()
        await server.close()
