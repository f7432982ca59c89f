"""Keeps a cluster's Merkle index current by tailing its own secrets stream, so `merkle_root`
always describes what storage holds (on a secondary too: it indexes what it has applied).

Lazy: nothing is read or hashed until something needs the index (a secondary attaching, a
status, a resync); until then every write would be hashed for nobody. The first need builds it
from the stream, as a start-up would."""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog
from nats.js import JetStreamContext

from services.replication.merkle import MerkleIndex
from services.replication.wal import WalReader

log = structlog.get_logger("replication.index")


class Indexer:
    def __init__(self, js: JetStreamContext, bucket: str) -> None:
        self.js = js
        self.bucket = bucket
        self.index = MerkleIndex()
        self._reader: WalReader | None = None
        self._task: asyncio.Task[None] | None = None
        self._advanced = asyncio.Condition()
        self._starting = asyncio.Lock()  # one tail, however many need it at once

    async def start(self) -> None:
        self._reader = WalReader(self.js, self.bucket)
        await self._reader.start(self.index.seq + 1)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None

    async def _run(self) -> None:
        assert self._reader is not None
        while True:
            try:
                batch = await self._reader.next_batch(1024, wait=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS reconnecting: the ordered consumer resumes
                log.warning("index tail failed", error=str(exc))
                await asyncio.sleep(0.5)
                continue
            for e in batch:
                if e.op:
                    self.index.delete(e.key)
                else:
                    self.index.put(e.key, e.value)
                self.index.seq = e.seq
            if batch:
                async with self._advanced:
                    self._advanced.notify_all()

    async def last_seq(self) -> int:
        """The stream's last index, or 0 when it holds nothing (e.g. right after a wipe)."""
        info = await self.js.stream_info(f"KV_{self.bucket}")
        return info.state.last_seq if info.state.messages else 0

    async def idle(self) -> None:
        """Stop indexing and forget the index, until something needs it again."""
        async with self._starting:
            await self.stop()
            self.index = MerkleIndex()

    async def caught_up(self, within: float = 30.0) -> int:
        """Wait until the index has seen everything the stream held when called (building it
        first if nothing needed it yet)."""
        async with self._starting:
            if self._task is None:
                await self.start()
        target = await self.last_seq()
        deadline = time.monotonic() + within
        async with self._advanced:
            while self.index.seq < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the Merkle index is not catching up with storage")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._advanced.wait(), min(left, 0.5))
        return self.index.seq

    async def rebuild(self) -> MerkleIndex:
        """Index storage from scratch (reindex, wipes); returns the index it replaced."""
        async with self._starting:
            await self.stop()
            old = self.index
            self.index = MerkleIndex()
            await self.start()
        await self.caught_up()
        return old
