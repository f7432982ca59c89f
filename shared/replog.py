"""The replicated log: JetStream as the Raft log, an in-memory state machine per replica.

Every write is a `LogEntry` appended to one stream; every replica applies the stream in order to
its own `StateMachine`, so all replicas hold the same state at the same index. The writer stamps
time and id into the entry, which keeps `apply` deterministic: validation done there (unique
names, references that must exist) gives every replica the same verdict without locks. The
stream sequence is the index. Snapshots (written by the leader) let a new replica skip replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    ConsumerConfig,
    DeliverPolicy,
    ObjectStoreConfig,
    StorageType,
    StreamConfig,
)
from nats.js.object_store import ObjectStore

from shared.waiters import IndexWaiters

log = structlog.get_logger("replog")

SNAPSHOT_OBJECT = "latest"
# The follower's consumer lives on one nats-server; if that server dies while our connection
# is to another, only missed idle heartbeats tell (two of them): seconds of stalled appends at
# 1 s, not the 10-20 s of nats-py's default 5 s.
IDLE_HEARTBEAT_SECONDS = 1.0


class LogEntry(msgspec.Struct, kw_only=True):
    """One write. `time` and `id` come from the writer so that every replica applies the same
    thing; `id` also lets the writer find its own entry's result and JetStream deduplicate."""

    type: str
    payload: bytes
    time: float
    id: str


class ApplyError(Exception):
    """A validation failure found while applying: state is unchanged, the writer gets it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StateMachine(Protocol):
    def apply(self, index: int, entry: LogEntry) -> Any: ...
    def snapshot(self) -> bytes: ...
    def restore(self, data: bytes, index: int) -> None: ...


class _Snapshot(msgspec.Struct):
    index: int
    data: bytes


_entry_dec = msgspec.msgpack.Decoder(LogEntry)
_snap_dec = msgspec.msgpack.Decoder(_Snapshot)
_enc = msgspec.msgpack.Encoder()


class ReplicatedLog:
    """Append, apply in order, wait for your own write; see the module docstring."""

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        machine: StateMachine,
        *,
        replicas: int = 1,
        snapshot_every: int = 1000,
        should_snapshot: Callable[[], bool] | None = None,
        timeout: float = 10.0,
    ) -> None:
        """`should_snapshot` says whether this replica writes snapshots (the leader lease's
        `is_leader`); without it every replica may write (harmless, but wasteful)."""
        self.js = js
        self.stream = stream
        self.subject = f"{stream}.entries"
        self.machine = machine
        self.replicas = replicas
        self.snapshot_every = snapshot_every
        self.should_snapshot = should_snapshot
        self.timeout = timeout
        self._applied = 0
        self._last_snapshot = 0
        self._pending: dict[str, asyncio.Future[tuple[int, Any]]] = {}
        # Futures woken once applied >= their index (consistent reads, blocking queries).
        self._waiters = IndexWaiters()
        # Barriers waiting for the next lookup of the stream's last sequence (see barrier()).
        self._lookups: list[asyncio.Future[int]] = []
        self._lookup_task: asyncio.Task[None] | None = None
        self._sub: Any = None
        self._store: ObjectStore | None = None
        self._snap_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def applied_index(self) -> int:
        return self._applied

    async def start(self) -> None:
        await self._ensure_stream()
        self._store = await self._ensure_store()
        await self._restore_snapshot()
        # One ordered push consumer does both the replay and the follow: it starts right after
        # the snapshot and keeps delivering in order (recreating itself on a gap).
        cfg = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self._applied + 1
        )
        self._sub = await self.js.subscribe(
            self.subject,
            cb=self._on_msg,
            ordered_consumer=True,
            config=cfg,
            idle_heartbeat=IDLE_HEARTBEAT_SECONDS,
        )
        # Ready means caught up with what existed when we started.
        await self.barrier()
        log.info("replicated log started", stream=self.stream, index=self._applied)

    async def stop(self) -> None:
        self._stopping = True
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        if self._snap_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._snap_task, 5)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ApplyError(503, "the replicated log is stopping"))
        self._pending.clear()
        self._waiters.wake_all()

    async def _ensure_stream(self) -> None:
        cfg = StreamConfig(
            name=self.stream,
            subjects=[self.subject],
            storage=StorageType.FILE,
            num_replicas=self.replicas,
            duplicate_window=120.0,
        )
        try:
            await self.js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            with contextlib.suppress(nats.js.errors.BadRequestError):  # a peer won the race
                await self.js.add_stream(cfg)

    async def _ensure_store(self) -> ObjectStore:
        bucket = f"{self.stream}_snapshots"
        try:
            return await self.js.object_store(bucket)
        except nats.js.errors.NotFoundError:
            try:
                return await self.js.create_object_store(
                    bucket,
                    config=ObjectStoreConfig(storage=StorageType.FILE, replicas=self.replicas),
                )
            except nats.js.errors.BadRequestError:
                return await self.js.object_store(bucket)

    async def _restore_snapshot(self) -> None:
        assert self._store is not None
        try:
            res = await self._store.get(SNAPSHOT_OBJECT)
        except nats.js.errors.ObjectNotFoundError:
            return
        snap = _snap_dec.decode(res.data or b"")
        last = (await self.js.stream_info(self.stream)).state.last_seq
        if snap.index > last:
            # A snapshot from a stream that was since recreated: replaying is the only truth.
            log.warning("ignoring snapshot ahead of the stream", index=snap.index, last=last)
            return
        self.machine.restore(snap.data, snap.index)
        self._applied = self._last_snapshot = snap.index
        self._waiters.notify(snap.index)
        log.info("restored snapshot", stream=self.stream, index=snap.index)

    async def _on_msg(self, msg: Msg) -> None:
        index = msg.metadata.sequence.stream
        if index <= self._applied:
            return  # already covered by the snapshot or a redelivery
        result: Any = None
        error: BaseException | None = None
        entry: LogEntry | None = None
        try:
            entry = _entry_dec.decode(msg.data)
            result = self.machine.apply(index, entry)
        except ApplyError as exc:
            error = exc
        except msgspec.DecodeError:
            log.error("undecodable log entry skipped", stream=self.stream, index=index)
            error = ApplyError(500, "undecodable log entry")
        except Exception:
            # A bug in apply: every replica hits it the same way, so skipping keeps them equal.
            log.exception("apply failed", stream=self.stream, index=index)
            error = ApplyError(500, "internal error while applying")
        self._applied = index
        if entry is not None:
            fut = self._pending.pop(entry.id, None)
            if fut is not None and not fut.done():
                if error is not None:
                    fut.set_exception(error)
                else:
                    fut.set_result((index, result))
        self._waiters.notify(index)
        if index - self._last_snapshot >= self.snapshot_every:
            self._maybe_snapshot(index)

    def _maybe_snapshot(self, index: int) -> None:
        if self.should_snapshot is not None and not self.should_snapshot():
            return
        if self._snap_task is not None and not self._snap_task.done():
            return
        self._last_snapshot = index
        # Taken synchronously, right after applying `index`: the bytes match that index exactly.
        data = _enc.encode(_Snapshot(index, self.machine.snapshot()))
        self._snap_task = asyncio.create_task(self._write_snapshot(index, data))

    async def _write_snapshot(self, index: int, data: bytes) -> None:
        assert self._store is not None
        try:
            await self._store.put(SNAPSHOT_OBJECT, data)
            log.info("snapshot written", stream=self.stream, index=index, bytes=len(data))
        except Exception:
            log.exception("snapshot write failed", stream=self.stream)
        else:
            # Entries applied while this write ran skipped their turn; a quiet log gets no
            # further apply to retry, so catch up once this task is done.
            if self._applied - self._last_snapshot >= self.snapshot_every:
                asyncio.get_running_loop().call_soon(self._catch_up_snapshot)

    def _catch_up_snapshot(self) -> None:
        if not self._stopping and self._applied - self._last_snapshot >= self.snapshot_every:
            self._maybe_snapshot(self._applied)

    async def snapshot_now(self) -> int:
        """Write a snapshot of the current state at once (operators, tests); returns its index."""
        index = self._applied
        data = _enc.encode(_Snapshot(index, self.machine.snapshot()))
        self._last_snapshot = index
        await self._write_snapshot(index, data)
        return index

    async def append(self, type: str, payload: bytes) -> tuple[int, Any]:
        """Append an entry and wait until this replica applied it: (index, apply's result), or
        the ApplyError apply raised."""
        entry = LogEntry(type=type, payload=payload, time=time.time(), id=uuid.uuid4().hex)
        fut: asyncio.Future[tuple[int, Any]] = asyncio.get_running_loop().create_future()
        # Registered before publishing: our own consumer may apply it before publish returns.
        self._pending[entry.id] = fut
        try:
            await self.js.publish(
                self.subject,
                _enc.encode(entry),
                stream=self.stream,
                timeout=self.timeout,
                headers={"Nats-Msg-Id": entry.id},
            )
            return await asyncio.wait_for(fut, self.timeout)
        except (TimeoutError, nats.errors.TimeoutError):
            # It may still be applied later: the writer cannot tell, so say so.
            raise ApplyError(504, "the write was not confirmed in time") from None
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):
            raise ApplyError(503, "the log stream is unavailable") from None
        finally:
            self._pending.pop(entry.id, None)

    async def _wait_applied(self, index: int, timeout: float | None) -> None:
        if self._applied >= index:
            return
        if not await self._waiters.wait(index, timeout):
            raise TimeoutError

    async def barrier(self) -> int:
        """Wait until this replica applied everything the stream held when called (a consistent
        read); returns the applied index."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._lookups.append(fut)
        if self._lookup_task is None:
            self._lookup_task = asyncio.create_task(self._look_up_last())
        last = await fut
        try:
            await self._wait_applied(last, self.timeout)
        except TimeoutError:
            raise ApplyError(504, "the replica did not catch up in time") from None
        return self._applied

    async def _look_up_last(self) -> None:
        """The stream's last sequence for every barrier waiting, one lookup per round: a caller
        joins the next round, which starts after it arrived (so it sees every write acknowledged
        before its read), and a burst of reads costs a few lookups instead of one each."""
        batch: list[asyncio.Future[int]] = []
        try:
            while self._lookups:
                batch, self._lookups = self._lookups, []
                try:
                    last = (await self.js.stream_info(self.stream)).state.last_seq
                except Exception as exc:
                    if not isinstance(
                        exc, nats.errors.NoRespondersError | nats.errors.TimeoutError
                    ):
                        log.warning("stream lookup failed", stream=self.stream, error=str(exc))
                    _fail(batch)
                    continue
                for f in batch:
                    if not f.done():
                        f.set_result(last)
        finally:
            self._lookup_task = None
            # Cancelled mid-lookup (stopping): nobody may wait for a round that never comes.
            _fail(batch + self._lookups)
            self._lookups = []

    def park(self, after: int, timeout: float) -> asyncio.Future[bool]:
        """A future (not a task) for a blocking query: True once the applied index is greater
        than `after`, False when `timeout` runs out first. See shared/waiters.py."""
        return self._waiters.wait(after + 1, timeout)

    # The timeout is part of the shared API (blocking queries carry a wait time).
    async def wait_for(self, index: int, timeout: float) -> int:
        """Blocking query: return once the applied index is greater than `index`, or at
        `timeout`; returns the applied index either way."""
        with contextlib.suppress(TimeoutError):
            await self._wait_applied(index + 1, timeout)
        return self._applied


def _fail(waiting: list[asyncio.Future[int]]) -> None:
    for f in waiting:
        if not f.done():
            f.set_exception(ApplyError(503, "the log stream is unavailable"))
