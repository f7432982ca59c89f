"""The identity store as two replicas see one storage: each write is visible to the other
before it answers an API read, and concurrent edits of one record both land (the loser of the
compare-and-set reloads and runs its operation again)."""

from __future__ import annotations

import asyncio

from services.secrets.core.barrier import Barrier
from services.secrets.identity.index import IdentityIndex
from services.secrets.identity.model import Entity, copy
from services.secrets.identity.store import Change, IdentityStore
from services.secrets.keyring import Keyring
from shared.storage import Entry, MemoryStorage


class YieldingStorage(MemoryStorage):
    """Gives the loop away before each operation, so the two replicas really interleave; counts
    listings (a full reload lists, catching up on one change does not)."""

    lists = 0

    async def list(self, prefix: str) -> list[str]:
        self.lists += 1
        return await super().list(prefix)

    async def get(self, key: str) -> Entry | None:
        await asyncio.sleep(0)
        return await super().get(key)

    async def update(self, key: str, value: bytes, revision: int) -> int:
        await asyncio.sleep(0)
        return await super().update(key, value, revision)


def two_replicas() -> tuple[IdentityStore, IdentityStore, list[str]]:
    return _replicas(YieldingStorage())


def _replicas(storage: MemoryStorage) -> tuple[IdentityStore, IdentityStore, list[str]]:
    barrier = Barrier(storage)
    barrier.unseal(Keyring.new())
    announced: list[str] = []

    def store(name: str) -> IdentityStore:
        async def announce() -> None:
            announced.append(name)

        return IdentityStore(barrier.view("logical/root-identity/"), announce)

    return store("a"), store("b"), announced


def add_policy(entity_id: str, policy: str):  # type: ignore[no-untyped-def]
    def op(index: IdentityIndex) -> tuple[Change, None]:
        entity = copy(index.entities[entity_id])
        entity.policies = [*entity.policies, policy]
        return Change(entities=[entity]), None

    return op


async def test_a_write_on_one_replica_is_read_on_the_other() -> None:
    a, b, announced = two_replicas()
    assert (await b.fresh()).entities == {}
    await a.transact(lambda ix: (Change(entities=[Entity(id="e1", name="one")]), None))
    assert announced == ["a"]
    # b's cached copy is stale until it checks; an API read always checks.
    assert "e1" not in b.index.entities
    assert (await b.fresh()).entity_by_name("ONE") is not None
    await b.transact(lambda ix: (Change(drop_entities=["e1"]), None))
    assert (await a.fresh()).entities == {}


async def test_concurrent_edits_of_one_record_both_land() -> None:
    a, b, _ = two_replicas()
    await a.transact(lambda ix: (Change(entities=[Entity(id="e1", name="one")]), None))
    await b.fresh()
    await asyncio.gather(
        *(s.transact(add_policy("e1", f"p{i}")) for i, s in enumerate([a, b, a, b, a, b]))
    )
    for store in (a, b):
        assert sorted((await store.fresh()).entities["e1"].policies) == [f"p{i}" for i in range(6)]


async def test_an_operation_that_changes_nothing_writes_nothing() -> None:
    a, _, announced = two_replicas()
    assert await a.transact(lambda ix: (Change(), "same")) == "same"
    assert announced == []


async def test_one_change_behind_rereads_only_its_records() -> None:
    storage = YieldingStorage()
    a, b, _ = _replicas(storage)
    for i in range(3):
        await a.transact(
            lambda ix, i=i: (Change(entities=[Entity(id=f"e{i}", name=f"n{i}")]), None)
        )
    await b.fresh()
    listed = storage.lists
    await a.transact(add_policy("e1", "p"))
    assert (await b.fresh()).entities["e1"].policies == ["p"]
    assert storage.lists == listed  # caught up without a full reload
    await a.transact(add_policy("e1", "q"))
    await a.transact(lambda ix: (Change(drop_entities=["e2"]), None))
    index = await b.fresh()  # two changes behind: a full reload
    assert storage.lists > listed
    assert index.entities["e1"].policies == ["p", "q"] and "e2" not in index.entities
