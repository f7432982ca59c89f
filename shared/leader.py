"""Leader election on one JetStream KV key, for singleton duties (snapshots, timers, GC).

The holder writes `{holder, ttl}` with CAS (`create`, then `update(last=rev)`) every ttl/3. A
challenger never compares clocks: it takes over only after it has itself watched the key's
revision stay unchanged for a full ttl (local monotonic time), again with CAS, so at most one
takeover wins. A holder that cannot renew for a ttl steps down on its own before anyone else
can take over, which keeps two leaders from overlapping (bar pauses longer than a ttl).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable

import msgspec
import nats.js.errors
import structlog
from nats.js.kv import KeyValue

log = structlog.get_logger("leader")

Callback = Callable[[], Awaitable[None] | None]


class _Lease(msgspec.Struct):
    holder: str
    ttl: float


_dec = msgspec.json.Decoder(_Lease)


class LeaderLease:
    def __init__(
        self,
        kv: KeyValue,
        name: str,
        holder_id: str,
        ttl: float = 10.0,
        *,
        on_elected: Callback | None = None,
        on_demoted: Callback | None = None,
    ) -> None:
        self.kv = kv
        self.name = name
        self.holder_id = holder_id
        self.ttl = ttl
        self.on_elected = on_elected
        self.on_demoted = on_demoted
        self._leader = False
        self._rev = 0  # revision of our own lease write, while leader
        self._renewed_at = 0.0
        # What a challenger saw: (revision, when it first saw it).
        self._seen: tuple[int, float] = (-1, 0.0)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False

    @property
    def is_leader(self) -> bool:
        # Past a ttl without renewal we may already have been replaced: stop acting at once.
        if self._leader and time.monotonic() - self._renewed_at > self.ttl:
            return False
        return self._leader

    async def start(self) -> None:
        await self._tick()
        self._task = asyncio.create_task(self._run())

    async def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; with `release` a leader deletes its lease so a peer takes over at
        once instead of after a ttl (`release=False` behaves like a crash)."""
        task, self._task = self._task, None
        if task is not None:
            # 3.11's wait_for can swallow a cancel racing a wake-up; the flag ends the loop too.
            self._stopping = True
            self._wake.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(task), 5)
        if self._leader and release:
            with contextlib.suppress(Exception):
                await self.kv.delete(self.name, last=self._rev)
        await self._set_leader(False)

    async def _run(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.ttl / 3)
            self._wake.clear()
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS down: keep trying, step down once the lease lapses
                log.warning("lease tick failed", name=self.name, error=str(exc))
                if self._leader and time.monotonic() - self._renewed_at > self.ttl:
                    await self._set_leader(False)

    def _value(self) -> bytes:
        return msgspec.json.encode(_Lease(self.holder_id, self.ttl))

    async def _tick(self) -> None:
        now = time.monotonic()
        if self._leader:
            if now - self._renewed_at > self.ttl:
                await self._set_leader(False)  # too late to renew safely; campaign again
            else:
                try:
                    self._rev = await self.kv.update(self.name, self._value(), last=self._rev)
                    self._renewed_at = now
                    return
                except nats.js.errors.KeyWrongLastSequenceError:
                    await self._set_leader(False)  # someone else holds it now
        try:
            entry = await self.kv.get(self.name)
        except nats.js.errors.NotFoundError:  # absent, or deleted by a holder that released it
            entry = None
        if entry is None or not entry.value:
            await self._try(lambda: self.kv.create(self.name, self._value()), now)
            return
        rev = entry.revision or 0
        lease = _dec.decode(entry.value)
        if lease.holder == self.holder_id:
            # Our own lease from before a restart: renew it straight away.
            await self._try(lambda: self.kv.update(self.name, self._value(), last=rev), now)
            return
        if self._seen[0] != rev:
            self._seen = (rev, now)
            return
        if now - self._seen[1] >= lease.ttl:
            log.info("lease expired, taking over", name=self.name, previous=lease.holder)
            await self._try(lambda: self.kv.update(self.name, self._value(), last=rev), now)

    async def _try(self, write: Callable[[], Awaitable[int]], now: float) -> None:
        try:
            self._rev = await write()
        except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.BadRequestError):
            return  # lost the race
        self._renewed_at = now
        await self._set_leader(True)

    async def _set_leader(self, value: bool) -> None:
        if value == self._leader:
            return
        self._leader = value
        log.info("elected" if value else "demoted", name=self.name, holder=self.holder_id)
        cb = self.on_elected if value else self.on_demoted
        if cb is not None:
            try:
                res = cb()
                if inspect.isawaitable(res):
                    await res
            except Exception:
                log.exception("leader callback failed", name=self.name)
