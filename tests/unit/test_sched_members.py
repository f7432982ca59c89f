"""Membership's listing: a short read (nats-py's key listing under load) is read again."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import nats.js.errors

from services.scheduler.members import PREFIX, Member, Membership


class _Entry:
    def __init__(self, value: bytes) -> None:
        self.value = value


class FlakyKV:
    """A bucket whose first `short` key listings come back empty, as a listing that raced its
    consumer's pending count does."""

    def __init__(self, short: int) -> None:
        self.short = short
        self.data: dict[str, bytes] = {}
        self.listings = 0

    async def put(self, key: str, value: bytes) -> None:
        self.data[key] = value

    async def keys(self) -> list[str]:
        self.listings += 1
        if self.listings <= self.short or not self.data:
            raise nats.js.errors.NoKeysError
        return list(self.data)

    async def get(self, key: str) -> Any:
        return _Entry(self.data[key])


def _member(name: str) -> Member:
    return Member(id=name, name=name, addr="127.0.0.1", seen=time.time())


async def test_a_short_listing_is_read_again() -> None:
    kv = FlakyKV(short=1)
    kv.data[PREFIX + "other"] = msgspec.json.encode(_member("other"))
    me = Membership(kv, _member("me"), period=60)
    await me.start()
    try:
        assert [m.name for m in await me.members()] == ["me", "other"]
        assert kv.listings == 2
    finally:
        await me.stop()


async def test_a_replica_not_started_believes_the_first_listing() -> None:
    kv = FlakyKV(short=5)
    me = Membership(kv, _member("me"), period=60)
    assert await me.members() == []
    assert kv.listings == 1
