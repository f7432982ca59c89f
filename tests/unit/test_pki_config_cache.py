"""The PKI engine's per-replica cache of roles, issuers and keys: repeated reads stay in memory, a
write through any replica drops every replica's copy at its next request, and a read that was
in flight when the cache dropped cannot put a stale value back."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import msgspec
import pytest

from services.secrets.engines.pki.cache import ConfigCache
from services.secrets.engines.pki.roles import Role


class SharedStorage:
    """One mount's storage as every replica sees it; counts reads, can hold one read back."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.reads: list[str] = []
        self.hold: asyncio.Event | None = None
        self.held = asyncio.Event()  # set once a role read is being held back

    async def get(self, path: str) -> bytes | None:
        self.reads.append(path)
        value = self.data.get(path)
        if self.hold is not None and path.startswith("role/"):
            self.held.set()
            await self.hold.wait()
        return value

    async def put(self, path: str, value: bytes) -> int:
        self.data[path] = value
        return len(self.data)

    async def delete(self, path: str, revision: int | None = None) -> None:
        self.data.pop(path, None)

    async def list(self, prefix: str = "") -> list[str]:
        return sorted(k[len(prefix) :] for k in self.data if k.startswith(prefix))


def replica(storage: SharedStorage) -> ConfigCache:
    return ConfigCache(cast(Any, storage))


async def role_ttl(cache: ConfigCache, name: str) -> int | None:
    await cache.refresh()  # what every request does first
    role = await cache.get_obj(f"role/{name}", Role)
    return None if role is None else role.ttl


async def test_reads_are_served_from_memory_until_a_change() -> None:
    storage = SharedStorage()
    a, b = replica(storage), replica(storage)
    await a.put("role/web", Role(name="web", ttl=60))
    assert await role_ttl(b, "web") == 60
    storage.reads.clear()
    for _ in range(5):
        assert await role_ttl(b, "web") == 60
    assert storage.reads == ["config/generation"] * 5  # one small read per request, no role

    await a.put("role/web", Role(name="web", ttl=120))  # changed through the other replica
    assert await role_ttl(b, "web") == 120
    await a.delete("role/web")
    assert await role_ttl(b, "web") is None
    await b.put("role/web", Role(name="web", ttl=30))
    assert await role_ttl(a, "web") == 30 and await role_ttl(b, "web") == 30


async def test_cached_values_cannot_be_altered_by_callers() -> None:
    storage = SharedStorage()
    cache = replica(storage)
    await cache.put("role/web", Role(name="web", ttl=60, allowed_domains=["example.com"]))
    first = await cache.get_obj("role/web", Role)
    assert first is not None
    first.allowed_domains.append("evil.com")
    again = await cache.get_obj("role/web", Role)
    assert again is not None and again.allowed_domains == ["example.com"]


async def test_a_read_in_flight_during_a_change_does_not_refill_the_cache() -> None:
    storage = SharedStorage()
    cache = replica(storage)
    storage.data["role/web"] = msgspec.json.encode(Role(name="web", ttl=60))
    await cache.refresh()
    storage.hold = asyncio.Event()
    slow = asyncio.create_task(cache.get_obj("role/web", Role))  # reads ttl=60, then waits
    await asyncio.wait_for(storage.held.wait(), 10)
    await cache.put("role/web", Role(name="web", ttl=120))  # lands while that read is in flight
    storage.hold.set()
    stale = await slow
    assert stale is not None and stale.ttl == 60  # that request began before the change
    storage.hold = None
    assert await role_ttl(cache, "web") == 120  # but the cache kept nothing of it


async def test_requests_arriving_together_share_one_generation_read() -> None:
    storage = SharedStorage()
    a, b = replica(storage), replica(storage)
    await a.put("role/web", Role(name="web", ttl=60))
    assert await role_ttl(b, "web") == 60
    storage.reads.clear()
    assert await asyncio.gather(*(role_ttl(b, "web") for _ in range(8))) == [60] * 8
    assert storage.reads == ["config/generation"]

    # A change acknowledged before the requests were asked is seen by every one of them.
    await a.put("role/web", Role(name="web", ttl=90))
    assert await asyncio.gather(*(role_ttl(b, "web") for _ in range(8))) == [90] * 8


async def test_a_derived_value_is_built_once_until_a_change() -> None:
    storage = SharedStorage()
    a, b = replica(storage), replica(storage)
    await a.put("role/memo-web", Role(name="memo-web", ttl=60))
    builds: list[int | None] = []

    async def derived_ttl(cache: ConfigCache) -> int | None:
        async def build() -> int | None:
            role = await cache.get_obj("role/memo-web", Role)
            builds.append(None if role is None else role.ttl)
            return builds[-1]

        await cache.refresh()
        return await cache.memo(("ttl", "memo-web"), build)

    assert [await derived_ttl(b) for _ in range(4)] == [60] * 4
    assert builds == [60]
    await a.put("role/memo-web", Role(name="memo-web", ttl=90))  # through the other replica
    assert [await derived_ttl(b) for _ in range(3)] == [90] * 3
    assert builds == [60, 90]


async def test_a_failed_build_is_not_kept() -> None:
    cache = replica(SharedStorage())
    calls = 0

    async def build() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("no such role")
        return "built"

    with pytest.raises(ValueError, match="no such role"):
        await cache.memo("memo-fails-once", build)
    assert await cache.memo("memo-fails-once", build) == "built"
    assert await cache.memo("memo-fails-once", build) == "built"
    assert calls == 2


async def test_a_value_built_across_a_change_is_not_kept() -> None:
    storage = SharedStorage()
    cache = replica(storage)
    storage.data["role/memo-race"] = msgspec.json.encode(Role(name="memo-race", ttl=60))
    await cache.refresh()
    storage.hold = asyncio.Event()

    async def build() -> int | None:
        role = await cache.get_obj("role/memo-race", Role)
        return None if role is None else role.ttl

    slow = asyncio.create_task(cache.memo("memo-race", build))  # reads ttl=60, then waits
    await asyncio.wait_for(storage.held.wait(), 10)
    await cache.put("role/memo-race", Role(name="memo-race", ttl=120))
    storage.hold.set()
    assert await slow == 60  # that request began before the change
    storage.hold = None
    await cache.refresh()
    assert await cache.memo("memo-race", build) == 120
