"""Deferred replies: how a bus handler answers a long poll without holding its slot.

A handler that must wait (a blocking query on an index) returns a `Deferred` instead of a reply:
a future that says when the answer can be built, and a `finish` that builds it. The bus frees the
handler's concurrency slot at once and parks the request's reply subject on the future; when the
future resolves, `finish` runs and its result is sent like any handler's reply (and may itself be
another Deferred, to wait again). Waiting costs a future and a timer, not a task or a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, eq=False)
class Deferred:
    """`ready` resolves when the reply can be built; the bus may also resolve it early (with
    None) at shutdown, so `finish` must answer from the current state whatever `ready` says."""

    ready: asyncio.Future[Any]
    finish: Callable[[], Awaitable[Any]]


class ParkedReplies:
    """The replies one bus has parked: sends each when its Deferred is ready, and at close wakes
    them all so that every waiting client gets an answer before the connection drains."""

    def __init__(self) -> None:
        self._parked: set[Deferred] = set()
        self._sending: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._parked)

    def park(self, deferred: Deferred, respond: Callable[[], Awaitable[None]]) -> None:
        """Call `respond` (which runs `finish` and publishes) once `deferred.ready` is done."""
        self._parked.add(deferred)

        def wake(_: asyncio.Future[Any]) -> None:
            self._parked.discard(deferred)
            task = asyncio.get_running_loop().create_task(respond())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

        deferred.ready.add_done_callback(wake)

    async def close(self, timeout: float = 20.0) -> None:
        """Answer every parked request now and wait (bounded) until the answers are sent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (self._parked or self._sending) and loop.time() < deadline:
            for deferred in list(self._parked):
                if not deferred.ready.done():
                    deferred.ready.set_result(None)
            # Done-callbacks run on the next loop iteration: let them start their replies.
            await asyncio.sleep(0)
            if self._sending:
                with contextlib.suppress(Exception):
                    await asyncio.wait(list(self._sending), timeout=deadline - loop.time())
