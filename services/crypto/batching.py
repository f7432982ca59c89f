"""Coalescing of concurrent crypto calls: under load, the calls that queue behind the ones already
in flight travel to a worker together, as one sealed message, and come back as one.

Every message costs the same fixed work whatever it carries: sealing and opening on both sides,
two trips through nats-server, the worker's bus handling. A cheap op (an EC leaf, an RSA
signature) costs about as much as that overhead, which a batch pays once for all it carries.
With few calls at a time nothing waits: a call goes out at once while fewer messages are out
than `limit` allows for the workers seen lately (every reply names its worker process). One
worker gets one message at a time: it works through its batch while the next one gathers, and
the round trip it idles between them is cheaper than a message more. Several workers get two
each but one, so that the queue group's random placement rarely leaves one idle.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from services.crypto.messages import CryptoReply, CryptoRequest

WORKER_TTL = 30.0  # seconds: a worker not heard from for this long no longer counts
# A batch runs on one worker, one op after another: bounded so one message stays short.
MAX_BATCH = 16

# (requests, timeout) -> (the answering worker's id, a reply per request); raises for all.
Send = Callable[[list[CryptoRequest], float], Awaitable[tuple[str, list[CryptoReply]]]]


def limit(workers: int) -> int:
    """Messages in flight before calls queue, for this many live workers."""
    return 2 * max(1, workers) - 1


class Waiting:
    __slots__ = ("future", "request", "timeout")

    def __init__(self, request: CryptoRequest, timeout: float) -> None:
        self.request = request
        self.timeout = timeout
        self.future: asyncio.Future[CryptoReply] = asyncio.get_running_loop().create_future()


class Batcher:
    """Sends requests through `send`: alone while there is room in flight, else queued and sent
    together when a message comes back."""

    def __init__(self, send: Send, *, max_batch: int = MAX_BATCH) -> None:
        self.send = send
        self.max_batch = max_batch
        self.inflight = 0
        self.queue: list[Waiting] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.workers: dict[str, float] = {}  # worker id -> when it last answered

    def room(self) -> bool:
        """Whether another message may go out now."""
        now = time.monotonic()
        if any(seen < now - WORKER_TTL for seen in self.workers.values()):
            self.workers = {w: seen for w, seen in self.workers.items() if seen >= now - WORKER_TTL}
        return self.inflight < limit(len(self.workers))

    async def _out(self, requests: list[CryptoRequest], timeout: float) -> list[CryptoReply]:
        worker, replies = await self.send(requests, timeout)
        self.workers[worker] = time.monotonic()
        return replies

    async def call(self, request: CryptoRequest, timeout: float) -> CryptoReply:
        if not self.queue and self.room():
            self.inflight += 1
            try:
                return (await self._out([request], timeout))[0]
            finally:
                self.inflight -= 1
                self._drain()
        waiting = Waiting(request, timeout)
        self.queue.append(waiting)
        return await waiting.future

    def _drain(self) -> None:
        """Send what queued while there was no room, in batches, as room frees up."""
        while self.queue and self.room():
            batch = [w for w in self.queue[: self.max_batch] if not w.future.done()]
            del self.queue[: self.max_batch]
            if not batch:
                continue
            self.inflight += 1
            task = asyncio.create_task(self._send(batch))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _send(self, batch: list[Waiting]) -> None:
        try:
            replies = await self._out([w.request for w in batch], max(w.timeout for w in batch))
        except asyncio.CancelledError:
            for w in batch:
                w.future.cancel()
            raise
        except Exception as exc:
            for w in batch:
                if not w.future.done():
                    w.future.set_exception(exc)
        else:
            for w, reply in zip(batch, replies, strict=True):
                if not w.future.done():
                    w.future.set_result(reply)
        finally:
            self.inflight -= 1
            self._drain()
