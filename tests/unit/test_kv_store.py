"""KVStore over in-memory storage: the CAS loop under contention (no lost version, no orphaned
blob), key deletion, and the v1 -> v2 upgrade run twice at once."""

from __future__ import annotations

import asyncio

import pytest

from services.secrets.core.barrier import Barrier
from services.secrets.engines.kv import upgrade
from services.secrets.engines.kv.records import Config, KeyRecord
from services.secrets.engines.kv.store import BLOB, META, UPGRADED, V1, KVStore, Plan
from services.secrets.engines.kv.versions import add_version
from services.secrets.errors import SecretsError
from services.secrets.keyring import Keyring
from shared.storage import Entry, MemoryStorage
from shared.storage_cache import MISS


class YieldingStorage(MemoryStorage):
    """Gives the loop away before each operation, so concurrent writers really interleave."""

    async def get(self, key: str) -> Entry | None:
        await asyncio.sleep(0)
        return await super().get(key)

    async def update(self, key: str, value: bytes, revision: int) -> int:
        await asyncio.sleep(0)
        return await super().update(key, value, revision)


def make_store() -> tuple[KVStore, MemoryStorage]:
    storage = YieldingStorage()
    barrier = Barrier(storage)
    barrier.unseal(Keyring.new())
    return KVStore(barrier.view("logical/m/")), storage


async def write(store: KVStore, path: str, data: bytes) -> int:
    blob = await store.create_blob(data)

    async def change(key: KeyRecord | None) -> Plan:
        key = key or KeyRecord(created=1, updated=1)
        number, dropped = add_version(key, Config(max_versions=100), 2, blob, data)
        return Plan(key, number, drop=dropped)

    return await store.mutate(path, change)


async def test_concurrent_writers_lose_no_version() -> None:
    store, _ = make_store()
    numbers = await asyncio.gather(*(write(store, "k", b'{"n":%d}' % i) for i in range(25)))
    assert sorted(numbers) == list(range(1, 26))
    got = await store.get_key("k")
    assert got is not None and got[0].current == 25 and len(got[0].versions) == 25
    blobs = await store.view.list_all(BLOB)
    assert sorted(blobs) == sorted(v.blob for v in got[0].versions.values())


async def test_a_failed_change_cleans_up_its_own_blob() -> None:
    store, _ = make_store()

    async def change(key: KeyRecord | None) -> Plan:
        blob = await store.create_blob(b"{}")
        if key is not None:
            raise SecretsError(400, "no")
        return Plan(None, undo=[blob])

    await store.mutate("k", change)
    assert await store.view.list_all(BLOB) == []


async def test_delete_key_removes_record_and_blobs() -> None:
    store, _ = make_store()
    for i in range(3):
        await write(store, "a/b", b'{"i":%d}' % i)
    await store.delete_key("a/b")
    assert await store.get_key("a/b") is None
    assert await store.view.list_all("") == []
    await store.delete_key("a/b")  # absent: nothing to do


async def test_upgrade_moves_v1_entries_once_even_when_run_twice_at_once() -> None:
    store, storage = make_store()
    await store.view.put(V1 + "a", b'{"x":"1"}')
    await store.view.put(V1 + "dir/b", b'{"y":"2"}')
    # A key written through v2 already wins over its stale v1 entry.
    await write(store, "dir/b", b'{"y":"new"}')
    moved = await asyncio.gather(upgrade.upgrade(store), upgrade.upgrade(store))
    assert sum(moved) == 1
    assert await store.view.list_all(V1) == []
    a = await store.get_key("a")
    assert a is not None and a[0].current == 1 and a[0].latest == b'{"x":"1"}'
    b = await store.get_key("dir/b")
    assert b is not None and b[0].latest == b'{"y":"new"}'
    assert await store.view.get(UPGRADED) == b"1"
    assert sorted(await store.view.list_all(META)) == ["a", "dir/b"]
    # Values reach storage encrypted.
    assert all(b'"x"' not in e.value for e in storage.data.values())
    assert await upgrade.upgrade(store) == 0


@pytest.mark.parametrize("n", [1, 3])
async def test_config_round_trip(n: int) -> None:
    store, _ = make_store()
    config, rev = await store.get_config_entry()
    assert config == Config() and rev == 0
    await store.put_config(Config(max_versions=n), 0)
    assert (await store.get_config()).max_versions == n


async def test_reads_decode_a_record_once_and_follow_every_change() -> None:
    store, _ = make_store()
    # Another replica's store: same storage and keys, its own memo.
    other = KVStore(store.view)
    await write(store, "k", b'{"n":1}')
    first = await store.read_key("k")
    assert first is not None and first.current == 1
    assert await store.read_key("k") is first  # unchanged in storage: decoded once
    await write(other, "k", b'{"n":2}')
    second = await store.read_key("k")
    assert second is not None and second.current == 2 and second.latest == b'{"n":2}'
    await other.delete_key("k")
    assert await store.read_key("k") is None
    await write(other, "k", b'{"n":3}')
    third = await store.read_key("k")
    assert third is not None and third.current == 1 and third.latest == b'{"n":3}'


async def test_a_sealed_barrier_reads_nothing_from_the_memo() -> None:
    store, _ = make_store()
    await write(store, "k", b'{"n":1}')
    assert await store.read_key("k") is not None
    store.view.barrier.seal()
    with pytest.raises(SecretsError):
        await store.read_key("k")


async def test_reads_answered_without_a_wait_only_from_a_value_decoded_before() -> None:
    storage = MemoryStorage()
    barrier = Barrier(storage)
    assert barrier.peek_decoded("logical/m/meta/k", {}) is MISS  # sealed: the waiting path says so
    barrier.unseal(Keyring.new())
    store = KVStore(barrier.view("logical/m/"))
    assert store._peek_key("k") is None  # absent, known at once
    await write(store, "k", b'{"n":1}')
    assert store._peek_key("k") is MISS  # stored, never decoded: decrypting needs the wait
    first = await store.read_key("k")
    assert first is not None and store._peek_key("k") is first
    await write(store, "k", b'{"n":2}')  # a new ciphertext: the memo no longer names it
    assert store._peek_key("k") is MISS
    second = await store.read_key("k")
    assert second is not None and second.current == 2 and store._peek_key("k") is second
