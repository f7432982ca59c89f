"""Request framing through the real gateway over raw sockets: the listeners parse with llhttp
and hand a connection to the pure-Python parser at the first request llhttp refuses
(services/gateway/http_parser.py). Every request the gateway forwards must be exactly one the
client framed: pipelined LIST and GET, LIST with Content-Length and chunked bodies, bodies that
look like requests, conflicting Content-Length and Transfer-Encoding, lowercase and garbage
methods, and every stream cut into two reads at every byte."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from services.gateway.main import Gateway
from shared.bus import Bus, CallContext
from shared.messages import HttpRequest, HttpResponse
from shared.settings import Settings
from shared.subjects import ECHO

pytestmark = pytest.mark.nats


@dataclass
class Echoed:
    status: int
    method: str = ""
    body: bytes = b""


@dataclass
class Listener:
    host: str
    port: int
    forwarded: list[tuple[str, bytes]]


@pytest.fixture
async def gateway(nats_url: str) -> AsyncIterator[Listener]:
    settings = Settings(
        nats_url=nats_url,
        cluster_name="framing" + uuid.uuid4().hex[:8],
        secrets_addr="127.0.0.1:0",
        workspace_addr="127.0.0.1:0",
        scheduler_addr="127.0.0.1:0",
    )
    forwarded: list[tuple[str, bytes]] = []

    async def echo(req: HttpRequest, ctx: CallContext) -> HttpResponse:
        forwarded.append((req.method, req.body))
        body = {"method": req.method, "body": req.body.decode("latin-1")}
        return HttpResponse(status=200, body=json.dumps(body).encode())

    service = await Bus.connect(nats_url, "framing-echo")
    await service.serve(ECHO.on(settings.cluster_name), echo, HttpRequest, queue=ECHO.queue)
    bus = await Bus.connect(nats_url, "framing-gateway")
    gw = Gateway(bus, settings)
    await gw.start()
    host, port = gw.addresses["secrets"].removeprefix("http://").rsplit(":", 1)
    try:
        yield Listener(host, int(port), forwarded)
    finally:
        await gw.stop()
        await bus.close()
        await service.close()


def req(method: str, body: bytes = b"", extra: str = "") -> bytes:
    head = f"{method} /_echo HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def chunked(method: str, chunks: list[bytes]) -> bytes:
    head = f"{method} /_echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


async def exchange(gw: Listener, reads: list[bytes], answers: int) -> list[Echoed]:
    """Send `reads` one write each, then read up to `answers` responses (fewer if the gateway
    closes the connection)."""
    reader, writer = await asyncio.open_connection(gw.host, gw.port)
    try:
        for data in reads:
            writer.write(data)
            await writer.drain()
        got: list[Echoed] = []
        for _ in range(answers):
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            except asyncio.IncompleteReadError:
                break
            status = int(head.split(b" ", 2)[1])
            length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
            body = await reader.readexactly(length)
            if status == 200:
                seen = json.loads(body)
                got.append(Echoed(200, seen["method"], seen["body"].encode("latin-1")))
            else:
                got.append(Echoed(status))
        return got
    finally:
        writer.close()


SMUGGLED = req("DELETE", b"smuggled")
PIPELINE = (
    req("GET")
    + req("LIST", b'{"keys":1}')
    + req("LIST", SMUGGLED)
    + chunked("LIST", [b"ab", b"\r\n\r\n", SMUGGLED])
    + req("POST", b"xLI")
    + req("LIST")
)
EXPECTED = [
    Echoed(200, "GET"),
    Echoed(200, "LIST", b'{"keys":1}'),
    Echoed(200, "LIST", SMUGGLED),
    Echoed(200, "LIST", b"ab\r\n\r\n" + SMUGGLED),
    Echoed(200, "POST", b"xLI"),
    Echoed(200, "LIST"),
]


async def test_pipelined_list_and_get_in_one_read(gateway: Listener) -> None:
    assert await exchange(gateway, [PIPELINE], len(EXPECTED)) == EXPECTED
    assert [m for m, _ in gateway.forwarded] == [e.method for e in EXPECTED]


async def test_pipeline_cut_at_every_byte(gateway: Listener) -> None:
    for cut in range(1, len(PIPELINE)):
        got = await exchange(gateway, [PIPELINE[:cut], PIPELINE[cut:]], len(EXPECTED))
        assert got == EXPECTED, cut
    assert "DELETE" not in {m for m, _ in gateway.forwarded}


async def test_list_after_a_request_on_a_kept_alive_connection(gateway: Listener) -> None:
    # What hvac does: one request, its answer, then LIST on the same connection.
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
    try:
        for method in ("GET", "LIST", "GET", "LIST"):
            writer.write(req(method))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
            assert json.loads(await reader.readexactly(length))["method"] == method
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("name", "stream", "expected"),
    [
        (
            "list-cl-and-te",
            b"LIST /_echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: "
            b"chunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
            [Echoed(400)],
        ),
        (
            "get-then-list-two-lengths",
            req("GET")
            + b"LIST /_echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 40\r\n"
            b"\r\nabc" + SMUGGLED,
            [Echoed(200, "GET"), Echoed(400)],
        ),
        (
            # The Python parser reads a method case-blind, as it always has here.
            "lowercase-list",
            req("GET") + req("list") + req("GET"),
            [Echoed(200, "GET"), Echoed(200, "LIST"), Echoed(200, "GET")],
        ),
        (
            "garbage-after-list",
            req("GET") + b"LIST\x01/_echo HTTP/1.1\r\nHost: t\r\n\r\n" + req("GET"),
            [Echoed(200, "GET"), Echoed(400)],
        ),
        (
            "chunk-size-is-a-request",
            b"POST /_echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            + SMUGGLED
            + req("LIST"),
            [Echoed(400)],
        ),
    ],
)
async def test_hostile_framing_is_refused_without_forwarding_a_smuggled_request(
    gateway: Listener, name: str, stream: bytes, expected: list[Echoed]
) -> None:
    assert await exchange(gateway, [stream], len(expected)) == expected, name
    assert "DELETE" not in {m for m, _ in gateway.forwarded}, name
