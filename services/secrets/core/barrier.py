"""The barrier: every value is encrypted with the keyring before it reaches storage, and nothing
can be read or written while sealed. Keys (paths) stay visible, as in Vault; anything secret in a
path (token ids, OTPs) is HMAC'd by its owner before it becomes a key."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from services.secrets.errors import sealed
from services.secrets.keyring import Keyring, UnknownTerm
from shared.storage import CasConflict, Storage
from shared.storage_cache import MISS

__all__ = ["Barrier", "BarrierView", "CasConflict", "children"]

T = TypeVar("T")
_json = msgspec.json.Encoder()

# Bounds of a `get_decoded` memo: what a read path may keep decoded, per memo.
MEMO_ENTRIES_MAX = 512
MEMO_VALUE_MAX = 16 * 1024


def _folder(prefix: str) -> str:
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def children(keys: list[str], prefix: str) -> list[str]:
    """Vault's LIST: the immediate children of `prefix`, folders with a trailing slash."""
    out: set[str] = set()
    for key in keys:
        rel = key[len(prefix) :]
        if not rel:
            continue
        head, sep, _ = rel.partition("/")
        out.add(head + "/" if sep else head)
    return sorted(out)


class Barrier:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.keyring: Keyring | None = None
        # Called when a value uses a term this replica lacks: another replica rotated and its
        # invalidation has not arrived yet (services/secrets/core/rotation.py).
        self.on_unknown_term: Callable[[], Awaitable[None]] | None = None

    @property
    def sealed(self) -> bool:
        return self.keyring is None

    def _ring(self) -> Keyring:
        if self.keyring is None:
            raise sealed()
        return self.keyring

    def unseal(self, keyring: Keyring) -> None:
        self.keyring = keyring

    def seal(self) -> None:
        self.keyring = None

    async def _decrypt(self, path: str, blob: bytes) -> bytes:
        try:
            return self._ring().decrypt(path, blob)
        except UnknownTerm:
            if self.on_unknown_term is None:
                raise
            await self.on_unknown_term()
            return self._ring().decrypt(path, blob)

    async def decrypt(self, path: str, blob: bytes) -> bytes:
        """A value of `path` that came from storage some other way (a watch), in the clear."""
        self._ring()
        return await self._decrypt(path, blob)

    async def get(self, path: str) -> bytes | None:
        self._ring()
        entry = await self.storage.get(path)
        return None if entry is None else await self._decrypt(path, entry.value)

    async def get_entry(self, path: str) -> tuple[bytes, int] | None:
        self._ring()
        entry = await self.storage.get(path)
        return None if entry is None else (await self._decrypt(path, entry.value), entry.revision)

    async def get_decoded(
        self, path: str, decode: Callable[[bytes], T], memo: dict[str, tuple[bytes, T]]
    ) -> T | None:
        """`decode` of the value at `path`, decrypted and decoded once per stored value: `memo`
        keeps the last one seen at each path with its ciphertext, which names it exactly (a
        value never changes in place and every write draws a fresh nonce). The caller must not
        change what it gets: later reads of the same value share it."""
        self._ring()
        entry = await self.storage.get(path)
        if entry is None:
            memo.pop(path, None)
            return None
        hit = memo.get(path)
        if hit is not None and hit[0] == entry.value:
            return hit[1]
        value = decode(await self._decrypt(path, entry.value))
        if len(entry.value) <= MEMO_VALUE_MAX:
            if len(memo) >= MEMO_ENTRIES_MAX:
                memo.clear()
            memo[path] = (entry.value, value)
        return value

    def peek_decoded(self, path: str, memo: dict[str, tuple[bytes, T]]) -> T | object | None:
        """`get_decoded`'s answer when storage's cache and `memo` give it without a wait (a
        value decoded before, or an absent key); MISS otherwise, and while sealed."""
        if self.keyring is None:
            return MISS
        entry = self.storage.peek(path)
        if entry is None or entry is MISS:
            return entry
        hit = memo.get(path)
        if hit is not None and hit[0] == entry.value:  # type: ignore[union-attr]
            return hit[1]
        return MISS  # decrypting may need a new key term: the waiting path's job

    async def put(self, path: str, value: bytes) -> int:
        return await self.storage.put(path, self._ring().encrypt(path, value))

    async def create(self, path: str, value: bytes) -> int:
        return await self.storage.create(path, self._ring().encrypt(path, value))

    async def update(self, path: str, value: bytes, revision: int) -> int:
        return await self.storage.update(path, self._ring().encrypt(path, value), revision)

    async def delete(self, path: str, revision: int | None = None) -> None:
        """Delete; with `revision`, only if the entry is still at that revision (CasConflict)."""
        self._ring()
        await self.storage.delete(path, revision)

    async def list(self, prefix: str) -> list[str]:
        """Immediate children of the folder `prefix` ("a/b" and "a/b/" are the same folder)."""
        self._ring()
        prefix = _folder(prefix)
        return children(await self.storage.list(prefix), prefix)

    async def list_all(self, prefix: str) -> list[str]:
        """Every key below the folder `prefix`, relative to it."""
        self._ring()
        prefix = _folder(prefix)
        return [k[len(prefix) :] for k in await self.storage.list(prefix)]

    def view(self, prefix: str) -> BarrierView:
        return BarrierView(self, prefix)


class BarrierView:
    """The barrier seen from below a prefix: each mount gets its own."""

    def __init__(self, barrier: Barrier, prefix: str) -> None:
        self.barrier = barrier
        self.prefix = prefix

    def sub(self, prefix: str) -> BarrierView:
        return BarrierView(self.barrier, self.prefix + prefix)

    async def get(self, path: str) -> bytes | None:
        return await self.barrier.get(self.prefix + path)

    async def get_entry(self, path: str) -> tuple[bytes, int] | None:
        return await self.barrier.get_entry(self.prefix + path)

    async def get_decoded(
        self, path: str, decode: Callable[[bytes], T], memo: dict[str, tuple[bytes, T]]
    ) -> T | None:
        return await self.barrier.get_decoded(self.prefix + path, decode, memo)

    def peek_decoded(self, path: str, memo: dict[str, tuple[bytes, T]]) -> T | object | None:
        return self.barrier.peek_decoded(self.prefix + path, memo)

    async def put(self, path: str, value: bytes) -> int:
        return await self.barrier.put(self.prefix + path, value)

    async def create(self, path: str, value: bytes) -> int:
        return await self.barrier.create(self.prefix + path, value)

    async def update(self, path: str, value: bytes, revision: int) -> int:
        return await self.barrier.update(self.prefix + path, value, revision)

    async def delete(self, path: str, revision: int | None = None) -> None:
        await self.barrier.delete(self.prefix + path, revision)

    async def list(self, prefix: str = "") -> list[str]:
        return await self.barrier.list(self.prefix + prefix)

    async def list_all(self, prefix: str = "") -> list[str]:
        return await self.barrier.list_all(self.prefix + prefix)

    async def get_obj(self, path: str, kind: type[T]) -> T | None:
        raw = await self.get(path)
        return None if raw is None else msgspec.json.decode(raw, type=kind)

    async def get_obj_entry(self, path: str, kind: type[T]) -> tuple[T, int] | None:
        got = await self.get_entry(path)
        return None if got is None else (msgspec.json.decode(got[0], type=kind), got[1])

    async def put_obj(self, path: str, obj: Any) -> int:
        return await self.put(path, _json.encode(obj))

    async def delete_all(self) -> None:
        for rel in await self.list_all():
            await self.delete(rel)
