"""A round trip that proves nats-server has read every command a plain nats-py client sent
before it, its SUBs included, so that messages published next by any connection reach them."""

from __future__ import annotations

from nats.aio.client import Client


async def subscribed(nc: Client) -> None:
    # nats-py writes a flush's PING straight to the socket, ahead of a SUB still queued for its
    # flusher task: the first PONG can come back before the server read the SUB. The flusher
    # has written it by then, so the second PING follows it on the wire.
    await nc.flush()
    await nc.flush()
