"""The replicated log and the leader lease against a real nats-server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.js.api import KeyValueConfig

from shared.leader import LeaderLease
from shared.replog import ApplyError, LogEntry, ReplicatedLog

pytestmark = pytest.mark.nats


class Names:
    """A tiny state machine: a set of unique names, with the index each was added at."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.restored_from = 0

    def apply(self, index: int, entry: LogEntry) -> Any:
        name = entry.payload.decode()
        if entry.type != "add":
            raise ApplyError(400, f"unknown entry type {entry.type}")
        if name in self.names:
            raise ApplyError(422, f"{name} has already been taken")
        self.names[name] = index
        return name

    def snapshot(self) -> bytes:
        return msgspec.msgpack.encode(self.names)

    def restore(self, data: bytes, index: int) -> None:
        self.names = msgspec.msgpack.decode(data)
        self.restored_from = index


async def until(cond: Callable[[], bool | Awaitable[bool]], limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while True:
        res = cond()
        if not isinstance(res, bool):
            res = await res
        if res:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    conn = await nats.connect(nats_url)
    yield conn
    await conn.close()


async def test_two_replicas_converge(nc: Client, unique: str) -> None:
    js = nc.jetstream()
    a_m, b_m = Names(), Names()
    a = ReplicatedLog(js, unique, a_m)
    b = ReplicatedLog(js, unique, b_m)
    await a.start()
    await b.start()
    try:
        for i in range(20):
            log = a if i % 2 else b
            index, result = await log.append("add", f"n{i}".encode())
            assert result == f"n{i}"
            # The writer's own replica has applied it by the time append returns.
            assert log.applied_index >= index
        await a.barrier()
        await b.barrier()
        assert a_m.names == b_m.names
        assert len(a_m.names) == 20
        assert a.applied_index == b.applied_index == 20
    finally:
        await a.stop()
        await b.stop()


async def test_same_name_on_two_replicas_one_wins(nc: Client, unique: str) -> None:
    js = nc.jetstream()
    a = ReplicatedLog(js, unique, Names())
    b = ReplicatedLog(js, unique, Names())
    await a.start()
    await b.start()
    try:
        results = await asyncio.gather(
            a.append("add", b"same"), b.append("add", b"same"), return_exceptions=True
        )
        ok = [r for r in results if isinstance(r, tuple)]
        errors = [r for r in results if isinstance(r, ApplyError)]
        assert len(ok) == 1 and len(errors) == 1
        assert errors[0].code == 422
        with pytest.raises(ApplyError):
            await a.append("bogus", b"x")
    finally:
        await a.stop()
        await b.stop()


async def test_barrier_and_wait_for(nc: Client, unique: str) -> None:
    js = nc.jetstream()
    a = ReplicatedLog(js, unique, Names())
    b_m = Names()
    b = ReplicatedLog(js, unique, b_m)
    await a.start()
    await b.start()
    try:
        idx, _ = await a.append("add", b"x")
        await b.barrier()
        assert "x" in b_m.names
        # Blocking query: returns early when something new is applied, else at the timeout.
        waiter = asyncio.create_task(b.wait_for(idx, 5.0))
        await a.append("add", b"y")
        assert await waiter > idx
        start = time.monotonic()
        assert await b.wait_for(b.applied_index, 0.2) == b.applied_index
        assert time.monotonic() - start >= 0.15
    finally:
        await a.stop()
        await b.stop()


async def test_restart_from_snapshot(nc: Client, unique: str) -> None:
    js = nc.jetstream()
    a = ReplicatedLog(js, unique, Names(), snapshot_every=10)
    await a.start()
    for i in range(25):
        await a.append("add", f"n{i}".encode())
    await a.snapshot_now()  # 25; the periodic ones at 10 and 20 ran in the background
    await a.append("add", b"after")
    await a.stop()

    m = Names()
    b = ReplicatedLog(js, unique, m)
    await b.start()
    try:
        assert m.restored_from == 25
        assert b.applied_index == 26
        assert len(m.names) == 26 and "after" in m.names
    finally:
        await b.stop()


async def test_periodic_snapshot_only_by_leader(nc: Client, unique: str) -> None:
    js = nc.jetstream()
    follower = ReplicatedLog(js, unique, Names(), snapshot_every=5, should_snapshot=lambda: False)
    await follower.start()
    for i in range(12):
        await follower.append("add", f"n{i}".encode())
    await follower.stop()
    m = Names()
    b = ReplicatedLog(js, unique, m, snapshot_every=5)
    await b.start()
    assert m.restored_from == 0  # nobody was allowed to write one
    for i in range(12, 20):
        await b.append("add", f"n{i}".encode())
    # Written while replaying (index 5) and again after the appends, by b alone.
    await until(lambda: b._last_snapshot > 12 and b._snap_task is not None and b._snap_task.done())
    await b.stop()
    m2 = Names()
    c = ReplicatedLog(js, unique, m2)
    await c.start()
    try:
        assert m2.restored_from > 12  # written by b, the only one allowed to
        assert len(m2.names) == 20
    finally:
        await c.stop()


async def _kv(nc: Client, unique: str) -> Any:
    return await nc.jetstream().create_key_value(KeyValueConfig(bucket=f"{unique}_leases"))


async def test_a_lost_follower_consumer_is_noticed_in_seconds(nc: Client, unique: str) -> None:
    """The follower's consumer lives on one nats-server; when that server dies while this
    replica's connection is to another, nothing but missed heartbeats tells. Deleting it on the
    server does the same to a single server; appends wait for the replica to apply, so they
    must resume in seconds (nats-py's default heartbeat took 10-20 s: the failover drill's
    stalled scheduler writes)."""
    js = nc.jetstream()
    m = Names()
    b = ReplicatedLog(js, unique, m)
    await b.start()
    try:
        await b.append("add", b"before")
        info = await b._sub.consumer_info()
        await js.delete_consumer(info.stream_name, info.name)
        started = time.monotonic()
        await asyncio.wait_for(b.append("add", b"after"), 8.0)  # 10 s or more before the fix
        assert "after" in m.names and time.monotonic() - started < 8.0
        await asyncio.wait_for(b.append("add", b"later"), 8.0)  # and it keeps following
    finally:
        await b.stop()


async def test_leader_election_and_takeover_on_release(nc: Client, unique: str) -> None:
    kv = await _kv(nc, unique)
    events: list[str] = []
    a = LeaderLease(
        kv,
        "svc",
        "a",
        ttl=1.0,
        on_elected=lambda: events.append("a+"),
        on_demoted=lambda: events.append("a-"),
    )
    b = LeaderLease(kv, "svc", "b", ttl=1.0, on_elected=lambda: events.append("b+"))
    await a.start()
    await b.start()
    try:
        assert a.is_leader and not b.is_leader
        await a.stop()  # releases the key
        await until(lambda: b.is_leader, 5)
        assert events == ["a+", "a-", "b+"]
    finally:
        await b.stop()


async def test_leader_takeover_when_holder_dies(nc: Client, unique: str) -> None:
    kv = await _kv(nc, unique)
    a = LeaderLease(kv, "svc", "a", ttl=0.6)
    b = LeaderLease(kv, "svc", "b", ttl=0.6)
    await a.start()
    await b.start()
    try:
        assert a.is_leader
        # While the holder renews, the challenger stays a follower.
        await asyncio.sleep(1.0)
        assert a.is_leader and not b.is_leader
        await a.stop(release=False)  # a crash: the key stays until it expires
        start = time.monotonic()
        await until(lambda: b.is_leader, 5)
        # Not before the lease lapsed: a ttl after the last renewal, which was at most a third
        # of a ttl before the crash.
        assert time.monotonic() - start >= 0.6 * 2 / 3 - 0.05
    finally:
        await b.stop()
