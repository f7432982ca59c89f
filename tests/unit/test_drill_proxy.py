"""The fault proxy against a local echo server: it forwards, adds latency, black-holes and
resets connections, each switched at runtime."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from services.drill.proxy import FaultProxy


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(1024):
            w.write(data)
            await w.drain()
        w.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    p = FaultProxy("127.0.0.1", server.sockets[0].getsockname()[1])
    await p.start()
    yield p
    await p.stop()
    server.close()


async def roundtrip(p: FaultProxy, payload: bytes = b"ping") -> tuple[bytes, float]:
    r, w = await asyncio.open_connection("127.0.0.1", p.port)
    t0 = time.monotonic()
    w.write(payload)
    await w.drain()
    got = await asyncio.wait_for(r.readexactly(len(payload)), 5)
    w.close()
    return got, time.monotonic() - t0


async def test_forwards_and_adds_latency(proxy: FaultProxy) -> None:
    got, fast = await roundtrip(proxy)
    assert got == b"ping" and fast < 0.1
    proxy.faults.latency = 0.1
    got, slow = await roundtrip(proxy)
    assert got == b"ping" and slow >= 0.2  # both directions
    proxy.clear()
    assert (await roundtrip(proxy))[1] < 0.1


async def test_blackhole_stalls_without_closing(proxy: FaultProxy) -> None:
    proxy.faults.blackhole = True
    r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
    w.write(b"lost")
    await w.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(r.read(4), 0.3)
    proxy.clear()
    w.write(b"back")
    await w.drain()
    assert await asyncio.wait_for(r.readexactly(4), 5) == b"back"
    w.close()


async def test_reset_all_and_refuse(proxy: FaultProxy) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
    w.write(b"x")
    await w.drain()
    assert await asyncio.wait_for(r.readexactly(1), 5) == b"x"
    assert proxy.reset_all() >= 1
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(r.readexactly(1), 5)
    proxy.faults.refuse = True
    r2, _ = await asyncio.open_connection("127.0.0.1", proxy.port)
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(r2.readexactly(1), 5)
