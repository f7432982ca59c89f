"""Micro-batching of bus requests: the requests to one subject made in the same event-loop
iteration travel as one NATS message, and the replies a replica produces in one iteration for
one requester travel back as one.

Every NATS message costs fixed work whatever it carries: nats-py's protocol parsing and Msg
object and subscription queue on the receiving side, the publish on the sending side, a route
through nats-server. Under load many requests are in flight at once and that work is paid once
per batch. A batch is flushed on the next loop iteration (a task's first step, never a timer), so
a lone request waits for nothing.

Semantics per request are those of a plain request: each item has its own timer (a timeout),
a batch nobody receives fails each of its items with no responders (and each is retried once,
as nats_request does), and a replica that dies leaves each item to time out. A batch goes to one
replica of the queue group, so batches are bounded (MAX_BATCH items) to keep the load spread.

Wire format (msgpack): a batch is a list of `Item` sent to `<subject>.batch` with the reply
subject `<inbox>.<batch number>`; replies are lists of `Answer` sent to any subject under the
requester's inbox (they name their items by id). The inbox hears nothing else but nats-server's
no-responders status for a batch, which names the batch by that last token.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable
from typing import TypeVar

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from shared.nats_request import NOBODY_RETRY

BATCH_SUFFIX = ".batch"
MAX_BATCH = 8
# Framing bytes an item may add beyond its payload and headers (array, id, bin headers).
_ITEM_OVERHEAD = 32
_STATUS = "Status"
_NO_RESPONDERS = "503"
V = TypeVar("V")


class Item(msgspec.Struct, array_like=True):
    id: int
    data: bytes
    headers: dict[str, str] | None = None


class Answer(msgspec.Struct, array_like=True):
    id: int
    data: bytes
    error: bool = False


_encoder = msgspec.msgpack.Encoder()
items_decoder = msgspec.msgpack.Decoder(list[Item])
_answers_decoder = msgspec.msgpack.Decoder(list[Answer])


def _size(data: bytes, headers: dict[str, str] | None) -> int:
    extra = sum(len(k) + len(v) + 8 for k, v in headers.items()) if headers else 0
    return len(data) + extra + _ITEM_OVERHEAD


def chunks(
    entries: Iterable[tuple[bytes, dict[str, str] | None, V]], limit: int, max_items: int
) -> list[list[V]]:
    """Split `(data, headers, value)` entries into runs of at most `max_items` whose framed size
    stays under `limit` bytes (an entry too large alone still goes alone)."""
    out: list[list[V]] = []
    current: list[V] = []
    size = 0
    for data, headers, value in entries:
        n = _size(data, headers)
        if current and (len(current) >= max_items or size + n > limit):
            out.append(current)
            current, size = [], 0
        current.append(value)
        size += n
    if current:
        out.append(current)
    return out


def encode(values: list[Item] | list[Answer]) -> bytes:
    return _encoder.encode(values)


class _Waiting:
    __slots__ = ("batch", "future", "item")

    def __init__(self, item: Item, future: asyncio.Future[Answer]) -> None:
        self.item = item
        self.future = future
        self.batch = 0


def _fail(future: asyncio.Future[Answer], error: type[Exception]) -> None:
    if not future.done():
        future.set_exception(error())


class BatchClient:
    """The requesting side: one reply inbox per connection, one pending future per item."""

    def __init__(self, nc: Client, *, max_batch: int = MAX_BATCH) -> None:
        self.nc = nc
        self.max_batch = max_batch
        self._inbox = ""
        self._started: asyncio.Future[None] | None = None
        self._ids = itertools.count(1)
        self._batch_ids = itertools.count(1)
        self._pending: dict[int, _Waiting] = {}
        # Batch number -> the ids of its items still waiting (for a no-responders status).
        self._batches: dict[int, set[int]] = {}
        self._queued: dict[str, list[_Waiting]] = {}
        self._scheduled = False
        self._flushing: set[asyncio.Task[None]] = set()

    async def _start(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            try:
                inbox = self.nc.new_inbox()
                await self.nc.subscribe(inbox + ".*", cb=self._on_reply)
                self._inbox = inbox + "."
                self._started.set_result(None)
            except BaseException as exc:
                self._started.set_exception(exc)
                self._started = None
                raise
        else:
            await asyncio.shield(self._started)

    async def request(
        self, subject: str, data: bytes, *, timeout: float, headers: dict[str, str] | None = None
    ) -> Answer:
        """Send `data` to `subject` (the `.batch` subject of a served subject) with the other
        requests of this iteration; retried once on no responders, as nats_request does."""
        started = time.monotonic()
        try:
            return await self._request_once(subject, data, timeout, headers)
        except nats.errors.NoRespondersError:
            left = timeout - (time.monotonic() - started) - NOBODY_RETRY
            if left <= 0:
                raise
            await asyncio.sleep(NOBODY_RETRY)
            return await self._request_once(subject, data, left, headers)

    async def _request_once(
        self, subject: str, data: bytes, timeout: float, headers: dict[str, str] | None
    ) -> Answer:
        if not self._inbox:
            await self._start()
        loop = asyncio.get_running_loop()
        waiting = _Waiting(Item(next(self._ids), data, headers), loop.create_future())
        item_id = waiting.item.id
        self._pending[item_id] = waiting
        queue = self._queued.get(subject)
        if queue is None:
            queue = self._queued[subject] = []
        queue.append(waiting)
        if not self._scheduled:
            self._scheduled = True
            task = loop.create_task(self._flush())
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)
        timer = loop.call_later(timeout, _fail, waiting.future, nats.errors.TimeoutError)
        try:
            return await waiting.future
        finally:
            timer.cancel()
            del self._pending[item_id]
            items = self._batches.get(waiting.batch)
            if items is not None:
                items.discard(item_id)
                if not items:
                    del self._batches[waiting.batch]

    async def _flush(self) -> None:
        """Send what this iteration queued: per subject, in bounded batches."""
        queued, self._queued, self._scheduled = self._queued, {}, False
        limit = self.nc.max_payload
        for subject, waiting in queued.items():
            live = [w for w in waiting if not w.future.done()]
            entries = ((w.item.data, w.item.headers, w) for w in live)
            for run in chunks(entries, limit, self.max_batch):
                await self._send(subject, run)

    async def _send(self, subject: str, run: list[_Waiting]) -> None:
        number = next(self._batch_ids)
        for w in run:
            w.batch = number
        self._batches[number] = {w.item.id for w in run}
        try:
            payload = encode([w.item for w in run])
            await self.nc.publish(subject, payload, reply=self._inbox + str(number))
        except Exception as exc:  # the same error a plain request would have raised
            for w in run:
                if not w.future.done():
                    w.future.set_exception(exc)

    async def _on_reply(self, msg: Msg) -> None:
        headers = msg.headers
        if headers and headers.get(_STATUS) == _NO_RESPONDERS:
            token = msg.subject.rpartition(".")[2]
            if not token.isdigit():
                return
            for item_id in self._batches.pop(int(token), ()):
                waiting = self._pending.get(item_id)
                if waiting is not None:
                    _fail(waiting.future, nats.errors.NoRespondersError)
            return
        try:
            answers = _answers_decoder.decode(msg.data)
        except msgspec.DecodeError:
            return  # not from a replica: its items time out
        pending = self._pending
        for answer in answers:
            waiting = pending.get(answer.id)
            if waiting is not None and not waiting.future.done():
                waiting.future.set_result(answer)


class ReplyBatcher:
    """The serving side: answers produced in one iteration for one requester's inbox go out as
    one message (to the reply subject of the latest batch they belong to)."""

    def __init__(self, nc: Client, *, max_batch: int = 4 * MAX_BATCH) -> None:
        self.nc = nc
        self.max_batch = max_batch
        self._queued: dict[str, tuple[str, list[Answer]]] = {}
        self._scheduled = False
        self._flushing: set[asyncio.Task[None]] = set()

    def add(self, reply: str, answer: Answer) -> None:
        inbox = reply.rpartition(".")[0]
        entry = self._queued.get(inbox)
        if entry is None:
            self._queued[inbox] = (reply, [answer])
        else:
            entry[1].append(answer)
            if entry[0] != reply:
                self._queued[inbox] = (reply, entry[1])
        if not self._scheduled:
            self._scheduled = True
            task = asyncio.get_running_loop().create_task(self._flush())
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)

    async def _flush(self) -> None:
        queued, self._queued, self._scheduled = self._queued, {}, False
        limit = self.nc.max_payload
        for reply, answers in queued.values():
            entries = ((a.data, None, a) for a in answers)
            for run in chunks(entries, limit, self.max_batch):
                try:
                    await self.nc.publish(reply, encode(run))
                except Exception:  # as a plain reply that cannot go out: the requester times out
                    continue

    async def close(self) -> None:
        """Wait until what is queued has been handed to the connection."""
        while self._flushing:
            await asyncio.wait(list(self._flushing))
