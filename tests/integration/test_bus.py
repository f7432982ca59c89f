"""The bus against a real nats-server: typed replies, typed errors, no responders, timeouts,
bounded concurrency, request ids in headers, and drain on close."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from shared.bus import Bus, CallContext
from shared.errors import BusTimeout, NoResponders, ServiceError

pytestmark = pytest.mark.nats


class Ping(msgspec.Struct):
    n: int


class Pong(msgspec.Struct):
    n: int
    request_id: str = ""


async def test_request_reply_errors_and_limits(nats_url: str, unique: str) -> None:
    server = await Bus.connect(nats_url, "srv")
    client = await Bus.connect(nats_url, "cli")
    running = 0
    peak = 0

    async def handler(msg: Ping, ctx: CallContext) -> Pong:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            if msg.n == -1:
                raise ServiceError(418, "a teapot")
            if msg.n == -2:
                raise RuntimeError("secret internals")
            if msg.n == -3:
                await asyncio.sleep(5)
            await asyncio.sleep(0.02)
            return Pong(n=msg.n * 2, request_id=ctx.request_id)
        finally:
            running -= 1

    try:
        await server.serve(f"{unique}.ping", handler, Ping, queue="q", concurrency=3)
        reply = await client.request(
            f"{unique}.ping", Ping(n=21), Pong, timeout=2, request_id="rid-1"
        )
        assert reply == Pong(n=42, request_id="rid-1")
        with pytest.raises(ServiceError) as err:
            await client.request(f"{unique}.ping", Ping(n=-1), Pong, timeout=2)
        assert (err.value.code, err.value.message) == (418, "a teapot")
        with pytest.raises(ServiceError) as err:
            await client.request(f"{unique}.ping", Ping(n=-2), Pong, timeout=2)
        assert err.value.code == 500 and "secret" not in err.value.message
        raw = await client.nc.request(f"{unique}.ping", b"\xc1garbage", timeout=2)
        assert raw.headers and raw.headers.get("Trellis-Error") == "1"
        with pytest.raises(NoResponders):
            await client.request(f"{unique}.nobody", Ping(n=1), Pong, timeout=1)
        with pytest.raises(BusTimeout):
            await client.request(f"{unique}.ping", Ping(n=-3), Pong, timeout=0.2)
        results = await asyncio.gather(
            *(client.request(f"{unique}.ping", Ping(n=i), Pong, timeout=5) for i in range(12))
        )
        assert [r.n for r in results] == [i * 2 for i in range(12)]
        assert peak <= 3
    finally:
        await client.close()
        await server.close()


async def test_close_lets_in_flight_work_finish(nats_url: str, unique: str) -> None:
    server = await Bus.connect(nats_url, "srv")
    client = await Bus.connect(nats_url, "cli")
    started = asyncio.Event()

    async def slow(msg: Ping, ctx: CallContext) -> Pong:
        started.set()
        await asyncio.sleep(0.3)
        return Pong(n=msg.n)

    await server.serve(f"{unique}.slow", slow, Ping)
    pending = asyncio.create_task(client.request(f"{unique}.slow", Ping(n=7), Pong, timeout=5))
    await started.wait()
    await server.close()
    assert (await pending).n == 7
    await client.close()
