"""Group commit of one key's changes within a replica.

Writers of one key queue here instead of racing each other on the key record's CAS: one task per
busy key takes every change queued so far, applies them in order to the record and writes the
result with a single CAS. Each caller is answered only once that write is acknowledged (fsynced),
so every acknowledged change is as durable as if it had been written alone, and each put still
gets its own version number. The CAS stays for other replicas writing the same key: on a conflict
the whole batch is re-read and re-applied.
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter

from services.secrets.core.barrier import CasConflict
from services.secrets.engines.kv import records
from services.secrets.engines.kv.records import KeyRecord
from services.secrets.errors import SecretsError

# A CAS loop gives up after this many conflicts (only under pathological contention).
MAX_ATTEMPTS = 64
# Records this replica wrote last, kept (encoded) for this many keys if no larger than this:
# the next batch of such a key starts from them instead of from its callers' reads, which may
# predate the last write (a stale start costs a CAS conflict and a backoff).
RECENT_KEYS = 256
RECENT_MAX_BYTES = 32 * 1024

Got = tuple[KeyRecord, int] | None  # a key record and its revision, or None when absent


class Unset:
    """Not read yet (whereas None means: read, and absent)."""


UNSET = Unset()


@dataclass
class Plan:
    """What a change decided: the record to write (None: write nothing), the blobs that the
    write makes unreferenced, blobs created for this attempt only, and the handler's result."""

    record: KeyRecord | None
    result: Any = None
    drop: list[str] = field(default_factory=list)
    undo: list[str] = field(default_factory=list)


Change = Callable[[KeyRecord | None], Awaitable[Plan]]
Read = Callable[[str], Awaitable[Got]]
# Writes a record by CAS on `revision` (0: the key must not exist); returns the new revision.
Write = Callable[[str, bytes, int], Awaitable[int]]
Discard = Callable[[list[str]], Awaitable[None]]

# Record writes by outcome (a conflict is a CAS lost to another replica, then retried), and the
# changes they carried: changes / committed writes is the mean batch size.
RECORD_WRITES = Counter(
    "trellis_kv_record_writes_total", "KV v2 key record writes by CAS", ["outcome"]
)
CHANGES = Counter("trellis_kv_changes_total", "KV v2 changes carried by committed record writes")


def busy() -> SecretsError:
    return SecretsError(503, "the key is being changed by too many writers at once; retry")


async def backoff(attempt: int) -> None:
    # Jitter so two replicas that collided do not collide again in lockstep.
    await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))


@dataclass
class _Waiter:
    change: Change
    got: Got | Unset  # the record the caller already read, if any
    done: asyncio.Future[Any]


@dataclass
class _Key:
    waiting: list[_Waiter] = field(default_factory=list)


@dataclass
class _Applied:
    raw: bytes | None  # the record to write; None when no change wrote
    outcomes: list[tuple[_Waiter, Plan | Exception]]

    def written(self) -> int:
        return sum(isinstance(r, Plan) and r.record is not None for _, r in self.outcomes)

    def undo(self) -> list[str]:
        return [b for _, r in self.outcomes if isinstance(r, Plan) for b in r.undo]

    def unreferenced(self) -> list[str]:
        """Blobs to delete once the write is acknowledged: those the written changes dropped,
        and those created by changes that wrote nothing."""
        out: list[str] = []
        for _, r in self.outcomes:
            if isinstance(r, Plan):
                out += r.drop if r.record is not None else r.undo
        return out


def _newest(candidates: list[Got | Unset]) -> Got | Unset:
    known = [g for g in candidates if not isinstance(g, Unset)]
    return max(known, key=lambda g: 0 if g is None else g[1]) if known else UNSET


async def _apply(record: KeyRecord | None, batch: list[_Waiter]) -> _Applied:
    """Apply the batch's changes in order. A change that fails or writes nothing leaves the
    record as it found it (restored from the last encoding), so the next one sees only what
    the successful changes did."""
    saved = None if record is None else records.encode(record)
    raw = None
    outcomes: list[tuple[_Waiter, Plan | Exception]] = []
    for w in batch:
        try:
            plan = await w.change(record)
        except Exception as exc:  # the change's own answer (400, 404...), for its caller only
            outcomes.append((w, exc))
            record = None if saved is None else records.decode_key(saved)
            continue
        outcomes.append((w, plan))
        if plan.record is None:
            record = None if saved is None else records.decode_key(saved)
        else:
            record = plan.record
            saved = raw = records.encode(record)
    return _Applied(raw, outcomes)


def _answer(w: _Waiter, outcome: Any, failed: bool) -> None:
    if w.done.done():  # the caller went away; its change stands if it was written
        return
    if failed:
        w.done.set_exception(outcome)
    else:
        w.done.set_result(outcome)


class GroupCommit:
    def __init__(self, read: Read, write: Write, discard: Discard) -> None:
        self._read = read
        self._write = write
        self._discard = discard
        self._keys: dict[str, _Key] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._recent: OrderedDict[str, tuple[bytes, int]] = OrderedDict()

    async def submit(self, path: str, change: Change, got: Got | Unset = UNSET) -> Any:
        """Apply `change` to the key's record with the changes queued with it and answer its
        result once the record is written. `got` is a record the caller already read
        (possibly stale: the CAS catches that)."""
        waiter = _Waiter(change, got, asyncio.get_running_loop().create_future())
        key = self._keys.get(path)
        if key is None:
            key = self._keys[path] = _Key()
            # A task of its own, so a caller that goes away does not strand the others.
            task = asyncio.create_task(self._drain(path, key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        key.waiting.append(waiter)
        return await waiter.done

    async def _drain(self, path: str, key: _Key) -> None:
        batch: list[_Waiter] = []
        try:
            while key.waiting:
                batch = [w for w in key.waiting if not w.done.done()]
                key.waiting = []
                if not batch:
                    continue
                try:
                    await self._commit(path, batch)
                except Exception as exc:
                    self._recent.pop(path, None)
                    for w in batch:
                        _answer(w, exc, failed=True)
        finally:
            del self._keys[path]
            for w in batch + key.waiting:  # unanswered only when cancelled (shutdown)
                _answer(w, SecretsError(503, "interrupted before the write was confirmed"), True)

    def forget(self, path: str) -> None:
        """Drop the remembered record of a key changed outside the queue (deleted)."""
        self._recent.pop(path, None)

    def _remember(self, path: str, raw: bytes, revision: int) -> None:
        if len(raw) > RECENT_MAX_BYTES:
            return
        self._recent[path] = (raw, revision)
        if len(self._recent) > RECENT_KEYS:
            self._recent.popitem(last=False)

    async def _commit(self, path: str, batch: list[_Waiter]) -> None:
        recent = self._recent.pop(path, None)
        written: Got | Unset = UNSET
        if recent is not None:
            written = (records.decode_key(recent[0]), recent[1])
        got = _newest([written, *(w.got for w in batch)])
        for attempt in range(MAX_ATTEMPTS):
            fresh = isinstance(got, Unset)
            if isinstance(got, Unset):
                got = await self._read(path)
            record, revision = got if got is not None else (None, 0)
            applied = await _apply(record, batch)
            if applied.raw is None and not fresh:
                # No write will prove the record current: answer from a fresh read instead.
                await self._discard(applied.undo())
                got = UNSET
                continue
            if applied.raw is not None:
                try:
                    # Any error but a conflict leaves the outcome unknown: it reaches the callers
                    # and this attempt's blobs stay (garbage at worst, never a dangling name).
                    new_revision = await self._write(path, applied.raw, revision)
                except CasConflict:
                    RECORD_WRITES.labels("conflict").inc()
                    await self._discard(applied.undo())
                    got = UNSET
                    await backoff(attempt)
                    continue
                RECORD_WRITES.labels("committed").inc()
                CHANGES.inc(applied.written())
                self._remember(path, applied.raw, new_revision)
            await self._discard(applied.unreferenced())
            for w, outcome in applied.outcomes:
                if isinstance(outcome, Plan):
                    _answer(w, outcome.result, failed=False)
                else:
                    _answer(w, outcome, failed=True)
            return
        for w in batch:
            _answer(w, busy(), failed=True)
