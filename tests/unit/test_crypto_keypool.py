"""The crypto worker's RSA key pool: filled only for sizes asked for, topped up in the background,
and never handing the same key out twice (also under concurrent takers)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from services.crypto import ops_keys
from services.crypto.keypool import KeyPool

BITS = 1024  # small keys keep the test fast; the pool treats every size alike


def modulus(key: rsa.RSAPrivateKey) -> int:
    return key.private_numbers().public_numbers.n


async def wait_until(pred: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"{what} not met within {timeout:.0f}s"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(pool: KeyPool) -> AsyncIterator[KeyPool]:
    task = asyncio.create_task(pool.run())
    try:
        yield pool
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_fills_only_sizes_asked_for_and_refills() -> None:
    pool = KeyPool({BITS: 3, 2048: 2})
    async with running(pool):
        await asyncio.sleep(0.2)
        assert pool.ready(BITS) == 0 and pool.ready(2048) == 0  # nobody asked yet
        assert pool.take(BITS) is None  # first ask: none ready, filling starts
        await wait_until(lambda: pool.ready(BITS) == 3, "pool filled to its target")
        taken = [pool.take(BITS) for _ in range(3)]
        assert all(isinstance(k, rsa.RSAPrivateKey) and k.key_size == BITS for k in taken)
        await wait_until(lambda: pool.ready(BITS) == 3, "pool refilled after being drained")
        assert pool.ready(2048) == 0
    assert pool.take(4096) is None  # a size without a pool


def taker(pool: KeyPool, got: list[rsa.RSAPrivateKey], lock: threading.Lock) -> None:
    while (key := pool.take(BITS)) is not None:
        with lock:
            got.append(key)


async def test_a_key_is_handed_out_once() -> None:
    pool = KeyPool({BITS: 6})
    seen: list[int] = []
    async with running(pool):
        pool.take(BITS)
        for _ in range(3):  # drain and refill a few times: no key may come back
            await wait_until(lambda: pool.ready(BITS) == 6, "pool filled")
            got: list[rsa.RSAPrivateKey] = []
            lock = threading.Lock()
            threads = [threading.Thread(target=taker, args=(pool, got, lock)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(got) >= 6
            seen += [modulus(k) for k in got]
    assert len(seen) == len(set(seen))


async def test_generate_private_key_uses_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = KeyPool({2048: 2})
    monkeypatch.setattr(ops_keys, "POOL", pool)
    async with running(pool):
        first = ops_keys.generate_private_key("rsa", 2048)  # none ready: generated on the spot
        await wait_until(lambda: pool.ready(2048) == 2, "pool filled")
        ready = {modulus(k) for k in list(pool._keys[2048])}
        second = ops_keys.generate_private_key("rsa", 0)  # 0 means 2048
        assert modulus(second) in ready and modulus(second) != modulus(first)
        assert pool.ready(2048) <= 2 and modulus(second) not in {
            modulus(k) for k in list(pool._keys[2048])
        }
