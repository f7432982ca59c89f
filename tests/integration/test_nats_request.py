"""shared/nats_request.py against a real nats-server: replies reach their own caller under
concurrency, headers travel only when given, and every way out (reply, timeout, no responders,
cancellation) leaves nothing behind in the client's response map."""

from __future__ import annotations

import asyncio

import nats
import nats.errors
import pytest
from nats.aio.msg import Msg

from shared import nats_request
from tests.nats_sync import subscribed

pytestmark = pytest.mark.nats


async def test_replies_errors_and_cleanup(nats_url: str, unique: str) -> None:
    server = await nats.connect(nats_url)
    client = await nats.connect(nats_url)
    seen_headers: list[dict[str, str] | None] = []
    slow_arrived = asyncio.Event()

    async def echo(msg: Msg) -> None:
        seen_headers.append(msg.headers)
        if msg.data == b"slow":
            slow_arrived.set()
            return  # never answered: the caller times out or gives up
        await server.publish(msg.reply, msg.data[::-1])

    try:
        await server.subscribe(f"{unique}.echo", cb=echo)
        await subscribed(server)

        payloads = [f"m{i}".encode() for i in range(20)]
        replies = await asyncio.gather(
            *(nats_request.request(client, f"{unique}.echo", p, timeout=5) for p in payloads)
        )
        assert [r.data for r in replies] == [p[::-1] for p in payloads]
        assert seen_headers[:20] == [None] * 20

        reply = await nats_request.request(
            client, f"{unique}.echo", b"abc", timeout=5, headers={"X-Test": unique}
        )
        assert reply.data == b"cba"
        assert seen_headers[-1] == {"X-Test": unique}

        with pytest.raises(nats.errors.NoRespondersError):
            await nats_request.request(client, f"{unique}.nobody", b"x", timeout=5)
        with pytest.raises(nats.errors.TimeoutError):
            await nats_request.request(client, f"{unique}.echo", b"slow", timeout=0.2)

        slow_arrived.clear()
        pending = asyncio.ensure_future(
            nats_request.request(client, f"{unique}.echo", b"slow", timeout=30)
        )
        await asyncio.wait_for(slow_arrived.wait(), timeout=10)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert client._resp_map == {}
    finally:
        await client.close()
        await server.close()


async def test_a_subscriber_not_yet_visible_gets_a_second_chance(
    nats_url: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server sometimes answers "no responders" to a request sent right after another
    connection subscribed and flushed; one retry reaches the subscriber, and a subject nobody
    serves still fails (after the retry, within the caller's timeout)."""
    server = await nats.connect(nats_url)
    client = await nats.connect(nats_url)
    real = nats_request._request_once
    calls: list[str] = []

    async def first_unseen(nc, subject, payload, *, timeout, headers):  # type: ignore[no-untyped-def]
        calls.append(subject)
        if len(calls) == 1:
            raise nats.errors.NoRespondersError
        return await real(nc, subject, payload, timeout=timeout, headers=headers)

    async def echo(msg: Msg) -> None:
        await server.publish(msg.reply, msg.data)

    try:
        await server.subscribe(f"{unique}.late", cb=echo)
        await subscribed(server)
        monkeypatch.setattr(nats_request, "_request_once", first_unseen)
        reply = await nats_request.request(client, f"{unique}.late", b"hi", timeout=2)
        assert reply.data == b"hi" and len(calls) == 2
        monkeypatch.setattr(nats_request, "_request_once", real)
        with pytest.raises(nats.errors.NoRespondersError):
            await nats_request.request(client, f"{unique}.nobody", b"x", timeout=2)
        with pytest.raises(nats.errors.NoRespondersError):  # no time left for a retry
            await nats_request.request(client, f"{unique}.nobody", b"x", timeout=0.01)
    finally:
        await client.close()
        await server.close()
