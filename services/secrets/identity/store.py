"""The identity records of one namespace in storage, with the in-memory index over them.

Records: `entity/<id>` and `group/<id>` (aliases inside them), each written with a
compare-and-set on the revision this replica loaded, so two replicas editing one record cannot
overwrite each other: the loser reloads and runs its operation again. `gen` is bumped after
every change; a replica whose copy of `gen` is older reloads before answering an API call, and
the request path (token policies) also reloads when the broadcast invalidation arrives or its
copy is older than CACHE_SECONDS.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import msgspec

from services.secrets.errors import SecretsError
from services.secrets.identity.index import IdentityIndex
from services.secrets.identity.model import Entity, Group, copy, now
from shared.storage import CasConflict

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView

R = TypeVar("R")

CACHE_SECONDS = 5.0
_RETRIES = 8
_enc = msgspec.json.Encoder()


@dataclass
class Change:
    """What one operation writes; applied to storage, then to the index."""

    entities: list[Entity] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    drop_entities: list[str] = field(default_factory=list)
    drop_groups: list[str] = field(default_factory=list)

    def edit_group(self, group: Group) -> Group:
        """This change's copy of `group` (made on first edit, with the next modify_index)."""
        for pending in self.groups:
            if pending.id == group.id:
                return pending
        edited = copy(group)
        edited.modify_index += 1
        edited.last_update_time = now()
        self.groups.append(edited)
        return edited

    def empty(self) -> bool:
        return not (self.entities or self.groups or self.drop_entities or self.drop_groups)


# An operation of `IdentityStore.transact`: what to write, and what to answer.
StoreOp = Callable[[IdentityIndex], tuple[Change, R]]


class _Stale(Exception):
    """A record moved on under this replica: reload and run the operation again."""


class _Gen(msgspec.Struct):
    """The `gen` record: how many changes there have been, and the keys the last one wrote
    (a replica one change behind re-reads just those)."""

    n: int = 0
    keys: list[str] = []


class IdentityStore:
    def __init__(self, view: BarrierView, announce: Callable[[], Awaitable[None]]) -> None:
        self.view = view
        self.index = IdentityIndex()
        self._announce = announce
        self._revs: dict[str, int] = {}
        self._gen = -1  # revision of `gen` the index reflects; -1: not loaded
        self._n = 0  # its change count
        self._checked = 0.0
        self._write = asyncio.Lock()
        self._load = asyncio.Lock()

    def invalidate(self) -> None:
        """Another replica changed something (its broadcast): check storage on next use."""
        self._checked = 0.0

    async def fresh(self) -> IdentityIndex:
        """The index as of now: one storage read, then the records changed since, if any."""
        async with self._load:
            got = await self.view.get_entry("gen")
            rev = got[1] if got else 0
            if rev != self._gen:
                gen = msgspec.json.decode(got[0], type=_Gen) if got else _Gen()
                if self._gen >= 0 and gen.n == self._n + 1:
                    for key in gen.keys:
                        await self._reread(key, self.index, self._revs)
                else:
                    await self._reload()
                self._gen, self._n = rev, gen.n
            self._checked = time.monotonic()
        return self.index

    async def cached(self) -> IdentityIndex:
        """The index for the request path: storage is consulted at most every CACHE_SECONDS
        (and at once after an invalidation broadcast)."""
        if self._gen < 0 or time.monotonic() - self._checked > CACHE_SECONDS:
            return await self.fresh()
        return self.index

    async def _reload(self) -> None:
        # Built aside and swapped in whole: a request reading the index meanwhile sees the
        # old records, never half of the new ones.
        index, revs = IdentityIndex(), {}
        for kind in ("entity/", "group/"):
            for rel in await self.view.list(kind):
                await self._reread(kind + rel, index, revs)
        self.index, self._revs = index, revs

    async def _reread(self, key: str, index: IdentityIndex, revs: dict[str, int]) -> None:
        kind, _, rid = key.partition("/")
        got = await self.view.get_entry(key)
        if got is None:
            revs.pop(key, None)
            (index.drop_entity if kind == "entity" else index.drop_group)(rid)
            return
        revs[key] = got[1]
        if kind == "entity":
            index.put_entity(msgspec.json.decode(got[0], type=Entity))
        else:
            index.put_group(msgspec.json.decode(got[0], type=Group))

    async def transact(self, op: StoreOp[R]) -> R:
        """Run `op` on a current index and store what it returns. `op` must not edit the
        index's objects (model.copy them) and may raise SecretsError to refuse."""
        async with self._write:
            for _ in range(_RETRIES):
                index = await self.fresh()
                change, result = op(index)
                if change.empty():
                    return result
                try:
                    async with self._load:  # no reload swaps the index under this change
                        await self._commit(change)
                except _Stale:
                    continue
                return result
        raise SecretsError(503, "identity records are changing too fast; retry the request")

    async def _commit(self, change: Change) -> None:
        """Write each record with a compare-and-set, then announce the keys written (also
        when a conflict stops the write half-way, so no replica misses what did land)."""
        written: list[str] = []
        try:
            for key, obj in [
                *((f"entity/{e.id}", e) for e in change.entities),
                *((f"group/{g.id}", g) for g in change.groups),
            ]:
                data, rev = _enc.encode(obj), self._revs.get(key)
                if rev:
                    self._revs[key] = await self.view.update(key, data, rev)
                else:
                    self._revs[key] = await self.view.create(key, data)
                written.append(key)
            for key in [
                *(f"entity/{i}" for i in change.drop_entities),
                *(f"group/{i}" for i in change.drop_groups),
            ]:
                await self.view.delete(key, self._revs.get(key))
                self._revs.pop(key, None)
                written.append(key)
        except CasConflict:
            if written:
                await self._bump(written, current=False)
            self._gen = -1
            raise _Stale from None
        for eid in change.drop_entities:
            self.index.drop_entity(eid)
        for gid in change.drop_groups:
            self.index.drop_group(gid)
        for e in change.entities:
            self.index.put_entity(e)
        for g in change.groups:
            self.index.put_group(g)
        await self._bump(written, current=True)

    async def _bump(self, keys: list[str], *, current: bool) -> None:
        """Count one change in `gen`. The index stays current only if `current` and no other
        replica counted a change since this one last read `gen`."""
        for _ in range(_RETRIES * 4):
            got = await self.view.get_entry("gen")
            gen = msgspec.json.decode(got[0], type=_Gen) if got else _Gen()
            data = _enc.encode(_Gen(n=gen.n + 1, keys=keys))
            try:
                if got is None:
                    rev = await self.view.create("gen", data)
                else:
                    rev = await self.view.update("gen", data, got[1])
            except CasConflict:
                continue
            in_step = current and (got[1] if got else 0) == self._gen
            self._gen, self._n = (rev, gen.n + 1) if in_step else (-1, 0)
            await self._announce()
            return
        # Could not count it: force every replica to reload in full next time.
        await self.view.put("gen", _enc.encode(_Gen(n=-1)))
        self._gen = -1
        await self._announce()
