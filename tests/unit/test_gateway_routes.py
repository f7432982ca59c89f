"""The listener's own routing (services/gateway/app.py, one handler on aiohttp's low-level
server): the gateway's fixed paths answer only the methods they route and leave the rest to the
API, the console's redirect is an answer (not a 500), `Expect` and the body limit are answered
before the API is asked. The service behind the listener is a stand-in recording what reached
it; no NATS."""

from __future__ import annotations

import asyncio
import types
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

import services.gateway.app as gateway_app
from services.gateway.any_method import runner_for
from services.gateway.apis import SECRETS
from shared.messages import HttpRequest, HttpResponse
from shared.settings import Settings


class _Service:
    """Answers every forwarded request with its method and path."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.bodies: list[bytes] = []

    async def call(
        self, env: HttpRequest, *, timeout: float, request_id: str = "", caller: str = ""
    ) -> HttpResponse:
        self.seen.append((env.method, env.path))
        self.bodies.append(env.body)
        body = f"{env.method} {env.path}".encode()
        return HttpResponse(status=200, body=body, headers={"Content-Type": "text/plain"})


@dataclass
class Listener:
    url: str
    service: _Service


@pytest.fixture
async def listener(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Listener]:
    service = _Service()
    monkeypatch.setattr(gateway_app, "service_channel", lambda *a, **k: service)
    bus = types.SimpleNamespace(max_payload=64 << 20, nc=types.SimpleNamespace(is_connected=True))
    settings = Settings(cluster_name="routes" + uuid.uuid4().hex[:8], max_request_bytes=1024)
    app = gateway_app.create_app(SECRETS, bus, settings, {"ready": True})  # type: ignore[arg-type]
    runner = runner_for(app, SECRETS, access_log=None, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Listener(f"http://127.0.0.1:{port}", service)
    finally:
        await runner.cleanup()


async def test_fixed_paths_route_get_and_head_and_leave_other_methods_to_the_api(
    listener: Listener,
) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(listener.url + "/healthz") as r:
            assert r.status == 200 and await r.json() == {"status": "ok"}
            assert len(r.headers["X-Request-Id"]) == 32
        async with http.head(listener.url + "/healthz") as r:
            assert r.status == 200
        for method, path in (("POST", "/healthz"), ("DELETE", "/metrics"), ("PUT", "/ui")):
            async with http.request(method, listener.url + path) as r:
                assert r.status == 200, (method, path)
                assert await r.text() == f"{method} {path}"
        async with http.get(listener.url + "/v1/kv/data/a%2Fb") as r:
            assert await r.text() == "GET /v1/kv/data/a%2Fb"
    assert listener.service.seen == [
        ("POST", "/healthz"),
        ("DELETE", "/metrics"),
        ("PUT", "/ui"),
        ("GET", "/v1/kv/data/a%2Fb"),
    ]


async def test_the_console_redirect_is_an_answer_with_a_request_id(listener: Listener) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(listener.url + "/ui", allow_redirects=False) as r:
            assert r.status == 302 and r.headers["Location"] == "/ui/"
            assert len(r.headers["X-Request-Id"]) == 32
        async with http.get(
            listener.url + "/ui", allow_redirects=False, headers={"X-Request-Id": "mine-1"}
        ) as r:
            assert r.status == 302 and r.headers["X-Request-Id"] == "mine-1"
    assert listener.service.seen == []


async def test_expect_and_the_body_limit_are_answered_before_the_api(listener: Listener) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(
            listener.url + "/v1/kv/data/x", data=b"{}", headers={"Expect": "100-continue"}
        ) as r:
            assert r.status == 200 and await r.text() == "POST /v1/kv/data/x"
        async with http.post(
            listener.url + "/v1/kv/data/x", data=b"{}", headers={"Expect": "something-else"}
        ) as r:
            assert r.status == 417
        async with http.post(listener.url + "/v1/kv/data/x", data=b"x" * 2048) as r:
            assert r.status == 413
            assert "exceeds the limit of 1024 bytes" in (await r.json())["errors"][0]
            assert "X-Request-Id" in r.headers
    assert listener.service.seen == [("POST", "/v1/kv/data/x")]


async def _raw_answer(url: str, request: bytes) -> bytes:
    """The listener's whole answer to `request`, sent in one write (so its body arrives with
    its head) on a connection the request closes."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


def _chunked_post(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
    head += "Connection: close\r\n\r\n"
    return head.encode() + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


async def test_a_chunked_body_that_came_whole_is_passed_on_or_refused_by_size(
    listener: Listener,
) -> None:
    within = b'{"plaintext":"' + b"y" * 900 + b'"}'
    answer = await _raw_answer(listener.url, _chunked_post("/v1/transit/encrypt/k", within))
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert listener.service.bodies == [within]
    answer = await _raw_answer(listener.url, _chunked_post("/v1/kv/data/x", b"z" * 1025))
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"exceeds the limit of 1024 bytes" in answer and b"X-Request-Id: " in answer
    assert listener.service.seen == [("POST", "/v1/transit/encrypt/k")]
