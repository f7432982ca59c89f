"""Transit's per-replica key cache (services/secrets/engines/transit/backend.py): the requests
that miss together share one storage read, and a key changed meanwhile is read again."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from services.secrets.engines.transit.backend import TransitBackend
from services.secrets.engines.transit.policy import Policy, add_version, new_version_material


def stored(name: str, versions: int) -> bytes:
    p = Policy(name=name, type="aes256-gcm96")
    for _ in range(versions):
        add_version(p, new_version_material(p.kt))
    return msgspec.json.encode(p)


async def reads_reach(store: GatedStore, n: int) -> None:
    for _ in range(100):  # loop turns, not time: each read is issued within a few
        if store.reads >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{store.reads} reads issued, expected {n}")


class GatedStore:
    """Storage whose reads wait for `gate` and are counted."""

    def __init__(self, entries: dict[str, bytes]) -> None:
        self.entries = entries
        self.reads = 0
        self.gate = asyncio.Event()

    async def get_entry(self, key: str) -> tuple[bytes, int] | None:
        self.reads += 1
        value = self.entries.get(key)  # what the read saw when it was issued
        await self.gate.wait()
        return None if value is None else (value, 1)

    async def get_obj(self, key: str, kind: Any) -> Any:
        return None


async def test_loads_that_miss_together_share_one_read() -> None:
    store = GatedStore({"policy/shared-read": stored("shared-read", 1)})
    backend = TransitBackend(None, None, store)  # type: ignore[arg-type]
    loads = [asyncio.create_task(backend.load("shared-read")) for _ in range(8)]
    await reads_reach(store, 1)
    for _ in range(5):
        await asyncio.sleep(0)  # every load has had its turn to join (or not)
    store.gate.set()
    got = await asyncio.gather(*loads)
    assert store.reads == 1
    assert all(p is not None and p.latest_version == 1 for p in got)
    assert await backend.load("shared-read") is got[0]  # now cached: no further read
    assert store.reads == 1


async def test_a_load_after_a_change_does_not_join_a_read_begun_before_it() -> None:
    store = GatedStore({"policy/rotated": stored("rotated", 1)})
    backend = TransitBackend(None, None, store)  # type: ignore[arg-type]
    before = asyncio.create_task(backend.load("rotated"))
    await reads_reach(store, 1)
    store.entries["policy/rotated"] = stored("rotated", 2)  # rotated on another replica
    backend.forget("rotated")  # its invalidation arrives
    after = asyncio.create_task(backend.load("rotated"))
    await reads_reach(store, 2)
    store.gate.set()
    old, new = await asyncio.gather(before, after)
    assert store.reads == 2
    assert old is not None and old.latest_version == 1
    assert new is not None and new.latest_version == 2
    cached = await backend.load("rotated")
    assert cached is not None and cached.latest_version == 2  # the stale read was not cached


async def test_a_failed_read_fails_its_waiters_and_the_next_load_reads_again() -> None:
    store = GatedStore({"policy/flaky": stored("flaky", 1)})
    backend = TransitBackend(None, None, store)  # type: ignore[arg-type]
    real = store.get_entry
    calls = 0

    async def failing_once(key: str) -> tuple[bytes, int] | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TimeoutError
        return await real(key)

    store.get_entry = failing_once  # type: ignore[method-assign]
    store.gate.set()
    results = await asyncio.gather(
        *(backend.load("flaky") for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, TimeoutError) for r in results)
    again = await backend.load("flaky")
    assert again is not None and again.latest_version == 1
