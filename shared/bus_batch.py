"""Micro-batching of bus requests: the requests to one subject made in the same event-loop
iteration travel as one NATS message, and the replies a replica produces in one iteration for
one requester travel back as one.

Every NATS message costs fixed work whatever it carries: nats-py's protocol parsing and Msg
object and subscription queue on the receiving side, the publish on the sending side, a route
through nats-server. Under load many requests are in flight at once and that work is paid once
per batch. A batch is flushed on the next loop iteration (a task's first step, never a timer), so
a lone request waits for nothing.

Semantics per request are those of a plain request: each item has its own deadline (a
timeout), a batch nobody receives fails each of its items with no responders (and each is
retried once, as nats_request does, together after one shared pause), and a replica that dies
leaves each item to time out. A batch goes to one replica of the queue group, so batches are
bounded (MAX_BATCH items) to keep the load spread.

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
from nats.aio.msg import Msg

from shared.nats_inline import InlineClient
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
    __slots__ = ("batch", "deadline", "future", "item")

    def __init__(self, item: Item, future: asyncio.Future[Answer], deadline: float) -> None:
        self.item = item
        self.future = future
        self.deadline = deadline
        self.batch = 0


class _Batch:
    """The items of one sent batch still waiting, and one timer for the earliest deadline among
    them (cheaper than a timer per item; each item still times out at its own deadline)."""

    __slots__ = ("timer", "waiting")

    def __init__(self, waiting: dict[int, _Waiting], timer: asyncio.TimerHandle) -> None:
        self.waiting = waiting
        self.timer = timer


def _fail(future: asyncio.Future[Answer], error: Exception | type[Exception]) -> None:
    if not future.done():
        future.set_exception(error)


class _NoResponders(nats.errors.NoRespondersError):
    """No responders for a batch: its items wait out one shared pause before their retry, so
    that they travel together again."""

    def __init__(self, pause: asyncio.Future[None]) -> None:
        super().__init__()
        self.pause = pause


def _resume(pause: asyncio.Future[None]) -> None:
    if not pause.done():
        pause.set_result(None)


class BatchClient:
    """The requesting side: one reply inbox per connection, one pending future per item."""

    def __init__(self, nc: InlineClient, *, max_batch: int = MAX_BATCH) -> None:
        self.nc = nc
        self.max_batch = max_batch
        self._inbox = ""
        self._started: asyncio.Future[None] | None = None
        self._ids = itertools.count(1)
        self._batch_ids = itertools.count(1)
        self._pending: dict[int, _Waiting] = {}
        # Batch number -> its items still waiting (for their timeouts and a no-responders status).
        self._batches: dict[int, _Batch] = {}
        self._queued: dict[str, list[_Waiting]] = {}
        self._scheduled = False

    async def _start(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            try:
                inbox = self.nc.new_inbox()
                sub = await self.nc.subscribe(inbox + ".*", cb=self._on_reply)
                if isinstance(self.nc, InlineClient):
                    self.nc.deliver_inline(sub, self._deliver)
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
        except _NoResponders as exc:
            left = timeout - (time.monotonic() - started) - NOBODY_RETRY
            if left <= 0:
                raise
            await asyncio.shield(exc.pause)
            return await self._request_once(subject, data, left, headers)

    async def _request_once(
        self, subject: str, data: bytes, timeout: float, headers: dict[str, str] | None
    ) -> Answer:
        if not self._inbox:
            await self._start()
        loop = asyncio.get_running_loop()
        item = Item(next(self._ids), data, headers)
        waiting = _Waiting(item, loop.create_future(), loop.time() + timeout)
        item_id = item.id
        self._pending[item_id] = waiting
        queue = self._queued.get(subject)
        if queue is None:
            queue = self._queued[subject] = []
        queue.append(waiting)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        try:
            return await waiting.future
        finally:
            del self._pending[item_id]
            batch = self._batches.get(waiting.batch)
            if batch is not None:
                batch.waiting.pop(item_id, None)
                if not batch.waiting:
                    batch.timer.cancel()
                    del self._batches[waiting.batch]

    def _flush(self) -> None:
        """Send what this iteration queued: per subject, in bounded batches."""
        queued, self._queued, self._scheduled = self._queued, {}, False
        limit = self.nc.max_payload
        for subject, waiting in queued.items():
            live = [w for w in waiting if not w.future.done()]
            entries = ((w.item.data, w.item.headers, w) for w in live)
            for run in chunks(entries, limit, self.max_batch):
                self._send(subject, run)

    def _send(self, subject: str, run: list[_Waiting]) -> None:
        number = next(self._batch_ids)
        for w in run:
            w.batch = number
        first = min(w.deadline for w in run)
        timer = asyncio.get_running_loop().call_at(first, self._expire, number)
        self._batches[number] = _Batch({w.item.id: w for w in run}, timer)
        try:
            payload = encode([w.item for w in run])
            self.nc.publish_nowait(subject, payload, reply=self._inbox + str(number))
        except Exception as exc:  # the same error a plain request would have raised
            for w in run:
                if not w.future.done():
                    w.future.set_exception(exc)

    def _expire(self, number: int) -> None:
        """Fail the items of batch `number` past their deadline; wait again for the others."""
        batch = self._batches.get(number)
        if batch is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        later = [w for w in batch.waiting.values() if not w.future.done()]
        for w in later:
            if w.deadline <= now:
                _fail(w.future, nats.errors.TimeoutError)
        later = [w for w in later if w.deadline > now]
        if later:
            batch.timer = loop.call_at(min(w.deadline for w in later), self._expire, number)

    async def _on_reply(self, msg: Msg) -> None:
        self._deliver(msg.subject, "", msg.data, msg.headers)

    def _deliver(
        self, subject: str, _reply: str, data: bytes, headers: dict[str, str] | None
    ) -> None:
        if headers and headers.get(_STATUS) == _NO_RESPONDERS:
            token = subject.rpartition(".")[2]
            if not token.isdigit():
                return
            batch = self._batches.pop(int(token), None)
            if batch is not None:
                batch.timer.cancel()
                loop = asyncio.get_running_loop()
                pause = loop.create_future()
                loop.call_later(NOBODY_RETRY, _resume, pause)
                for waiting in batch.waiting.values():
                    _fail(waiting.future, _NoResponders(pause))
            return
        try:
            answers = _answers_decoder.decode(data)
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

    def __init__(self, nc: InlineClient, *, max_batch: int = 4 * MAX_BATCH) -> None:
        self.nc = nc
        self.max_batch = max_batch
        self._queued: dict[str, tuple[str, list[Answer]]] = {}
        self._scheduled = False

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
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        queued, self._queued, self._scheduled = self._queued, {}, False
        limit = self.nc.max_payload
        for reply, answers in queued.values():
            entries = ((a.data, None, a) for a in answers)
            for run in chunks(entries, limit, self.max_batch):
                try:
                    self.nc.publish_nowait(reply, encode(run))
                except Exception:  # as a plain reply that cannot go out: the requester times out
                    continue

    async def close(self) -> None:
        """Hand what is queued to the connection now."""
        if self._queued:
            self._flush()
