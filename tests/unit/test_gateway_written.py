"""A reply written straight to the connection (services/gateway/written.py) is byte for byte what
aiohttp's own Response writes for it (but the Date), on aiohttp's low-level server over a real
socket: each request line is answered twice, once each way, and the raw bytes compared."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web
from aiohttp.web_request import BaseRequest

from services.gateway import written
from shared.messages import HttpResponse

Reply = HttpResponse
REPLIES: dict[str, Reply] = {
    "json": Reply(status=200, body=b'{"a":1}', headers={"Content-Type": "application/json"}),
    "dropped": Reply(
        status=200,
        body=b"x",
        headers={"Content-Type": "text/plain", "Server": "s", "Date": "d", "content-length": "9"},
    ),
    "untyped": Reply(status=404, body=b"missing"),
    "empty": Reply(status=307, headers={"Location": "/v1/elsewhere"}),
    "unknown-status": Reply(status=299, body=b"z", headers={"X-Note": "caf\u00e9\tok"}),
    "no-content": Reply(status=204),
    "injected": Reply(status=200, body=b"z", headers={"X-Note": "a\r\nSet-Cookie: x=1"}),
    # A service's own X-Request-Id never doubles or replaces the gateway's.
    "own-id": Reply(status=200, body=b"{}", headers={"x-request-id": "from-service"}),
}
# Each request line, and whether it keeps the connection open (a closing request follows it).
REQUESTS = {
    "http11": (b"GET /{name} HTTP/1.1\r\nHost: h\r\nX-Request-Id: rid-1\r\n\r\n", True),
    "http11-close": (
        b"GET /{name} HTTP/1.1\r\nHost: h\r\nX-Request-Id: rid-1\r\nConnection: close\r\n\r\n",
        False,
    ),
    "http10": (b"GET /{name} HTTP/1.0\r\nX-Request-Id: rid-1\r\n\r\n", False),
    "http10-keep": (
        b"GET /{name} HTTP/1.0\r\nX-Request-Id: rid-1\r\nConnection: keep-alive\r\n\r\n",
        True,
    ),
    "head": (b"HEAD /{name} HTTP/1.1\r\nHost: h\r\nX-Request-Id: rid-1\r\n\r\n", True),
}

_CLOSING = b"GET /json HTTP/1.1\r\nHost: h\r\nX-Request-Id: rid-2\r\nConnection: close\r\n\r\n"


def _handler(direct: bool) -> Callable[[BaseRequest], object]:
    async def handle(request: BaseRequest) -> web.StreamResponse:
        reply = REPLIES[request.path.strip("/")]
        rid = request.headers["X-Request-Id"]
        if direct:
            resp = await written.write_reply(request, reply.status, reply.headers, reply.body, rid)
        else:
            resp = written.ordinary(reply.status, reply.headers, reply.body)
        resp.headers["X-Request-Id"] = rid  # as the listener's handler does to every answer
        return resp

    return handle


@pytest.fixture
async def ports() -> AsyncIterator[dict[bool, int]]:
    runners, out = [], {}
    for direct in (False, True):
        runner = web.ServerRunner(web.Server(_handler(direct), access_log=None))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        out[direct] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        runners.append(runner)
    try:
        yield out
    finally:
        for runner in runners:
            await runner.cleanup()


async def _raw(port: int, request: bytes) -> bytes:
    """Everything the server writes for `request` (and for a closing request after it on a
    kept-alive connection), read to the end of the connection, which the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    got = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return re.sub(rb"Date: [^\r]*", b"Date: -", got)


@pytest.mark.parametrize("kind", sorted(REQUESTS))
@pytest.mark.parametrize("name", sorted(REPLIES))
async def test_same_bytes_as_aiohttp(ports: dict[bool, int], kind: str, name: str) -> None:
    line, keeps_alive = REQUESTS[kind]
    request = line.replace(b"{name}", name.encode()) + (_CLOSING if keeps_alive else b"")
    ordinary = await _raw(ports[False], request)
    direct = await _raw(ports[True], request)
    assert direct == ordinary
    if name == "injected":
        assert b"Set-Cookie" not in direct  # refused as aiohttp refuses it
    else:
        assert direct.startswith(b"HTTP/1.") and b"X-Request-Id: rid-1\r\n" in direct
        assert direct.lower().count(b"x-request-id:") == (2 if keeps_alive else 1)
