"""The fast lane: ordinary forwarded requests served straight from the connection's parser.

aiohttp's per-request machinery (its start() loop, a BaseRequest with its StreamReader and
URL, _handle_request, finish_response, a StreamWriter) was most of the listener's CPU for a
request it only forwards (bench/gateway_http.py). The connection protocol, still aiohttp's,
takes each parsed message the listener says it would forward (`FastLane.takes`: its body
complete, no stream, no page of the gateway's own) and serves it in a task of its own, which
writes the reply's bytes itself (services/gateway/written.py builds them).

Everything else goes to aiohttp's queue as before, and that connection stays on aiohttp's path
from then on: answers are written strictly in order, fast requests one after another and a
request for aiohttp only once the fast ones before it are answered. What aiohttp's loop does
between requests is done here too: the keep-alive timer is re-armed after each answer and never
closes a connection with a request in flight, `Connection: close` closes after the answer, a
graceful shutdown waits for the answer in hand, reading pauses while many pipelined requests
wait. The lane relies on private attributes of aiohttp's RequestHandler: where one is missing
(another aiohttp), every request goes aiohttp's way."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web, web_protocol
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_writer import StreamWriter
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import _ErrInfo
from aiohttp.web_request import BaseRequest

from services.gateway import written

# What the lane reads or calls of RequestHandler beyond its public interface.
_PRIVATE = (
    "_buffer_paused",
    "_close",
    "_drain_helper",
    "_force_close",
    "_keepalive",
    "_keepalive_handle",
    "_keepalive_timeout",
    "_logging_enabled",
    "_loop",
    "_manager",
    "_max_msg_queue_size",
    "_message_tail",
    "_messages",
    "_msg_queue_resume_size",
    "_next_keepalive_close_time",
    "_parser",
    "_pause_reading_for_buffer",
    "_paused",
    "_payload_parser",
    "_process_keepalive",
    "_request_count",
    "_resume_reading_if_drained",
    "_upgraded",
    "_waiter",
)


def supported(cls: type = web_protocol.RequestHandler) -> bool:
    """Whether this aiohttp's RequestHandler has everything the lane relies on."""
    return all(hasattr(cls, name) for name in _PRIVATE)


class Connection(Protocol):
    """What a fast request's handler needs of its connection."""

    @property
    def remote(self) -> str: ...

    @property
    def transport(self) -> asyncio.Transport | None: ...

    async def write_reply(
        self, message: Any, status: int, headers: Mapping[str, str], body: bytes, rid: str
    ) -> None: ...


@dataclass(frozen=True)
class FastLane:
    """The listener's side: which parsed requests the lane may take, and how to serve one (its
    request id, metrics and logs, the forwarding, the answer through `write_reply`)."""

    takes: Callable[[Any], bool]
    serve: Callable[[Any, bytes, Connection], Awaitable[None]]


_Msg = tuple[Any, StreamReader]


class FastHandler(web_protocol.RequestHandler):
    """aiohttp's connection protocol with the fast lane in front of its request queue."""

    fast_lane: FastLane | None = None  # set per connection by the server; None: aiohttp alone

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queued: deque[_Msg] = deque()  # fast requests waiting for the one being served
        self._held: list[_Msg] = []  # requests for aiohttp, waiting for the fast ones before
        self._serving: asyncio.Task[None] | None = None
        self._slow = False  # a request went aiohttp's way: every later one does too
        self._remote: str | None = None

    @property
    def remote(self) -> str:
        """The client's address as BaseRequest.remote gives it ("" where unknown), once."""
        if self._remote is None:
            peer = self.peername
            if peer is None:
                self._remote = ""
            else:
                self._remote = str(peer[0]) if isinstance(peer, (list, tuple)) else str(peer)
        return self._remote

    def data_received(self, data: bytes) -> None:
        lane = self.fast_lane
        if (
            lane is None
            or (self._slow and self._serving is None)
            or self._force_close
            or self._close
            or self._upgraded
            or self._payload_parser is not None
        ):
            super().data_received(data)
            return
        try:
            messages, upgraded, tail = self._parser.feed_data(data)
        except HttpProcessingError as exc:
            # As aiohttp answers it, in its turn.
            messages = [(_ErrInfo(status=400, exc=exc, message=exc.message), EMPTY_PAYLOAD)]
            upgraded, tail = False, b""
        for msg, payload in messages:
            self._request_count += 1
            if (
                not self._slow
                and not upgraded
                and not isinstance(msg, _ErrInfo)
                and msg.path[:1] == "/"
                and payload.is_eof()
                and payload.exception() is None
                and lane.takes(msg)
            ):
                self._queued.append((msg, payload))
            else:
                self._slow = True
                self._held.append((msg, payload))
        self._upgraded = upgraded
        if upgraded and tail:
            self._message_tail = tail
        if self._serving is None and (self._queued or self._held):
            self._next()
        waiting = len(self._queued) + len(self._held) + len(self._messages)
        if not self._buffer_paused and waiting >= self._max_msg_queue_size:
            self._pause_reading_for_buffer()

    def _next(self) -> None:
        """After an answer (or a read): serve the next fast request; when none waits, hand the
        held ones to aiohttp's loop, or close, or re-arm the keep-alive timer, as that loop does
        after an answer."""
        self._serving = None
        if not self._keepalive or self._close or self._force_close:
            # What was pipelined after the last answer is not answered, as by aiohttp.
            self._queued.clear()
            self._held.clear()
            if not self._force_close and self.transport is not None:
                self.transport.close()
            return
        if self._queued:
            msg, payload = self._queued.popleft()
            if self._parser is not None:
                self._parser.message_consumed()  # frees the parser's slot for the next one
            if self._manager is not None:
                self._manager.requests_count += 1
            self._serving = self._loop.create_task(self._serve(msg, payload))
            if self._buffer_paused and len(self._queued) <= self._msg_queue_resume_size:
                self._resume_reading_if_drained()
            return
        if self._held:
            self._messages.extend(self._held)
            self._held.clear()
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            return
        loop = self._loop
        close_time = loop.time() + self._keepalive_timeout
        self._next_keepalive_close_time = close_time
        if self._keepalive_handle is None:
            self._keepalive_handle = loop.call_at(close_time, self._process_keepalive)

    async def _serve(self, msg: Any, payload: StreamReader) -> None:
        lane = self.fast_lane
        assert lane is not None
        try:
            await lane.serve(msg, payload.read_nowait(), self)
        except Exception as exc:
            # The lane answers its own failures: this is a bug in the lane itself.
            self.log_exception("Unhandled exception", exc_info=exc)
            self.force_close()
        finally:
            self._next()

    async def write_reply(
        self, message: Any, status: int, headers: Mapping[str, str], body: bytes, rid: str
    ) -> None:
        """Write the reply with `rid` as services/gateway/written.py's write_reply does; a gone
        client's answer is dropped."""
        keep_alive = not message.should_close
        data = written.encode(
            message.version, keep_alive, message.method, status, headers, body, rid
        )
        if data is None:
            resp = written.ordinary(status, headers, body)
            resp.headers["X-Request-Id"] = rid
            keep_alive = await self._write_ordinary(message, resp)
        elif self.transport is None or self.transport.is_closing():
            keep_alive = False
        else:
            self.transport.write(data)
            if self._paused:
                try:
                    await self._drain_helper()
                except ConnectionError:
                    keep_alive = False
        if not keep_alive:
            self._keepalive = False

    async def _write_ordinary(self, message: Any, resp: web.Response) -> bool:
        """`resp` written by aiohttp, as its loop would; whether the connection stays open."""
        writer = StreamWriter(self, self._loop)
        task = asyncio.current_task()
        assert task is not None
        request = BaseRequest(message, EMPTY_PAYLOAD, self, writer, task, self._loop)
        try:
            await resp.prepare(request)
            await resp.write_eof()
        except ConnectionError:
            return False
        return resp.keep_alive is not False

    def _process_keepalive(self) -> None:
        if self._serving is not None:
            self._keepalive_handle = None  # re-armed once the answer is written
            return
        super()._process_keepalive()

    def connection_lost(self, exc: BaseException | None) -> None:
        cancel = self._manager is not None and self._manager.handler_cancellation
        super().connection_lost(exc)
        self._queued.clear()
        self._held.clear()
        if cancel and self._serving is not None:
            self._serving.cancel()

    async def shutdown(self, timeout: float | None = 15.0) -> None:
        self._force_close = True  # nothing more is read; the answer in hand is written
        serving = self._serving
        if serving is not None:
            await asyncio.wait({serving}, timeout=timeout)
            serving.cancel()
        await super().shutdown(timeout)
