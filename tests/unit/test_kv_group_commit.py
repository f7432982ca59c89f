"""Group commit of KV v2 changes (services/secrets/engines/kv/group_commit.py) over in-memory
storage: concurrent writers of one key on one replica never collide and are written together,
each with its own version; a refused change does not spoil its batch; check-and-set holds
inside a batch; two replicas on one storage still lose no version."""

from __future__ import annotations

import asyncio

import msgspec

from services.secrets.core.barrier import Barrier
from services.secrets.engines.kv.records import Config, KeyRecord
from services.secrets.engines.kv.store import BLOB, META, KVStore, Plan
from services.secrets.engines.kv.v2_data import add_data, check_cas
from services.secrets.engines.kv.v2_version_ops import destroy
from services.secrets.engines.kv.versions import RECORD_INLINE_BUDGET, VERSION_INLINE_MAX
from services.secrets.errors import SecretsError
from services.secrets.keyring import Keyring
from shared.storage import Entry, MemoryStorage


class CountingStorage(MemoryStorage):
    """Yields before each operation (so writers interleave) and counts key record writes and
    the conflicts among them."""

    def __init__(self) -> None:
        super().__init__()
        self.record_writes = 0
        self.conflicts = 0

    async def get(self, key: str) -> Entry | None:
        await asyncio.sleep(0)
        return await super().get(key)

    async def _record(self, key: str) -> None:
        await asyncio.sleep(0)
        if f"/{META}" in key:
            self.record_writes += 1

    async def create(self, key: str, value: bytes) -> int:
        await self._record(key)
        try:
            return await super().create(key, value)
        except Exception:
            self.conflicts += f"/{META}" in key
            raise

    async def update(self, key: str, value: bytes, revision: int) -> int:
        await self._record(key)
        try:
            return await super().update(key, value, revision)
        except Exception:
            self.conflicts += f"/{META}" in key
            raise


def replica(storage: MemoryStorage, keyring: Keyring) -> KVStore:
    barrier = Barrier(storage)
    barrier.unseal(keyring)
    return KVStore(barrier.view("logical/m/"))


async def put(store: KVStore, path: str, data: dict[str, int], cas: int | None = None) -> int:
    """The v2 put's change: check-and-set, then a new version (kept in the record if small)."""
    raw = msgspec.json.encode(data)
    config = Config(max_versions=100)

    async def change(key: KeyRecord | None) -> Plan:
        key = key or KeyRecord(created=1, updated=1)
        check_cas(cas, config, key)
        number, dropped, created = await add_data(store, key, config, 2, raw)
        return Plan(key, number, drop=dropped, undo=created)

    return await store.mutate(path, change)


async def read_all(store: KVStore, path: str) -> dict[int, dict[str, int]]:
    got = await store.get_key(path)
    assert got is not None
    key = got[0]
    out = {}
    for n in key.versions:
        raw = await store.version_data(key, n)
        assert raw is not None
        out[n] = msgspec.json.decode(raw)
    return out


async def test_one_replica_writers_are_batched_without_conflicts() -> None:
    storage = CountingStorage()
    store = replica(storage, Keyring.new())
    numbers = await asyncio.gather(*(put(store, "k", {"w": i}) for i in range(40)))
    assert sorted(numbers) == list(range(1, 41))
    assert storage.conflicts == 0
    assert 1 <= storage.record_writes < 40  # several writers per record write
    data = await read_all(store, "k")
    assert sorted(d["w"] for d in data.values()) == list(range(40))
    # Each writer got the version that holds its own data.
    assert all(data[n] == {"w": i} for i, n in enumerate(numbers))


async def test_check_and_set_holds_inside_a_batch() -> None:
    storage = CountingStorage()
    store = replica(storage, Keyring.new())
    results = await asyncio.gather(
        *(put(store, "c", {"w": i}, cas=0) for i in range(10)), return_exceptions=True
    )
    won = [r for r in results if isinstance(r, int)]
    refused = [r for r in results if isinstance(r, SecretsError)]
    assert won == [1] and len(refused) == 9
    assert all(r.code == 400 for r in refused)
    # The next round: exactly one writer with the current version wins again.
    results = await asyncio.gather(
        *(put(store, "c", {"w": i}, cas=1) for i in range(10)), return_exceptions=True
    )
    assert [r for r in results if isinstance(r, int)] == [2]
    got = await store.get_key("c")
    assert got is not None and got[0].current == 2


async def test_a_refused_change_leaves_its_batch_intact() -> None:
    store = replica(CountingStorage(), Keyring.new())

    async def half_done(key: KeyRecord | None) -> Plan:
        assert key is not None
        key.custom = {"half": "done"}  # touched, then refused: must not be written
        raise SecretsError(400, "no")

    await put(store, "r", {"w": 0})
    results = await asyncio.gather(
        put(store, "r", {"w": 1}),
        store.mutate("r", half_done),
        put(store, "r", {"w": 2}),
        return_exceptions=True,
    )
    assert results[0] == 2 and results[2] == 3
    assert isinstance(results[1], SecretsError)
    got = await store.get_key("r")
    assert got is not None and got[0].custom is None and got[0].current == 3


async def test_two_replicas_lose_no_version() -> None:
    storage = CountingStorage()
    keyring = Keyring.new()
    a, b = replica(storage, keyring), replica(storage, keyring)
    jobs = [put(a if i % 2 else b, "x", {"w": i}) for i in range(40)]
    numbers = await asyncio.gather(*jobs)
    assert sorted(numbers) == list(range(1, 41))
    data = await read_all(a, "x")
    assert sorted(d["w"] for d in data.values()) == list(range(40))


async def test_two_replicas_check_and_set_has_one_winner() -> None:
    storage = CountingStorage()
    keyring = Keyring.new()
    a, b = replica(storage, keyring), replica(storage, keyring)
    results = await asyncio.gather(
        *(put(a if i % 2 else b, "y", {"w": i}, cas=0) for i in range(12)),
        return_exceptions=True,
    )
    assert [r for r in results if isinstance(r, int)] == [1]
    assert all(isinstance(r, SecretsError) for r in results if not isinstance(r, int))


async def test_small_versions_live_in_the_record_until_the_budget_is_spent() -> None:
    store = replica(CountingStorage(), Keyring.new())
    small = {"v": 1}
    await put(store, "s", small)
    assert await store.view.list_all(BLOB) == []
    big = {"v": "x" * 2000}
    count = RECORD_INLINE_BUDGET // len(msgspec.json.encode(big)) + 2
    for _ in range(count):
        await put(store, "s", big)
    blobs = await store.view.list_all(BLOB)
    assert blobs  # past the budget, versions went to blobs
    got = await store.get_key("s")
    assert got is not None
    key = got[0]
    held = sum(len(v.data) for v in key.versions.values() if v.data is not None)
    assert held <= RECORD_INLINE_BUDGET
    assert sorted(blobs) == sorted(v.blob for v in key.versions.values() if v.blob)
    assert (await read_all(store, "s"))[1] == small


async def test_large_data_goes_to_a_blob_and_destroy_removes_inline_data() -> None:
    store = replica(CountingStorage(), Keyring.new())
    await put(store, "d", {"v": 1})
    raw = msgspec.json.encode({"x": "y" * VERSION_INLINE_MAX})
    config = Config()

    async def large(key: KeyRecord | None) -> Plan:
        assert key is not None
        number, dropped, created = await add_data(store, key, config, 3, raw)
        return Plan(key, number, drop=dropped, undo=created)

    assert await store.mutate("d", large) == 2
    got = await store.get_key("d")
    assert got is not None
    assert got[0].versions[2].blob and got[0].versions[2].data is None
    assert await store.version_data(got[0], 2) == raw

    async def destroy_first(key: KeyRecord | None) -> Plan:
        assert key is not None
        destroy(key, 1, key.versions[1], 4)
        return Plan(key)

    await store.mutate("d", destroy_first)
    got = await store.get_key("d")
    assert got is not None and got[0].versions[1].data is None
    assert await store.version_data(got[0], 1) is None


async def test_a_caller_that_goes_away_strands_no_one() -> None:
    store = replica(CountingStorage(), Keyring.new())
    first = asyncio.create_task(put(store, "g", {"w": 0}))
    gone = asyncio.create_task(put(store, "g", {"w": 1}))
    last = asyncio.create_task(put(store, "g", {"w": 2}))
    await asyncio.sleep(0)  # all three are queued; the key's commit task has not run yet
    gone.cancel()
    assert await asyncio.wait_for(asyncio.gather(first, last), 5) == [1, 2]
    assert gone.cancelled()
    assert await read_all(store, "g") == {1: {"w": 0}, 2: {"w": 2}}
