"""The primary's side of the cluster channel: a TLS listener; per secondary, a session that
checks its credential, decides between resuming the WAL and a Merkle sync, and streams.

Deciding: a secondary that last streamed from this primary's WAL (same epoch) resumes after its
`last_remote_wal`: the KV stream keeps the latest entry of every key (delete markers included),
so every key changed since then is still in it. Anything else (a wiped or new secondary, a
demoted old primary, a promoted peer's former follower) compares Merkle bucket hashes; the
buckets that differ are re-sent from the stream up to a snapshot index S, the secondary drops
the keys of those buckets that were not re-sent, and streaming goes on after S.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from services.replication import merkle, wire
from services.replication.channel import server_context
from services.replication.wal import WalReader

if TYPE_CHECKING:
    from services.replication.service import ReplicationService

log = structlog.get_logger("replication.primary")

HEARTBEAT = 1.0  # seconds between heartbeats on an idle channel
HELLO_TIMEOUT = 10.0


@dataclass
class Session:
    secondary_id: str
    peer: str
    api_address: str = ""
    connected_at: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.time)
    last_ack: int = 0
    writer: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        if self.writer is not None:
            self.writer.close()


class PrimaryServer:
    def __init__(self, svc: ReplicationService) -> None:
        self.svc = svc
        self.sessions: dict[str, Session] = {}
        self._server: asyncio.Server | None = None
        self.address = ""  # host:port actually bound

    async def start(self, bind: str) -> str:
        from services.replication.channel import host_port

        host, port = host_port(bind)
        st = self.svc.state
        self._server = await asyncio.start_server(
            self._on_connection,
            host,
            port,
            ssl=server_context(st.tls_cert, st.tls_key),
            limit=2**20,
        )
        sock = self._server.sockets[0].getsockname()
        self.address = f"{sock[0]}:{sock[1]}"
        log.info("listening", address=self.address)
        return self.address

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for s in list(self.sessions.values()):
                s.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
        self.sessions.clear()

    def disconnect(self, secondary_id: str) -> None:
        s = self.sessions.pop(secondary_id, None)
        if s is not None:
            s.close()

    # ---- one connection -------------------------------------------------------------------
    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        peer_s = f"{peer[0]}:{peer[1]}" if peer else ""
        session: Session | None = None
        try:
            frame = await asyncio.wait_for(wire.recv(reader), HELLO_TIMEOUT)
            if not isinstance(frame, wire.Hello):
                return
            refusal = await self._admit(frame)
            if refusal is not None:
                await wire.send(writer, refusal)
                return
            if frame.probe:
                await wire.send(writer, self._welcome(sync=False, start=0))
                return
            self.disconnect(frame.secondary_id)  # a reconnect replaces the old session
            session = Session(frame.secondary_id, peer_s, api_address=frame.api_addr, writer=writer)
            self.sessions[frame.secondary_id] = session
            sender = asyncio.create_task(self._stream(session, frame, writer))
            acks = asyncio.create_task(self._read_acks(session, reader))
            session.tasks = [sender, acks]
            await asyncio.wait(session.tasks, return_when=asyncio.FIRST_COMPLETED)
        except (wire.ChannelClosed, TimeoutError, ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("replication session failed", peer=peer_s)
        finally:
            if session is not None:
                session.close()
                if self.sessions.get(session.secondary_id) is session:
                    del self.sessions[session.secondary_id]
            writer.close()

    async def _admit(self, hello: wire.Hello) -> wire.Reject | None:
        """Check the secondary's credential; bind a first connection to its node id."""
        st = self.svc.state
        rec = st.secondaries.get(hello.secondary_id)
        digest = hashlib.sha256(hello.secret).hexdigest()
        if rec is None or not hmac.compare_digest(digest, rec.secret_hash):
            return wire.Reject(
                code=403, reason="unknown or revoked secondary: it needs a new activation token"
            )
        if not rec.activated:
            if time.time() > rec.expires_at:
                return wire.Reject(code=400, reason="the activation token has expired")
            rec.activated, rec.node_id = True, hello.node_id
            rec.api_address = hello.api_addr
            await self.svc.save_state()
        elif not hmac.compare_digest(rec.node_id, hello.node_id):
            return wire.Reject(
                code=400, reason="this activation token was already used by another cluster"
            )
        if not hello.probe and hello.cluster_id != st.cluster_id:
            return wire.Reject(
                code=409,
                reason="the secondary belongs to another replication "
                "set (cluster id); it must be re-enabled",
            )
        return None

    def _welcome(self, *, sync: bool, start: int) -> wire.Welcome:
        st = self.svc.state
        return wire.Welcome(
            cluster_id=st.cluster_id,
            epoch=st.epoch,
            sync=sync,
            start=start,
            last_wal=self.svc.indexer.index.seq,
            api_addr=self.svc.settings.api_addr,
        )

    async def _read_acks(self, session: Session, reader: asyncio.StreamReader) -> None:
        while True:
            frame = await wire.recv(reader)
            if isinstance(frame, wire.Ack):
                session.last_ack = frame.last_remote_wal
                session.last_heartbeat = time.time()

    async def _stream(
        self, session: Session, hello: wire.Hello, writer: asyncio.StreamWriter
    ) -> None:
        svc = self.svc
        await svc.indexer.caught_up()
        index = svc.indexer.index
        snapshot, hashes = index.seq, index.bucket_hashes()
        st = svc.state
        if hello.epoch == st.epoch and 0 <= hello.last_remote_wal <= snapshot:
            sync_buckets: set[int] = set()
            start = hello.last_remote_wal
        else:
            sync_buckets = set(merkle.diff(hashes, hello.buckets))
            start = snapshot
        await wire.send(writer, self._welcome(sync=bool(sync_buckets), start=start))
        reader = WalReader(svc.js, svc.bucket)
        try:
            syncing = bool(sync_buckets)
            if syncing:
                await wire.send(writer, wire.SyncStart(buckets=sorted(sync_buckets), upto=snapshot))
                await reader.start(1)
            else:
                await reader.start(start + 1)
            last_beat, seen_any, began = 0.0, False, time.monotonic()
            while True:
                batch = await reader.next_batch(512, wait=HEARTBEAT / 2 if syncing else HEARTBEAT)
                seen_any = seen_any or bool(batch)
                if syncing:
                    head = [e for e in batch if e.seq <= snapshot]
                    tail = batch[len(head) :]
                    keep = [e for e in head if merkle.bucket_of(e.key) in sync_buckets]
                    if keep:
                        await wire.send(writer, wire.Batch(entries=keep))
                    quiet = not batch and (
                        seen_any or snapshot == 0 or time.monotonic() - began > 5
                    )
                    if tail or quiet or (head and head[-1].seq >= snapshot):
                        # Every retained entry up to the snapshot has been through here.
                        await wire.send(writer, wire.SyncEnd(upto=snapshot))
                        syncing = False
                    batch = tail
                if batch:
                    await wire.send(writer, wire.Batch(entries=batch))
                now = time.monotonic()
                if not batch and now - last_beat >= HEARTBEAT / 2:
                    await wire.send(
                        writer, wire.Heartbeat(last_wal=svc.indexer.index.seq, time=time.time())
                    )
                    last_beat = now
        finally:
            await reader.stop()


def new_secret() -> tuple[str, str]:
    """(base64 secret for the activation token, SHA-256 hex the primary keeps)."""
    import os

    raw = os.urandom(32)
    return base64.b64encode(raw).decode(), hashlib.sha256(raw).hexdigest()
