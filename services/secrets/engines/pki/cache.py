"""Per-replica cache of the PKI configuration read on every issue: roles, issuers, keys and the
`config/*` entries. Issuing would otherwise cost five storage round trips before any crypto.

Every write to a cached entry goes through here and then stores a new random
`config/generation`. Each request first reads only that key (`refresh`); if it moved, this
replica drops what it cached. So a change made on any replica is seen by the next request on
every replica, at the price of one storage read per request instead of five; requests that
reach the replica together share that read (issued after all of them, kv/read_batch.py).
Values derived from cached entries (`memo`, pki/issue_plan.py) are dropped with them.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from services.secrets.engines.kv.read_batch import ReadBatch

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView

T = TypeVar("T")
GENERATION = "config/generation"
_UNSET = b"\x00unset"
# Derived values kept at once (role x issuer reference pairs the issue path has seen): past
# this, the table starts over rather than grow with every name a caller tries.
MEMO_MAX = 256
_json = msgspec.json.Encoder()


class ConfigCache:
    def __init__(self, storage: BarrierView) -> None:
        self.storage = storage
        self.generation: bytes | None = _UNSET
        # Bumped on every drop: a read that started before a drop must not refill the cache.
        self.epoch = 0
        # Raw (decrypted) bytes, decoded on each use so callers can never alter a cached value.
        self.raw: dict[str, bytes | None] = {}
        self.lists: dict[str, list[str]] = {}
        # Values derived only from cached entries (memo), shared by every caller: read only.
        self.derived: dict[Hashable, Any] = {}
        self._generation_reads: ReadBatch[bytes | None] = ReadBatch(storage.get)

    def _drop(self) -> None:
        self.raw.clear()
        self.lists.clear()
        self.derived.clear()
        self.epoch += 1

    async def refresh(self) -> None:
        generation = await self._generation_reads.get(GENERATION)
        if generation != self.generation:
            self._drop()
            self.generation = generation

    async def get_obj(self, path: str, kind: type[T]) -> T | None:
        if path in self.raw:
            data = self.raw[path]
        else:
            epoch = self.epoch
            data = await self.storage.get(path)
            if epoch == self.epoch:
                self.raw[path] = data
        return None if data is None else msgspec.json.decode(data, type=kind)

    async def memo(self, key: Hashable, build: Callable[[], Awaitable[T]]) -> T:
        """What `build` derives from cached entries, built once until the next change (a build
        that fails is not kept). The value is shared by every caller: never alter it."""
        if key in self.derived:
            return self.derived[key]  # type: ignore[no-any-return]
        epoch = self.epoch
        value = await build()
        if epoch == self.epoch:
            if len(self.derived) >= MEMO_MAX:
                self.derived.clear()
            self.derived[key] = value
        return value

    async def list(self, prefix: str) -> list[str]:
        if prefix in self.lists:
            return list(self.lists[prefix])
        epoch = self.epoch
        names = await self.storage.list(prefix)
        if epoch == self.epoch:
            self.lists[prefix] = names
        return list(names)

    async def put(self, path: str, obj: Any) -> None:
        await self.storage.put(path, _json.encode(obj))
        await self._bump()

    async def delete(self, path: str) -> None:
        await self.storage.delete(path)
        await self._bump()

    async def _bump(self) -> None:
        generation = uuid.uuid4().hex.encode()
        await self.storage.put(GENERATION, generation)
        self._drop()
        self.generation = generation
