"""shared/nats_inline.py against a real nats-server: a subscription delivered inline gets every
message (subject, reply, data, headers) as a plain call and never through its callback, stops
at unsubscribe, and a failing function is reported without stopping the connection; the request
multiplexer answers requests and no-responders statuses the same way; `publish_nowait` sends
as `publish` does and refuses what it refuses."""

from __future__ import annotations

import asyncio
import time
from unittest import mock

import nats
import nats.errors
import pytest
from nats.aio.msg import Msg

from shared import nats_request
from shared.nats_inline import InlineClient
from tests.nats_sync import subscribed

pytestmark = pytest.mark.nats

Seen = tuple[str, str, bytes, dict[str, str] | None]


async def _until(check: object, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def _inline_client(url: str, errors: list[Exception]) -> InlineClient:
    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = InlineClient()
    await nc.connect(servers=[url], error_cb=on_error)
    return nc


async def test_inline_delivery_replaces_the_callback(nats_url: str, unique: str) -> None:
    errors: list[Exception] = []
    nc = await _inline_client(nats_url, errors)
    sender = await nats.connect(nats_url)
    seen: list[Seen] = []
    via_callback: list[Msg] = []

    async def callback(msg: Msg) -> None:
        via_callback.append(msg)

    def deliver(subject: str, reply: str, data: bytes, headers: dict[str, str] | None) -> None:
        if data == b"boom":
            raise ValueError("deliver failed")
        seen.append((subject, reply, data, headers))

    try:
        sub = await nc.subscribe(f"{unique}.>", cb=callback)
        nc.deliver_inline(sub, deliver)
        await nc.flush()
        await sender.publish(f"{unique}.a", b"one", reply=f"{unique}.r")
        await sender.publish(f"{unique}.b", b"boom")
        await sender.publish(f"{unique}.c", b"two", headers={"K": "v"})
        await sender.flush()
        await _until(lambda: len(seen) == 2)
        assert seen == [
            (f"{unique}.a", f"{unique}.r", b"one", None),
            (f"{unique}.c", "", b"two", {"K": "v"}),
        ]
        assert [str(e) for e in errors] == ["deliver failed"]
        assert not via_callback

        await sub.unsubscribe()
        await nc.flush()
        await sender.publish(f"{unique}.d", b"late")
        await sender.flush()
        await nc.flush()  # a round trip after the publish: it would have arrived by now
        assert len(seen) == 2 and not via_callback
    finally:
        await sender.close()
        await nc.close()


async def test_requests_are_answered_through_the_inline_multiplexer(
    nats_url: str, unique: str
) -> None:
    nc = await _inline_client(nats_url, [])
    server = await nats.connect(nats_url)

    async def echo(msg: Msg) -> None:
        await server.publish(msg.reply, msg.data[::-1], headers={"Seen": "yes"})

    try:
        await server.subscribe(f"{unique}.echo", cb=echo)
        await subscribed(server)
        payloads = [f"m{i}".encode() for i in range(10)]
        replies = await asyncio.gather(
            *(nats_request.request(nc, f"{unique}.echo", p, timeout=5) for p in payloads)
        )
        assert [r.data for r in replies] == [p[::-1] for p in payloads]
        assert all(r.headers == {"Seen": "yes"} for r in replies)
        # nats-py's own request shares the multiplexer.
        assert (await nc.request(f"{unique}.echo", b"ab", timeout=5)).data == b"ba"
        # The multiplexer's subscription is delivered inline.
        assert nc._resp_sub_prefix is not None
        mux = [s for s in nc._subs.values() if s.subject.encode() == nc._resp_sub_prefix + b"*"]
        assert len(mux) == 1 and mux[0]._id in nc._inline
        with pytest.raises(nats.errors.NoRespondersError):
            await nats_request.request(nc, f"{unique}.nobody", b"x", timeout=1)
        assert not nc._resp_map
    finally:
        await server.close()
        await nc.close()


async def test_a_flush_follows_the_commands_before_it(nats_url: str, unique: str) -> None:
    """nats-py writes a flush's PING straight to the socket, ahead of a SUB still queued for its
    flusher: the PONG then proves nothing about the SUB (a message sent meanwhile by another
    connection found no subscriber, 1 run in 20 on a loaded machine). Ours goes after it."""
    nc = await _inline_client(nats_url, [])
    transport = nc._transport
    assert transport is not None
    wire: list[bytes] = []
    write, writelines = transport.write, transport.writelines

    def recorded_write(data: bytes) -> None:
        wire.append(bytes(data))
        write(data)

    def recorded_writelines(lines: list[bytes]) -> None:
        wire.extend(bytes(line) for line in lines)
        writelines(lines)

    try:
        with (
            mock.patch.object(transport, "write", recorded_write),
            mock.patch.object(transport, "writelines", recorded_writelines),
        ):
            await nc.subscribe(f"{unique}.a")
            await nc.publish(f"{unique}.a", b"x")
            await nc.flush()
        sent = b"".join(wire)
        assert sent.index(b"SUB ") < sent.index(b"PUB ") < sent.index(b"PING")
    finally:
        await nc.close()


async def test_publish_nowait_sends_and_refuses_as_publish_does(nats_url: str, unique: str) -> None:
    nc = await _inline_client(nats_url, [])
    receiver = await nats.connect(nats_url)
    got: list[Msg] = []

    async def record(msg: Msg) -> None:
        got.append(msg)

    try:
        await receiver.subscribe(f"{unique}.to", cb=record)
        await subscribed(receiver)
        for i in range(3):
            nc.publish_nowait(f"{unique}.to", f"p{i}".encode(), reply=f"{unique}.back")
        await _until(lambda: len(got) == 3)
        assert [(m.data, m.reply) for m in got] == [
            (f"p{i}".encode(), f"{unique}.back") for i in range(3)
        ]
        with pytest.raises(nats.errors.BadSubjectError):
            nc.publish_nowait(f"{unique}.bad subject", b"x")
        with pytest.raises(nats.errors.MaxPayloadError):
            nc.publish_nowait(f"{unique}.to", b"x" * (nc.max_payload + 1))
        await nc.close()
        with pytest.raises(nats.errors.ConnectionClosedError):
            nc.publish_nowait(f"{unique}.to", b"x")
    finally:
        await receiver.close()
        await nc.close()
