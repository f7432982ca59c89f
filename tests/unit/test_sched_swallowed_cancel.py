"""A scheduler replica's background loops end on stop even when their cancellation is lost: on
Python 3.11 asyncio.wait_for (inside nats-py's requests) returns a result that arrived together
with the cancel and drops the cancel, so a loop must also check a flag, and stop() must not wait
on it without a bound (a module teardown hung on this for its whole 300 s timeout)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from services.scheduler.members import Member, Membership

pytestmark = pytest.mark.asyncio

STOP_LIMIT = 10.0


class SwallowingKV:
    """A KV whose put, once the announce loop runs, is in flight when the cancel comes and
    answers anyway, as 3.11's wait_for does when the reply races the cancel."""

    def __init__(self) -> None:
        self.puts = 0
        self.in_flight = asyncio.Event()
        self.deleted: list[str] = []

    async def put(self, key: str, value: bytes) -> int:
        self.puts += 1
        if self.puts == 1:
            return 1  # the announce at start
        self.in_flight.set()
        # The cancel is dropped: the reply "arrived" with it.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(STOP_LIMIT * 3)
        return self.puts

    async def delete(self, key: str, **_: Any) -> bool:
        self.deleted.append(key)
        return True


async def test_members_stop_ends_a_loop_whose_cancel_was_swallowed() -> None:
    kv = SwallowingKV()
    members = Membership(kv, Member(id="r1", name="r1", addr="127.0.0.1"), period=0.01)
    await members.start()
    await asyncio.wait_for(kv.in_flight.wait(), STOP_LIMIT)
    stop = asyncio.ensure_future(members.stop())
    done, _ = await asyncio.wait([stop], timeout=STOP_LIMIT)
    if not done:
        stop.cancel()
    assert done, "stop() waited for ever on a loop that ignored its cancel"
    assert kv.deleted == ["member.r1"]
    assert kv.puts == 2  # the loop ended after the swallowed cancel: no announce after stop
