"""Header bytes that are not UTF-8, sent over a raw socket through the real gateway to the
secrets service. aiohttp keeps such bytes as lone surrogates, which the bus's encoder refused:
every such request ended in a 500. Now each byte travels as U+FFFD: a mangled token matches
no token (403, as OpenBao, which compares bytes), any other header is carried, and a request
id that is not ASCII is replaced by one the gateway makes."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from tests.harness import start_cluster

pytestmark = pytest.mark.nats


async def _raw(url: str, head: bytes, body: bytes = b"") -> tuple[int, bytes, dict]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        low = raw.lower()
        parts = low.split(b"content-length: ", 1)
        length = int(parts[1].split(b"\r\n", 1)[0]) if len(parts) == 2 else 0  # 204: none
        answer = await reader.readexactly(length)
        return int(raw.split(b" ", 2)[1]), low, json.loads(answer) if answer else {}
    finally:
        writer.close()


async def test_header_bytes_that_are_not_utf8_get_an_answer_not_a_500(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        path = f"cubbyhole/hb-{uuid.uuid4().hex[:8]}"
        status, got, body = await _raw(
            c.secrets_url,
            b"GET /v1/auth/token/lookup-self HTTP/1.1\r\nHost: t\r\n"
            b"X-Vault-Token: s.\xb2\xff\r\nX-Request-Id: \xff\xfe\r\n",
        )
        assert status == 403, (got, body)
        rid = got.split(b"x-request-id: ", 1)[1].split(b"\r\n", 1)[0]
        assert rid and rid.isascii() and b"\xff" not in rid
        token = c.root_token.encode()
        status, got, body = await _raw(
            c.secrets_url,
            b"PUT /v1/%s HTTP/1.1\r\nHost: t\r\nX-Vault-Token: %s\r\nX-Foo: a\xb2b\r\n"
            % (path.encode(), token),
            b'{"k": "v"}',
        )
        assert status in (200, 204), (got, body)
        status, read = await c.request("GET", f"/v1/{path}")
        assert status == 200 and read["data"] == {"k": "v"}, read
    finally:
        await c.close()
