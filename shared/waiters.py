"""Futures parked on an index: the one notifier behind blocking queries and consistent reads.

A waiter is a future in a heap ordered by the index it waits for, plus a timer for its deadline:
no task, no worker, no slot in a pool. `notify(index)` (called by whoever applies entries) wakes
every waiter whose index was reached; a deadline resolves its waiter with False. Waiters that
finished early (deadline, cancelled) stay in the heap until reached or until they outnumber the
live ones, when the heap is rebuilt, so a waiter on a far-future index cannot leak.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any

# Rebuild the heap once at least this many finished waiters linger and they are the majority.
_COMPACT_MIN = 64


class IndexWaiters:
    """See the module docstring. Single event loop; every method is synchronous and cheap."""

    def __init__(self, index: int = 0) -> None:
        self.index = index
        # [target, order, future (None once out of the heap), counted among the finished]:
        # lists, so leaving the heap and finishing can be marked on the entry itself.
        self._heap: list[list[Any]] = []
        self._order = itertools.count()
        self._finished = 0  # entries in the heap whose future is already done

    def __len__(self) -> int:
        """Waiters still waiting."""
        return len(self._heap) - self._finished

    def wait(self, target: int, timeout: float | None = None) -> asyncio.Future[bool]:
        """A future that resolves True once the index reaches `target`, or False after
        `timeout` seconds. Cancelling it is allowed (its entry is cleaned up later)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        if self.index >= target:
            fut.set_result(True)
            return fut
        entry: list[Any] = [target, next(self._order), fut, False]
        heapq.heappush(self._heap, entry)
        timer = loop.call_later(timeout, _expire, fut) if timeout is not None else None
        fut.add_done_callback(lambda _: self._on_done(entry, timer))
        return fut

    def notify(self, index: int) -> int:
        """The index reached `index`: wake the waiters it satisfies; returns how many woke."""
        if index > self.index:
            self.index = index
        woken = 0
        heap = self._heap
        while heap and heap[0][0] <= self.index:
            entry = heapq.heappop(heap)
            fut, entry[2] = entry[2], None  # out of the heap: its done-callback must not count it
            if entry[3]:
                self._finished -= 1
            elif not fut.done():
                fut.set_result(True)
                woken += 1
        return woken

    def wake_all(self) -> None:
        """Resolve every waiter now with False (shutdown: answer with what we have)."""
        heap, self._heap, self._finished = self._heap, [], 0
        for entry in heap:
            fut, entry[2] = entry[2], None
            if not fut.done():
                fut.set_result(False)

    def _on_done(self, entry: list[Any], timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()
        if entry[2] is None:
            return  # already out of the heap (woken, or dropped by a rebuild)
        entry[3] = True
        self._finished += 1
        if self._finished >= _COMPACT_MIN and self._finished * 2 > len(self._heap):
            keep = []
            for e in self._heap:
                if e[3]:
                    e[2] = None
                else:
                    keep.append(e)
            heapq.heapify(keep)
            self._heap = keep
            self._finished = 0


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
