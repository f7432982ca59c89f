"""The secondary's side of the cluster channel: connect to the primary (pinned TLS), present the
channel secret, then apply what arrives to local storage: Merkle-sync buckets first when told,
then the WAL stream. Reconnects with backoff for as long as it has a primary."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from typing import TYPE_CHECKING

import structlog

from services.replication import wire
from services.replication.apply import Applier
from services.replication.channel import PinMismatch, open_channel

if TYPE_CHECKING:
    from services.replication.service import ReplicationService
    from services.replication.state import PrimaryLink

log = structlog.get_logger("replication.secondary")

IDLE = "idle"
CONNECTING = "connecting"
MERKLE_DIFF = "merkle-diff"
MERKLE_SYNC = "merkle-sync"
STREAM_WALS = "stream-wals"

STALE_AFTER = 5.0  # seconds without a frame before the primary counts as disconnected


class Rejected(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class SecondaryClient:
    def __init__(self, svc: ReplicationService) -> None:
        self.svc = svc
        self.applier = Applier(svc.storage.kv)
        self.state = IDLE
        self.connected = False
        self.last_heartbeat = 0.0
        self.primary_api_addr = ""
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._force_diff = False

    @property
    def live(self) -> bool:
        return self.connected and time.time() - self.last_heartbeat < STALE_AFTER

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._drop()
        self.state = IDLE

    def resync(self) -> None:
        """Drop the connection; the loop reconnects and compares Merkle trees again."""
        self._force_diff = True
        self._drop()

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.connected = False

    async def _run(self) -> None:
        delay = 0.2
        while True:
            link = self.svc.state.primary
            if link is None:
                self.state = IDLE
                return
            self.state = CONNECTING
            try:
                await self._session(link)
                delay = 0.2
            except asyncio.CancelledError:
                raise
            except Rejected as exc:
                self.last_error = str(exc)
                log.warning("primary refused the connection", reason=str(exc))
                delay = 5.0
            except (wire.ChannelClosed, PinMismatch, OSError, TimeoutError) as exc:
                self.last_error = str(exc) or type(exc).__name__
            except Exception:
                log.exception("replication from the primary failed")
            finally:
                self._drop()
            self.state = CONNECTING
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def hello(self, link: PrimaryLink, *, probe: bool) -> wire.Hello:
        svc = self.svc
        return wire.Hello(
            secondary_id=link.secondary_id,
            secret=base64.b64decode(link.secret),
            node_id=svc.state.node_id,
            cluster_id=svc.state.cluster_id,
            probe=probe,
            epoch="" if self._force_diff else svc.progress.remote_epoch,
            last_remote_wal=svc.progress.last_remote_wal,
            buckets=[] if probe else svc.indexer.index.bucket_hashes(),
            api_addr=svc.settings.api_addr,
        )

    async def probe(self, link: PrimaryLink) -> tuple[wire.Welcome, bytes]:
        """Check (and activate) the credential without changing anything here."""
        reader, writer, der = await open_channel(link.cluster_addr, link.fingerprint)
        try:
            await wire.send(writer, self.hello(link, probe=True))
            frame = await asyncio.wait_for(wire.recv(reader), 10)
        finally:
            writer.close()
        if isinstance(frame, wire.Reject):
            raise Rejected(frame.code, frame.reason)
        if not isinstance(frame, wire.Welcome):
            raise wire.ChannelClosed("unexpected answer from the primary")
        return frame, der

    async def _session(self, link: PrimaryLink) -> None:
        svc = self.svc
        reader, writer, _ = await open_channel(link.cluster_addr, link.fingerprint)
        self._writer = writer
        self.state = MERKLE_DIFF
        await svc.indexer.caught_up()
        await wire.send(writer, self.hello(link, probe=False))
        frame = await asyncio.wait_for(wire.recv(reader), 30)
        if isinstance(frame, wire.Reject):
            raise Rejected(frame.code, frame.reason)
        if not isinstance(frame, wire.Welcome):
            raise wire.ChannelClosed("unexpected answer from the primary")
        welcome = frame
        self._force_diff = False
        self.connected, self.last_heartbeat = True, time.time()
        self.primary_api_addr = welcome.api_addr or link.api_addr
        stale: set[str] | None = None
        if welcome.sync:
            self.state = MERKLE_SYNC
        else:
            await svc.set_progress(welcome.epoch, welcome.start)
            await svc.mark_synced()
            self.state = STREAM_WALS
        while True:
            frame = await wire.recv(reader)
            self.last_heartbeat = time.time()
            if isinstance(frame, wire.Batch):
                if stale is not None:
                    stale.difference_update(e.key for e in frame.entries)
                await self.applier.apply(frame.entries)
                if self.state == STREAM_WALS:
                    await svc.set_progress(welcome.epoch, frame.entries[-1].seq)
                await wire.send(writer, wire.Ack(last_remote_wal=svc.progress.last_remote_wal))
            elif isinstance(frame, wire.SyncStart):
                await svc.indexer.caught_up()
                stale = svc.indexer.index.keys_in(frame.buckets)
            elif isinstance(frame, wire.SyncEnd):
                # Keys of the re-sent buckets that the primary does not have.
                await self.applier.remove(sorted(stale or ()))
                stale = None
                await svc.set_progress(welcome.epoch, frame.upto)
                await svc.mark_synced()
                self.state = STREAM_WALS
            elif isinstance(frame, wire.Heartbeat):
                await wire.send(writer, wire.Ack(last_remote_wal=svc.progress.last_remote_wal))
            elif isinstance(frame, wire.Reject):
                raise Rejected(frame.code, frame.reason)
