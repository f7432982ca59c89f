"""Coalescing of crypto calls: alone while few are in flight, batched behind them under load, each
caller getting its own reply or its batch's failure, a cancelled caller dropped, and room for more
messages in flight as more workers answer."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from services.crypto.batching import Batcher, limit
from services.crypto.messages import CryptoReply, CryptoRequest
from shared.errors import ServiceError


class FakeWorker:
    """Answers each request with its own `n` once released, as one of `workers` worker ids in
    turn; fails messages carrying op `bad`."""

    def __init__(self, workers: int = 1) -> None:
        self.sent: list[list[int]] = []
        self.release = asyncio.Event()
        self.sending = asyncio.Event()  # set on every message
        self.ids = itertools.cycle([f"w{i}" for i in range(workers)])

    async def send(
        self, requests: list[CryptoRequest], timeout: float
    ) -> tuple[str, list[CryptoReply]]:
        ns = [r.args["n"] for r in requests]
        self.sent.append(ns)
        self.sending.set()
        await self.release.wait()
        if any(r.op == "bad" for r in requests):
            raise ServiceError(503, "worker gone")
        return next(self.ids), [CryptoReply(result=n * 10) for n in ns]


async def wait_for_sent(worker: FakeWorker, count: int) -> None:
    async with asyncio.timeout(10):
        while len(worker.sent) < count:
            worker.sending.clear()
            await worker.sending.wait()


def calls(batcher: Batcher, ns: range, op: str = "x") -> list[asyncio.Task[CryptoReply]]:
    return [asyncio.create_task(batcher.call(CryptoRequest(op=op, args={"n": n}), 5.0)) for n in ns]


async def test_queued_calls_travel_together_and_get_their_own_replies() -> None:
    worker = FakeWorker()
    batcher = Batcher(worker.send, max_batch=3)
    tasks = calls(batcher, range(7))
    await wait_for_sent(worker, 1)
    await asyncio.sleep(0)
    assert worker.sent == [[0]] and len(batcher.queue) == 6  # one alone, six queued
    worker.release.set()
    replies = await asyncio.gather(*tasks)
    assert [r.result for r in replies] == [n * 10 for n in range(7)]
    assert worker.sent[1:] == [[1, 2, 3], [4, 5, 6]]  # batches of at most max_batch, in order
    assert batcher.inflight == 0 and not batcher.queue


async def test_more_workers_more_messages_in_flight() -> None:
    worker = FakeWorker(workers=3)
    batcher = Batcher(worker.send)
    worker.release.set()
    await asyncio.gather(*calls(batcher, range(6)))  # answered by w0, w1 and w2
    assert len(batcher.workers) == 3
    worker.release.clear()
    before = len(worker.sent)
    tasks = calls(batcher, range(10, 20))
    assert limit(3) > limit(1) == 1
    await wait_for_sent(worker, before + limit(3))
    await asyncio.sleep(0)
    assert len(worker.sent) == before + limit(3)
    assert len(batcher.queue) == 10 - limit(3)
    worker.release.set()
    assert [r.result for r in await asyncio.gather(*tasks)] == [n * 10 for n in range(10, 20)]


async def test_a_failed_batch_fails_its_callers_only() -> None:
    worker = FakeWorker()
    batcher = Batcher(worker.send)
    first = calls(batcher, range(1, 2))
    await wait_for_sent(worker, 1)
    bad = calls(batcher, range(3, 4)) + calls(batcher, range(4, 5), op="bad")
    await asyncio.sleep(0)
    worker.release.set()
    assert [(await t).result for t in first] == [10]
    for task in bad:
        with pytest.raises(ServiceError) as err:
            await task
        assert err.value.code == 503
    later = await batcher.call(CryptoRequest(op="x", args={"n": 5}), 5.0)
    assert later.result == 50 and worker.sent == [[1], [3, 4], [5]]


async def test_a_cancelled_caller_is_left_out() -> None:
    worker = FakeWorker()
    batcher = Batcher(worker.send)
    first = calls(batcher, range(1, 2))
    await wait_for_sent(worker, 1)
    gone, kept = calls(batcher, range(3, 5))
    await asyncio.sleep(0)
    gone.cancel()
    worker.release.set()
    assert [(await t).result for t in first] == [10] and (await kept).result == 40
    assert gone.cancelled() and worker.sent == [[1], [4]]
