"""Reads of one key asked in the same turn of the event loop share one storage get.

The get is issued only after every read that shares it was asked, so each read still sees every
write acknowledged before it was asked: what a get of its own would see. Under load, the
requests that reach a replica together (one socket read, one batch of envelopes) cost one round
trip to storage instead of one each; a lone read waits one loop turn, unless `peek` answers it
at once (storage's exact read cache, shared/storage_cache.py: what it holds reflects every
write acknowledged before the read was asked, so no turn needs to pass).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, cast

from shared.storage_cache import MISS

T = TypeVar("T")


class _LeaderGone(Exception):
    """The read that was to issue the get was cancelled: each joiner reads for itself."""


class ReadBatch(Generic[T]):
    def __init__(
        self,
        fetch: Callable[[str], Awaitable[T]],
        peek: Callable[[str], T | object] | None = None,
    ) -> None:
        self._fetch = fetch
        self._peek = peek  # the answer without a wait, or MISS
        # Keys whose get is not issued yet, with the futures of the reads that joined it.
        self._open: dict[str, list[asyncio.Future[T]]] = {}

    async def get(self, key: str) -> T:
        if self._peek is not None:
            known = self._peek(key)
            if known is not MISS:
                return cast(T, known)
        joined = self._open.get(key)
        if joined is not None:
            future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
            joined.append(future)
            try:
                return await future
            except _LeaderGone:
                return await self._fetch(key)
        joined = self._open[key] = []
        try:
            try:
                await asyncio.sleep(0)  # the other reads of this turn join here
            finally:
                del self._open[key]
            value = await self._fetch(key)
        except asyncio.CancelledError:
            _settle(joined, error=_LeaderGone())
            raise
        except Exception as exc:
            _settle(joined, error=exc)
            raise
        _settle(joined, value)
        return value


def _settle(
    futures: list[asyncio.Future[Any]], value: Any = None, error: BaseException | None = None
) -> None:
    for f in futures:
        if f.done():
            continue  # its reader was cancelled
        if error is None:
            f.set_result(value)
        else:
            f.set_exception(error)
