"""Blocking queries held open from a thread of the test: `count` scheduler queries on an index
the log never reaches, each waiting 5 minutes, until the context ends."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import aiohttp


class Held:
    def __init__(self, base: str, count: int) -> None:
        self.base = base
        self.count = count
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.answered: list[Any] = []
        self._task: asyncio.Task[None] | None = None

    async def _one(self, session: aiohttp.ClientSession) -> None:
        url = f"{self.base}/v1/jobs?index=999999999&wait=5m"
        try:
            async with session.get(url) as r:
                await r.read()
                self.answered.append(r.status)
        except aiohttp.ClientError as exc:
            self.answered.append(repr(exc))

    async def _all(self) -> None:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            connector=conn, timeout=aiohttp.ClientTimeout(total=None)
        ) as session:
            await asyncio.gather(*(self._one(session) for _ in range(self.count)))

    async def _start(self) -> None:
        self._task = asyncio.create_task(self._all())

    async def _stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def __enter__(self) -> Held:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
