"""The concurrency bound of one served subject (shared/bus.py): at most `limit` handlers at once.

Plain requests wait for a slot in their subscription's delivery task, which holds back that
subscription (backpressure). Items of batches arrive inline from the read loop
(shared/nats_inline.py), which must never wait, so they queue here instead, in arrival order
with the waiting plain requests, and start as slots free. The queue is bounded as nats-py bounds
a subscription's pending messages: beyond it an item is dropped and its requester times out, as
for a slow consumer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from nats.aio.subscription import (
    DEFAULT_SUB_PENDING_BYTES_LIMIT,
    DEFAULT_SUB_PENDING_MSGS_LIMIT,
)


class Slots:
    def __init__(
        self,
        limit: int,
        *,
        max_queued: int = DEFAULT_SUB_PENDING_MSGS_LIMIT,
        max_bytes: int = DEFAULT_SUB_PENDING_BYTES_LIMIT,
    ) -> None:
        self.free = limit
        self.max_queued = max_queued
        self.max_bytes = max_bytes
        # Waiting plain requests (a future each) and queued items (what to run, and its size).
        self._queue: deque[asyncio.Future[None] | tuple[Callable[[Any], None], Any, int]] = deque()
        self._queued_bytes = 0

    async def acquire(self) -> None:
        """Wait for a slot; `release` it when done."""
        if self.free > 0 and not self._queue:
            self.free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if not future.cancelled():  # the slot was handed over just before the cancel
                self.release()
            raise

    def start(self, run: Callable[[Any], None], arg: Any, size: int) -> bool:
        """`run(arg)` now if a slot is free, else once one is; False: the queue is full and it
        was dropped. `run` takes the slot and must `release` it."""
        if self.free > 0 and not self._queue:
            self.free -= 1
            run(arg)
            return True
        if len(self._queue) >= self.max_queued or self._queued_bytes + size > self.max_bytes:
            return False
        self._queue.append((run, arg, size))
        self._queued_bytes += size
        return True

    def release(self) -> None:
        """Hand the slot to the first in line, or free it."""
        while self._queue:
            waiting = self._queue.popleft()
            if isinstance(waiting, tuple):
                run, arg, size = waiting
                self._queued_bytes -= size
                run(arg)
                return
            if not waiting.done():
                waiting.set_result(None)
                return
        self.free += 1
