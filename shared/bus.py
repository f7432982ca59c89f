"""The bus: typed request/reply and broadcast over NATS, msgspec msgpack on the wire.

Handlers are plain async functions `(request, context) -> reply`. The bus makes sure every
request gets a reply: a ServiceError becomes a typed error reply, anything else a generic 500
with the traceback logged (never sent). Each subscription runs at most `concurrency` handlers at
once, and `close()` stops intake, lets in-flight handlers finish, and drains the connection.
Requests may travel micro-batched (shared/bus_batch.py), each still handled and answered alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import nats
import nats.errors
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from prometheus_client import Counter, Histogram
from structlog.contextvars import bind_contextvars, reset_contextvars

from shared import eager, nats_request
from shared.bus_batch import BATCH_SUFFIX, Answer, BatchClient, Item, ReplyBatcher, items_decoder
from shared.bus_slots import Slots
from shared.deferred import Deferred, ParkedReplies
from shared.errors import BusTimeout, NoResponders, ServiceError
from shared.messages import BusError
from shared.nats_inline import InlineClient

log = structlog.get_logger("bus")

T = TypeVar("T")

REQUEST_ID = "Trellis-Request-Id"
CALLER = "Trellis-Caller"
ERROR = "Trellis-Error"

HANDLED = Counter("trellis_bus_handled_total", "Bus messages handled", ["subject", "outcome"])
HANDLE_SECONDS = Histogram(
    "trellis_bus_handle_seconds",
    "Time to handle one bus message",
    ["subject"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 30),
)


# The metric children per served subject, looked up once: `labels()` costs more than the
# increment itself. Labels name the subject family, without the per-cluster prefix (bounded
# label values).
_handled_ok: dict[str, tuple[str, Counter, Histogram]] = {}


def _metrics_for(subject: str) -> tuple[str, Counter, Histogram]:
    m = _handled_ok.get(subject)
    if m is None:
        family = subject.split(".", 1)[-1]
        m = (family, HANDLED.labels(family, "ok"), HANDLE_SECONDS.labels(family))
        _handled_ok[subject] = m
    return m


_encoder = msgspec.msgpack.Encoder()
_decoders: dict[Any, msgspec.msgpack.Decoder] = {}
_error_decoder = msgspec.msgpack.Decoder(BusError)


def decoder_for(kind: Any) -> msgspec.msgpack.Decoder:
    """Decoders are typed; build one per type once and reuse it."""
    dec = _decoders.get(kind)
    if dec is None:
        dec = _decoders[kind] = msgspec.msgpack.Decoder(kind)
    return dec


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


async def _resume_ordered_consumers(nc: NatsClient) -> None:
    """A restarted nats-server has lost its ordered consumers (KV watchers, log followers: in
    memory on the server); nats-py would notice only after two missed idle heartbeats (10 s or
    more). Recreate each at once from the next stream sequence it has not seen."""
    for sub in list(nc._subs.values()):
        jsi = getattr(sub, "_jsi", None)
        if jsi is None or not jsi._ordered:
            continue
        try:
            await jsi.reset_ordered_consumer(jsi._sseq + 1)
        except Exception:  # the heartbeat check of nats-py remains as the fallback
            log.warning("could not resume an ordered consumer", stream=jsi._stream)


@dataclass(slots=True)
class CallContext:
    """What a handler knows about who asked and why; bound into every log line."""

    subject: str
    request_id: str = ""
    caller: str = ""
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Any, CallContext], Awaitable[Any]]


class Bus:
    """A NATS connection with typed request/reply, queue-group services and broadcasts."""

    def __init__(self, nc: NatsClient, name: str) -> None:
        self.nc = nc
        self.name = name
        self._subs: list[Any] = []
        self._inflight: set[asyncio.Task[None]] = set()
        # Long polls waiting for their answer without holding a handler slot (shared/deferred.py).
        self._parked = ParkedReplies()
        # Micro-batching (shared/bus_batch.py): requests sent with batch=True, and the replies
        # to batches this bus serves.
        self._batcher: BatchClient | None = None
        self._replies = ReplyBatcher(nc)
        # Called after a reconnect: broadcasts sent meanwhile were missed, caches must reload.
        self.reconnect_hooks: list[Callable[[], Awaitable[None]]] = []

    @classmethod
    async def connect(cls, url: str, name: str, **options: Any) -> Bus:
        async def on_error(err: Exception) -> None:
            log.warning("nats error", error=str(err), client=name)

        async def on_disconnect() -> None:
            log.warning("nats disconnected", client=name)

        holder: list[Bus] = []

        async def on_reconnect() -> None:
            log.info("nats reconnected", client=name)
            if holder:
                await _resume_ordered_consumers(holder[0].nc)
            for hook in list(holder[0].reconnect_hooks) if holder else []:
                try:
                    await hook()
                except Exception:
                    log.exception("reconnect hook failed")

        nc = InlineClient()
        await nc.connect(
            servers=[u.strip() for u in url.split(",")],
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            connect_timeout=options.pop("connect_timeout", 5),
            # Find a dead connection (a black-holed route, a frozen server) in seconds, not the
            # default minutes, so that reconnection and re-subscription start soon.
            ping_interval=options.pop("ping_interval", 5),
            max_outstanding_pings=options.pop("max_outstanding_pings", 3),
            error_cb=on_error,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
            **options,
        )
        bus = cls(nc, name)
        holder.append(bus)
        return bus

    @property
    def max_payload(self) -> int:
        return self.nc.max_payload

    async def request(
        self,
        subject: str,
        message: Any,
        reply_type: type[T],
        *,
        timeout: float,
        request_id: str = "",
        caller: str = "",
        headers: dict[str, str] | None = None,
        batch: bool = False,
    ) -> T:
        """Send a typed request and decode the typed reply; a handler's error is re-raised as a
        ServiceError with the same code and message. `batch`: travel with the other requests to
        `subject` made in this loop iteration, to a subject served with `batched=True`."""
        # Headers only when there is something to say: a message without them is cheaper to
        # build, route and parse (nats-py parses header lines in Python).
        hdrs: dict[str, str] | None = None
        if headers or request_id or caller:
            hdrs = dict(headers or {})
            if request_id:
                hdrs[REQUEST_ID] = request_id
            if caller:
                hdrs[CALLER] = caller
        try:
            if batch:
                if self._batcher is None:
                    self._batcher = BatchClient(self.nc)
                answer = await self._batcher.request(
                    subject + BATCH_SUFFIX, encode(message), timeout=timeout, headers=hdrs
                )
                error, data = answer.error, answer.data
            else:
                msg = await nats_request.request(
                    self.nc, subject, encode(message), timeout=timeout, headers=hdrs
                )
                error, data = bool(msg.headers and msg.headers.get(ERROR)), msg.data
        except nats.errors.NoRespondersError:
            raise NoResponders(subject) from None
        except nats.errors.TimeoutError:
            raise BusTimeout(subject, timeout) from None
        if error:
            err = _error_decoder.decode(data)
            raise ServiceError(err.code, err.message)
        return decoder_for(reply_type).decode(data)

    async def publish(self, subject: str, message: Any, *, request_id: str = "") -> None:
        """Broadcast to every subscriber (no reply)."""
        hdrs = {REQUEST_ID: request_id} if request_id else None
        await self.nc.publish(subject, encode(message), headers=hdrs)

    async def listen(self, subject: str, on_data: Callable[[bytes], None]) -> None:
        """A broadcast listener called as the client reads each message (no task, no queue):
        whatever it changes is in place before any message that arrived after it on this
        connection is dispatched. `on_data` gets the payload and must not block."""

        async def on_message(msg: Msg) -> None:
            on_data(msg.data)

        sub = await self.nc.subscribe(subject, cb=on_message)
        if isinstance(self.nc, InlineClient):
            self.nc.deliver_inline(sub, lambda _s, _r, data, _h: on_data(data))
        self._subs.append(sub)
        await self.nc.flush()

    async def serve(
        self,
        subject: str,
        handler: Handler,
        request_type: Any,
        *,
        queue: str | None = None,
        concurrency: int = 64,
        batched: bool = False,
    ) -> None:
        """Serve `subject` (in queue group `queue`, or as a broadcast listener when None);
        `batched`: also the batches of requests to it (shared/bus_batch.py), each request
        handled on its own, under the same concurrency bound."""
        dec = decoder_for(request_type)
        slots = Slots(concurrency)

        def start(work: Coroutine[Any, Any, None]) -> None:
            task = eager.start(work)  # a handler answering without a wait needs no task
            if task is not None:
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)

        async def run(msg: Msg) -> None:
            try:
                reply = msg.reply

                async def send(data: bytes, error: bool) -> None:
                    if reply:
                        with contextlib.suppress(Exception):
                            hdrs = {ERROR: "1"} if error else None
                            await self.nc.publish(reply, data, headers=hdrs)

                await self._handle(msg.subject, msg.data, msg.headers, dec, handler, send)
            finally:
                slots.release()

        async def on_message(msg: Msg) -> None:
            # Waiting here holds back this subscription's delivery: natural backpressure.
            await slots.acquire()
            start(run(msg))

        async def run_item(item: Item, reply: str) -> None:
            try:

                async def send(out: bytes, error: bool) -> None:
                    self._replies.add(reply, Answer(item.id, out, error))

                await self._handle(subject, item.data, item.headers, dec, handler, send)
            finally:
                slots.release()

        def start_item(job: tuple[Item, str]) -> None:
            start(run_item(*job))

        def on_batch(
            batch_subject: str, reply: str, data: bytes, _h: dict[str, str] | None
        ) -> None:
            try:
                items = items_decoder.decode(data)
            except msgspec.DecodeError:
                log.warning("malformed batch", subject=batch_subject)
                return
            dropped = sum(not slots.start(start_item, (it, reply), len(it.data)) for it in items)
            if dropped:
                log.warning("overloaded: requests dropped", subject=subject, dropped=dropped)

        async def on_batch_msg(msg: Msg) -> None:
            on_batch(msg.subject, msg.reply, msg.data, msg.headers)

        group = queue or ""
        self._subs.append(await self.nc.subscribe(subject, queue=group, cb=on_message))
        if batched:
            sub = await self.nc.subscribe(subject + BATCH_SUFFIX, queue=group, cb=on_batch_msg)
            if isinstance(self.nc, InlineClient):
                self.nc.deliver_inline(sub, on_batch)
            self._subs.append(sub)
        # Round trip to the server: once serve() returns, requests find this subscriber.
        await self.nc.flush()

    async def _handle(
        self,
        subject: str,
        data: bytes,
        msg_headers: dict[str, str] | None,
        dec: msgspec.msgpack.Decoder,
        handler: Handler,
        send: Callable[[bytes, bool], Awaitable[None]],
    ) -> None:
        """Run `handler` on one request and `send` its reply (or error), now or, for a
        Deferred, when it is ready."""
        if msg_headers:
            ctx = CallContext(
                subject,
                msg_headers.get(REQUEST_ID, ""),
                msg_headers.get(CALLER, ""),
                msg_headers,
            )
        else:
            ctx = CallContext(subject)
        started = time.perf_counter()
        bound = bind_contextvars(request_id=ctx.request_id) if ctx.request_id else None
        reply: bytes
        error = False
        try:
            request = dec.decode(data)
            result = await handler(request, ctx)
            if isinstance(result, Deferred):
                # Free this slot now; the reply goes out when the deferred is ready.
                finish = result.finish
                self._parked.park(
                    result,
                    lambda: self._handle(
                        subject, data, msg_headers, dec, lambda _r, _c: finish(), send
                    ),
                )
                return
            reply = encode(result) if result is not None else b""
        except msgspec.DecodeError as exc:
            error, reply = True, encode(BusError(code=400, message=f"bad message: {exc}"))
        except ServiceError as exc:
            error, reply = True, encode(BusError(code=exc.code, message=exc.message))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("handler failed", subject=subject)
            error, reply = True, encode(BusError(code=500, message="internal error"))
        finally:
            if bound is not None:
                reset_contextvars(**bound)
        await send(reply, error)
        family, ok, seconds = _metrics_for(subject)
        (HANDLED.labels(family, "error") if error else ok).inc()
        seconds.observe(time.perf_counter() - started)

    async def close(self) -> None:
        """Stop intake, let in-flight handlers finish, then drain and close the connection."""
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        # Queued batch items start as slots free: wait for those too.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while self._inflight and (left := deadline - loop.time()) > 0:
            await asyncio.wait(list(self._inflight), timeout=left)
        await self._parked.close()
        await self._replies.close()
        with contextlib.suppress(Exception):
            await self.nc.drain()
        with contextlib.suppress(Exception):
            await self.nc.close()
