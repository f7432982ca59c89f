"""Long polls without workers: the index notifier (shared/waiters.py), parked replies
(shared/deferred.py), the scheduler's blocking query built on them, and the gateway deadline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.gateway.deadline import GRACE, blocking_wait, request_deadline
from services.scheduler.api.query import QueryOptions, blocking
from shared import longpoll
from shared.deferred import Deferred, ParkedReplies
from shared.waiters import IndexWaiters


async def test_notify_wakes_only_the_waiters_it_reaches() -> None:
    w = IndexWaiters(index=5)
    assert w.wait(5).result() is True  # already there: done at once, never parked
    a, b, c = w.wait(7), w.wait(8), w.wait(20)
    assert len(w) == 3
    assert w.notify(6) == 0
    assert w.notify(8) == 2
    assert a.result() is True and b.result() is True and not c.done()
    assert len(w) == 1


async def test_a_deadline_answers_false_and_leaves_no_timer_or_entry() -> None:
    w = IndexWaiters()
    fut = w.wait(10, timeout=0.01)
    assert await asyncio.wait_for(fut, 2) is False
    await asyncio.sleep(0)  # let the done-callback run
    assert len(w) == 0
    w.notify(10)  # the expired entry leaves the heap quietly
    assert w._heap == []
    assert w._finished == 0


async def test_expired_far_future_waiters_do_not_pile_up() -> None:
    """A blocking query on an index the log never reaches must not leak its entry."""
    w = IndexWaiters()
    for _ in range(5):
        futs = [w.wait(10**9, timeout=0.001) for _ in range(500)]
        await asyncio.gather(*futs)
        await asyncio.sleep(0)
    assert len(w._heap) < 200  # rebuilt once the finished outnumber the live
    live = w.wait(10**9)
    assert len(w) == 1
    w.notify(10**9)
    assert live.result() is True


async def test_cancelled_waiters_are_dropped_and_counts_stay_exact() -> None:
    w = IndexWaiters()
    futs = [w.wait(100) for _ in range(300)]
    keep = w.wait(100)
    for f in futs:
        f.cancel()
    await asyncio.sleep(0)
    assert len(w) == 1
    assert w.notify(100) == 1
    assert keep.result() is True
    assert w._heap == [] and w._finished == 0


async def test_wake_all_answers_every_waiter_false() -> None:
    w = IndexWaiters()
    futs = [w.wait(50) for _ in range(3)]
    w.wake_all()
    assert [f.result() for f in futs] == [False, False, False]
    assert len(w) == 0


async def test_parked_reply_is_sent_when_ready_and_at_close() -> None:
    parked = ParkedReplies()
    sent: list[str] = []
    loop = asyncio.get_running_loop()
    first: asyncio.Future[Any] = loop.create_future()
    second: asyncio.Future[Any] = loop.create_future()

    async def finish() -> str:
        return "built"

    async def respond(name: str) -> None:
        sent.append(name)

    parked.park(Deferred(first, finish), lambda: respond("first"))
    parked.park(Deferred(second, finish), lambda: respond("second"))
    assert len(parked) == 2 and sent == []
    first.set_result(True)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sent == ["first"] and len(parked) == 1
    await parked.close(timeout=2)  # shutdown answers the rest with what there is
    assert sent == ["first", "second"]
    assert second.result() is None


class FakeLog:
    """The part of ReplicatedLog a blocking query uses, over a real IndexWaiters."""

    def __init__(self) -> None:
        self.waiters = IndexWaiters()
        self.applied_index = 10

    async def barrier(self) -> int:
        return self.applied_index

    def park(self, after: int, timeout: float) -> asyncio.Future[bool]:
        return self.waiters.wait(after + 1, timeout)

    def apply(self, index: int) -> None:
        self.applied_index = index
        self.waiters.notify(index)


async def _answer(reply: Any) -> Any:
    while isinstance(reply, Deferred):
        await reply.ready
        reply = await reply.finish()
    return reply


async def test_blocking_query_parks_then_answers_when_its_table_moves() -> None:
    log = FakeLog()
    table = {"jobs": 10}

    def compute() -> tuple[int, Any]:
        return table["jobs"], f"jobs@{table['jobs']}"

    reply = await blocking(
        log,  # type: ignore[arg-type]
        QueryOptions(min_index=10, wait=30),
        compute,
        lambda i, b: (i, b),
    )
    assert isinstance(reply, Deferred)
    answered = asyncio.ensure_future(_answer(reply))
    log.apply(11)  # the log moved, the jobs table did not: still waiting
    await asyncio.sleep(0.01)
    assert not answered.done()
    table["jobs"] = 12
    log.apply(12)
    assert await asyncio.wait_for(answered, 2) == (12, "jobs@12")


async def test_blocking_query_on_a_future_index_sleeps_until_its_wait_runs_out() -> None:
    log = FakeLog()
    wakes = 0

    def compute() -> tuple[int, Any]:
        nonlocal wakes
        wakes += 1
        return log.applied_index, "now"

    reply = await blocking(
        log,  # type: ignore[arg-type]
        QueryOptions(min_index=10**9, wait=0.2),
        compute,
        lambda i, b: (i, b),
    )
    assert isinstance(reply, Deferred)
    answered = asyncio.ensure_future(_answer(reply))
    for i in range(11, 60):
        log.apply(i)  # nothing below the requested index wakes it
    await asyncio.sleep(0)
    assert wakes == 1
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await asyncio.wait_for(answered, 2) == (59, "now")  # 200 with the current index
    assert loop.time() - started <= 0.2 * 17 / 16 + 0.1
    assert wakes == 2


async def test_blocking_query_already_past_its_index_answers_at_once() -> None:
    log = FakeLog()
    reply = await blocking(
        log,  # type: ignore[arg-type]
        QueryOptions(min_index=3, wait=30),
        lambda: (10, "x"),
        lambda i, b: (i, b),
    )
    assert reply == (10, "x")


def test_wait_follows_nomad() -> None:
    assert longpoll.clamp_wait(0) == 300
    assert longpoll.clamp_wait(-1) == 300
    assert longpoll.clamp_wait(3) == 3
    assert longpoll.clamp_wait(3600) == 600
    for _ in range(200):
        assert 60 <= longpoll.jittered(60) <= 60 + 60 / 16


@pytest.mark.parametrize(
    ("query", "blocking_api", "expected"),
    [
        ({}, True, 90.0),
        ({"wait": "5m"}, True, 90.0),  # no index: not a blocking query
        ({"index": "0", "wait": "5m"}, True, 90.0),
        ({"index": "7", "wait": "nonsense"}, True, 90.0),  # the service answers 400 at once
        ({"index": "7"}, True, 300 * 17 / 16 + GRACE),
        ({"index": "7", "wait": "5m"}, True, 300 * 17 / 16 + GRACE),
        ({"index": "7", "wait": "1h"}, True, 600 * 17 / 16 + GRACE),
        ({"index": "7", "wait": "3s"}, True, 90.0),
        ({"index": "7", "wait": "5m"}, False, 90.0),
    ],
)
def test_gateway_deadline_follows_the_requested_wait(
    query: dict[str, str], blocking_api: bool, expected: float
) -> None:
    assert request_deadline(query, 90.0, blocking_api) == pytest.approx(expected)


def test_blocking_wait_reads_only_valid_indexes() -> None:
    assert blocking_wait({"index": "-1"}) is None
    assert blocking_wait({"index": "12", "wait": "0s"}) == 300


class _Info:
    def __init__(self, last: int) -> None:
        self.state = type("State", (), {"last_seq": last})()


class FakeJs:
    """stream_info that answers only when told, counting calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.last = 7
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def stream_info(self, _: str) -> _Info:
        self.calls += 1
        self.started.set()
        seen = self.last  # the lookup sees the stream as it is when it starts
        await self.release.wait()
        self.release.clear()
        return _Info(seen)


async def test_a_burst_of_consistent_reads_shares_stream_lookups() -> None:
    from shared.replog import ReplicatedLog

    js = FakeJs()
    log = ReplicatedLog(js, "s", machine=None)  # type: ignore[arg-type]
    log._applied = 100
    first = asyncio.ensure_future(log.barrier())
    await asyncio.wait_for(js.started.wait(), 2)
    js.started.clear()
    assert js.calls == 1
    # These arrive while the first lookup is out: they must not reuse it (a write acknowledged
    # after it started would be missed), so they share the next one.
    js.last = 9
    burst = [asyncio.ensure_future(log.barrier()) for _ in range(500)]
    js.release.set()
    assert await first == 100
    await asyncio.wait_for(js.started.wait(), 2)
    assert js.calls == 2
    js.release.set()
    assert await asyncio.gather(*burst) == [100] * 500
    assert js.calls == 2
    assert log._lookup_task is None
