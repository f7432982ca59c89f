"""Writing replicated entries into local storage: same keys, same ciphertext, same operation.

Within a batch only the last entry of each key matters, so a batch is coalesced by key and the
keys are written concurrently (their order does not matter once each appears once)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import nats.js.errors
from nats.js.kv import KeyValue

from services.replication.wire import WalEntry

CONCURRENCY = 64


class Applier:
    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv
        self.applied = 0

    async def _one(self, e: WalEntry, gate: asyncio.Semaphore) -> None:
        async with gate:
            if e.op == "PURGE":
                await self.kv.purge(e.key)
            elif e.op:
                with contextlib.suppress(nats.js.errors.KeyNotFoundError):
                    await self.kv.delete(e.key)
            else:
                await self.kv.put(e.key, e.value)

    async def apply(self, entries: Sequence[WalEntry]) -> None:
        last: dict[str, WalEntry] = {}
        for e in entries:
            last[e.key] = e
        gate = asyncio.Semaphore(CONCURRENCY)
        await asyncio.gather(*(self._one(e, gate) for e in last.values()))
        self.applied += len(last)

    async def remove(self, keys: Sequence[str]) -> None:
        gate = asyncio.Semaphore(CONCURRENCY)
        await asyncio.gather(*(self._one(WalEntry(0, k, b"", "PURGE"), gate) for k in keys))
