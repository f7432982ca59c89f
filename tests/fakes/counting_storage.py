"""In-memory storage that counts writes: a test's proof that a read path writes nothing."""

from __future__ import annotations

from shared.storage import MemoryStorage


class CountingStorage(MemoryStorage):
    writes = 0

    async def create(self, key: str, value: bytes) -> int:
        self.writes += 1
        return await super().create(key, value)

    async def put(self, key: str, value: bytes) -> int:
        self.writes += 1
        return await super().put(key, value)

    async def update(self, key: str, value: bytes, revision: int) -> int:
        self.writes += 1
        return await super().update(key, value, revision)
