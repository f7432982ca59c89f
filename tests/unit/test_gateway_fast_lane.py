"""The listener's fast lane (services/gateway/fast_lane.py): ordinary forwarded requests served
from the connection's parser, everything else through aiohttp, over raw sockets. Pipelined
answers keep their order across both lanes, a gone client's answer is dropped without an error,
a graceful shutdown and the keep-alive timer wait for an answer in flight, and both lanes write
the same bytes for the same reply. The service is a stand-in that can hold its answers; no
NATS."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import types
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

import services.gateway.any_method as any_method
import services.gateway.app as gateway_app
from services.gateway import metrics
from services.gateway.apis import SECRETS
from services.gateway.fast_lane import FastHandler, FastLane, supported
from shared.messages import HttpRequest, HttpResponse
from shared.settings import Settings

LIMIT = 1024


class _Service:
    """Answers each forwarded request with its method, path and body; a path in `held` waits
    for `release` first."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.answered = 0
        self.held: set[str] = set()
        self.release = asyncio.Event()

    async def call(
        self, env: HttpRequest, *, timeout: float, request_id: str = "", caller: str = ""
    ) -> HttpResponse:
        self.seen.append(env.path)
        if env.path in self.held:
            await self.release.wait()
        self.answered += 1
        if env.path.endswith("/empty"):
            return HttpResponse(status=204, body=b"", headers={"X-Extra": "1"})
        body = f"{env.method} {env.path} {env.body.decode()}".encode()
        return HttpResponse(status=200, body=body, headers={"Content-Type": "text/plain"})


@dataclasses.dataclass
class Served:
    port: int
    service: _Service
    runner: web.ServerRunner
    fast: list[str]  # paths the fast lane served, in order


Start = Callable[..., Awaitable[Served]]


@pytest.fixture
async def start(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    """Starts a secrets listener (`lane`: with the fast lane) on a free port."""
    runners: list[web.ServerRunner] = []

    async def go(lane: bool = True, **kwargs: Any) -> Served:
        service = _Service()
        monkeypatch.setattr(gateway_app, "service_channel", lambda *a, **k: service)
        bus = types.SimpleNamespace(
            max_payload=64 << 20, nc=types.SimpleNamespace(is_connected=True)
        )
        settings = Settings(cluster_name="fast" + uuid.uuid4().hex[:8], max_request_bytes=LIMIT)
        app = gateway_app.create_app(SECRETS, bus, settings, {"ready": True})  # type: ignore[arg-type]
        assert app.fast is not None
        fast: list[str] = []
        serve = app.fast.serve

        async def counted(message: Any, body: bytes, conn: Any) -> None:
            fast.append(message.path)
            await serve(message, body, conn)

        listener = dataclasses.replace(
            app, fast=FastLane(app.fast.takes, counted) if lane else None
        )
        kwargs.setdefault("shutdown_timeout", 5)
        kwargs.setdefault("access_log", None)
        runner = any_method.runner_for(listener, SECRETS, **kwargs)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return Served(port, service, runner, fast)

    yield go
    for runner in runners:
        await runner.cleanup()


async def until(pred: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, f"{what} not met in {timeout}s"
        await asyncio.sleep(0.005)


def get(path: str, extra: str = "", version: str = "1.1") -> bytes:
    return f"GET {path} HTTP/{version}\r\nHost: t\r\n{extra}\r\n".encode()


def post(path: str, body: bytes) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One response: (head, body), the body by its Content-Length (none for a 204)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await asyncio.wait_for(reader.readexactly(length), 10)


async def connect(served: Served) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", served.port)


def newest_connection(served: Served) -> FastHandler:
    server = served.runner.server
    assert server is not None and server.connections
    conn = server.connections[-1]
    assert isinstance(conn, FastHandler)
    return conn


async def test_pipelined_requests_are_answered_in_order(start: Start) -> None:
    served = await start()
    paths = [f"/v1/kv/data/p{i}" for i in range(6)]
    served.service.held = {paths[0]}  # the first answer comes last from the service
    reader, writer = await connect(served)
    # LIST, which llhttp refuses, hands the rest of the connection to the Python parser.
    listed = f"LIST {paths[4]} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
    writer.write(b"".join(get(p) for p in paths[:3]) + post(paths[3], b"xyz") + listed)
    await until(lambda: served.service.seen, "the first request reached the service")
    served.service.release.set()
    bodies = [(await read_answer(reader))[1] for _ in range(5)]
    writer.write(get(paths[5]))
    bodies.append((await read_answer(reader))[1])
    writer.close()
    expected = [f"GET {p} ".encode() for p in paths]
    expected[3] = f"POST {paths[3]} xyz".encode()
    expected[4] = f"LIST {paths[4]} ".encode()
    assert bodies == expected
    assert served.fast == paths


async def test_a_request_for_aiohttp_waits_for_the_fast_ones_before_it(start: Start) -> None:
    served = await start()
    first, last = "/v1/kv/data/first", "/v1/kv/data/last"
    served.service.held = {first}
    reader, writer = await connect(served)
    writer.write(get(first) + get("/healthz") + get(last))
    conn = newest_connection(served)
    await until(lambda: served.service.seen == [first], "the first request in flight")
    await until(lambda: conn._request_count == 3, "all three requests parsed")
    served.service.release.set()
    answers = [await read_answer(reader) for _ in range(3)]
    writer.close()
    assert answers[0][1] == f"GET {first} ".encode()
    assert answers[1][1] == b'{"status": "ok"}'
    assert answers[2][1] == f"GET {last} ".encode()
    # From the first request for aiohttp on, the connection stays on aiohttp's path.
    assert served.fast == [first]


async def test_only_ordinary_requests_take_the_fast_lane(start: Start) -> None:
    served = await start()
    cases = [
        get("/v1/kv/data/h", "Expect: 100-continue\r\n"),
        get("/healthz"),
        b"HEAD /v1/kv/data/h HTTP/1.1\r\nHost: t\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n",
    ]
    for data in cases:
        served_before = len(served.fast)
        reader, writer = await connect(served)
        writer.write(data)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 "), head
        assert len(served.fast) == served_before, data
        writer.close()
    # A body in two reads: complete only in the second, so aiohttp reads it.
    reader, writer = await connect(served)
    whole = post("/v1/kv/data/split", b"0123456789")
    writer.write(whole[:-4])
    await writer.drain()
    await until(lambda: newest_connection(served)._request_count == 1, "the head parsed")
    writer.write(whole[-4:])
    _, body = await read_answer(reader)
    assert body == b"POST /v1/kv/data/split 0123456789"
    assert served.fast == []
    writer.close()


@pytest.mark.parametrize("cancel", [False, True], ids=["answered", "cancelled"])
async def test_a_gone_clients_answer_is_dropped_without_an_error(
    start: Start, caplog: pytest.LogCaptureFixture, cancel: bool
) -> None:
    """Without handler cancellation the service's answer comes and is dropped; with it (the
    scheduler's listener) the request is cancelled, counted as the client's leaving."""
    served = await start(handler_cancellation=cancel)
    path = f"/v1/kv/data/gone-{cancel}"
    served.service.held = {path}
    stats = metrics.stats_for("secrets")
    failed = stats.answered.get(("GET", 500), 0)
    left = stats.answered.get(("GET", gateway_app.CLIENT_GONE), 0)
    _, writer = await connect(served)
    writer.write(get(path))
    await until(lambda: served.service.seen == [path], "the request in flight")
    conn = newest_connection(served)
    writer.close()
    await until(lambda: conn.transport is None, "the connection lost")
    served.service.release.set()
    await until(lambda: conn._serving is None, "the fast request done")
    assert served.service.answered == (0 if cancel else 1)
    assert stats.answered.get(("GET", 500), 0) == failed
    assert stats.answered.get(("GET", gateway_app.CLIENT_GONE), 0) == left + cancel
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_graceful_shutdown_waits_for_a_fast_request_in_flight(start: Start) -> None:
    served = await start()
    path = "/v1/kv/data/shutdown"
    served.service.held = {path}
    reader, writer = await connect(served)
    writer.write(get(path))
    await until(lambda: served.service.seen == [path], "the request in flight")
    cleanup = asyncio.create_task(served.runner.cleanup())
    await until(lambda: newest_connection(served)._force_close, "the shutdown under way")
    assert not cleanup.done()
    served.service.release.set()
    head, body = await read_answer(reader)
    assert head.startswith(b"HTTP/1.1 200 ") and body == f"GET {path} ".encode()
    await asyncio.wait_for(cleanup, 10)
    assert await reader.read() == b""  # then the connection closes
    writer.close()


async def test_the_keepalive_timer_never_cuts_a_fast_request_in_flight(start: Start) -> None:
    served = await start(keepalive_timeout=0.1)
    path = "/v1/kv/data/slowly"
    served.service.held = {path}
    reader, writer = await connect(served)
    writer.write(get("/v1/kv/data/quick"))
    await read_answer(reader)
    conn = newest_connection(served)
    writer.write(get(path))
    await until(lambda: served.service.seen[-1:] == [path], "the request in flight")
    await until(lambda: conn._keepalive_handle is None, "the keep-alive timer fired")
    served.service.release.set()
    head, body = await read_answer(reader)
    assert head.startswith(b"HTTP/1.1 200 ") and body == f"GET {path} ".encode()
    # Re-armed after the answer: an idle connection still closes.
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()


def _comparable(data: bytes) -> bytes:
    """A response without what differs between any two answers: Date and X-Request-Id."""
    head, _, body = data.partition(b"\r\n\r\n")
    kept = [
        line
        for line in head.split(b"\r\n")
        if not line.lower().startswith((b"date:", b"x-request-id:"))
    ]
    return b"\r\n".join(kept) + b"\r\n\r\n" + body


@pytest.mark.parametrize(
    "request_bytes",
    [
        get("/v1/kv/data/same"),
        get("/v1/kv/data/same", version="1.0"),
        get("/v1/kv/data/same", "Connection: close\r\n"),
        get("/v1/kv/data/empty"),  # a 204, which aiohttp writes
        post("/v1/kv/data/same", b"a body"),
        post("/v1/kv/data/big", b"x" * (LIMIT + 1)),  # refused 413
    ],
    ids=["get", "http-1.0", "close", "204", "post", "413"],
)
async def test_both_lanes_write_the_same_bytes(start: Start, request_bytes: bytes) -> None:
    answers = []
    for lane in (True, False):
        served = await start(lane=lane)
        reader, writer = await connect(served)
        writer.write(request_bytes)
        await writer.drain()
        head, body = await read_answer(reader)
        answers.append(_comparable(head + body))
        assert len(served.fast) == (1 if lane else 0)
        assert b"\r\nx-request-id: " in head.lower()
        writer.close()
    assert answers[0] == answers[1]


async def test_without_the_private_attributes_every_request_goes_aiohttps_way(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert supported()
    assert not supported(type("OtherRequestHandler", (), {"_messages": None}))
    monkeypatch.setattr(any_method, "_FAST", False)
    served = await start()
    reader, writer = await connect(served)
    writer.write(get("/v1/kv/data/fallback"))
    _, body = await read_answer(reader)
    writer.close()
    assert body == b"GET /v1/kv/data/fallback "
    assert served.fast == []


async def test_a_listener_keeping_an_access_log_goes_aiohttps_way(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    access = logging.getLogger("test-fast-lane-access-" + uuid.uuid4().hex[:8])
    caplog.set_level(logging.INFO, logger=access.name)
    served = await start(access_log=access)
    reader, writer = await connect(served)
    writer.write(get("/v1/kv/data/logged"))
    _, body = await read_answer(reader)
    writer.close()
    assert body == b"GET /v1/kv/data/logged "
    assert served.fast == []
    await until(lambda: [r for r in caplog.records if r.name == access.name], "the access line")
