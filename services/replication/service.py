"""The replication service process: the DR state machine, the cluster channel (primary server or
secondary client), the Merkle index of local storage, and operation-token generation.

One active process per cluster: commands arrive over the bus from the secrets service's
`sys/replication/dr/*` paths, already authenticated there (ACL and sudo); DR operation tokens
are checked here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import uuid
from typing import Any

import msgspec
import structlog

from services.replication import commands as c
from services.replication import promote_key
from services.replication.activation import (
    SEALED_PREFIX,
    Activation,
    bad_token,
    jwt_claims,
    new_keypair,
    open_sealed,
    seal_for,
    sign_jwt,
    unwrap,
    verify_jwt,
)
from services.replication.channel import PinMismatch, fingerprint, new_identity
from services.replication.indexer import Indexer
from services.replication.modes import DISABLED, PRIMARY, SECONDARY, Move, next_mode, require
from services.replication.optoken import OperationTokens, is_valid, token_hash
from services.replication.primary import PrimaryServer, new_secret
from services.replication.secondary import STALE_AFTER, Rejected, SecondaryClient
from services.replication.state import (
    DrState,
    PrimaryLink,
    Progress,
    SecondaryRecord,
    StateStore,
    bucket_for,
)
from services.replication.wire import ChannelClosed
from services.secrets.core.seal import ROOT_KEY, SEAL_CONFIG, SealConfig, SealNotice
from services.secrets.core.wrapping import rfc3339
from services.secrets.keyring import BarrierError, open_with
from shared import subjects
from shared.bus import Bus, CallContext
from shared.cluster_identity import load_identity
from shared.control import REPLICA, ControlBox
from shared.control import Rejected as BoxRejected
from shared.errors import ServiceError
from shared.settings import Settings
from shared.storage import JetStreamStorage

log = structlog.get_logger("replication")

PROGRESS_FLUSH = 0.25  # seconds between writes of last_remote_wal


def _copy(state: DrState) -> DrState:
    return msgspec.json.decode(msgspec.json.encode(state), type=DrState)


class ReplicationService:
    name = "replication"

    def __init__(self, bus: Bus, settings: Settings) -> None:
        self.bus = bus
        self.settings = settings
        self.bucket = bucket_for(settings, "secrets")
        self.state = DrState()
        self.progress = Progress()
        self._progress_dirty = False
        self._lock = asyncio.Lock()
        self._ready = False
        self._flusher: asyncio.Task[None] | None = None
        # The replication service acts for the secrets cluster: it holds the cluster key.
        identity = load_identity(settings)
        if identity.replica_key is None:
            raise ServiceError(500, "the replication service needs the cluster key")
        self.box = ControlBox(identity.replica_key, REPLICA)
        assert identity.state_key is not None
        self.state_key = identity.state_key

    @property
    def ready(self) -> bool:
        return self._ready

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        self.js = self.bus.nc.jetstream()
        replicas = self.settings.replicas
        self.storage = await JetStreamStorage.open(self.js, self.bucket, replicas=replicas)
        self.store = await StateStore.open(
            self.js, bucket_for(self.settings, "dr"), self.state_key, replicas=replicas
        )
        self.state = await self.store.load()
        if not self.state.node_id:
            self.state.node_id = uuid.uuid4().hex
            await self.save_state()
        self.progress = await self.store.load_progress()
        self.indexer = Indexer(self.js, self.bucket)  # built when first needed
        self.ops = OperationTokens(self._read_seal)
        self.server = PrimaryServer(self)
        self.client = SecondaryClient(self)
        if self.state.mode == PRIMARY:
            await self.server.start(self.settings.cluster_addr)
        elif self.state.mode == SECONDARY and self.state.primary is not None:
            self.client.start()
        self._flusher = asyncio.create_task(self._flush_progress())
        await self.bus.serve(
            c.DR_CONTROL.on(self.settings.cluster_name),
            self._on_sealed_command,
            bytes,
            queue=c.DR_CONTROL.queue,
            concurrency=16,
        )
        self._ready = True

    async def stop(self) -> None:
        self._ready = False
        await self.client.stop()
        await self.server.stop()
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
        with contextlib.suppress(Exception):
            if self._progress_dirty:
                await self.store.save_progress(self.progress)
        await self.indexer.stop()

    # ---- state ----------------------------------------------------------------------------
    async def save_state(self) -> None:
        await self.store.save(self.state)

    async def set_progress(self, epoch: str, wal: int) -> None:
        self.progress.remote_epoch = epoch
        self.progress.last_remote_wal = wal
        self._progress_dirty = True

    async def mark_synced(self) -> None:
        if not self.state.synced:
            self.state.synced = True
            await self.save_state()
        if self._progress_dirty:
            await self.store.save_progress(self.progress)
            self._progress_dirty = False

    async def _flush_progress(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_FLUSH)
            if self._progress_dirty:
                self._progress_dirty = False
                try:
                    await self.store.save_progress(self.progress)
                except Exception as exc:
                    self._progress_dirty = True
                    log.warning("cannot save replication progress", error=str(exc))

    async def _read_seal(self) -> tuple[SealConfig | None, bytes | None]:
        cfg = await self.storage.get(SEAL_CONFIG)
        root = await self.storage.get(ROOT_KEY)
        config = None if cfg is None else msgspec.json.decode(cfg.value, type=SealConfig)
        return config, None if root is None else root.value

    async def _seal_secrets(self) -> None:
        """Seal every secrets replica at once (they also see the mode change, a moment later)."""
        subject = subjects.SEAL_SEALED.on(self.settings.cluster_name)
        notice = msgspec.msgpack.encode(SealNotice(origin="replication"))
        await self.bus.publish(subject, self.box.seal(subject, notice))
        await self.bus.nc.flush()

    # ---- commands -------------------------------------------------------------------------
    async def _on_sealed_command(self, request: bytes, ctx: CallContext) -> bytes:
        """Obey only commands a secrets replica sealed; seal the reply back to it."""
        subject = c.DR_CONTROL.on(self.settings.cluster_name)
        try:
            cmd = msgspec.msgpack.decode(self.box.open(subject, request), type=c.DrCommand)
        except (BoxRejected, msgspec.DecodeError) as exc:
            log.warning("DR command refused", reason=str(exc))
            raise ServiceError(403, "DR commands are accepted from secrets replicas only") from None
        reply = await self._on_command(cmd, ctx)
        return self.box.seal(
            ControlBox.reply_context(subject, request), msgspec.msgpack.encode(reply)
        )

    async def _on_command(self, cmd: Any, _ctx: CallContext) -> c.DrReply:
        if isinstance(cmd, c.Status):
            return c.DrReply(data=await self.status())
        async with self._lock:
            handler = getattr(self, f"_cmd_{type(cmd).__name__}")
            result = await handler(cmd)
        return result if isinstance(result, c.DrReply) else c.DrReply(data=result)

    def _check_op_token(self, token: str) -> None:
        if not token:
            raise ServiceError(400, "dr_operation_token is required")
        if not is_valid(token, self.state.op_tokens):
            raise ServiceError(403, "invalid DR operation token")

    async def status(self) -> dict[str, Any]:
        st = self.state
        if st.mode == DISABLED:
            return {"mode": DISABLED}
        # A large store takes a while to index the first time: show the root so far meanwhile.
        with contextlib.suppress(TimeoutError):
            await self.indexer.caught_up(within=5.0)
        out: dict[str, Any] = {
            "cluster_id": st.cluster_id,
            "mode": st.mode,
            "merkle_root": self.indexer.index.root(),
        }
        if st.mode == PRIMARY:
            info = await self.js.stream_info(f"KV_{self.bucket}")
            secondaries = []
            for sid, rec in sorted(st.secondaries.items()):
                if not rec.activated:
                    continue
                s = self.server.sessions.get(sid)
                live = s is not None and time.time() - s.last_heartbeat < STALE_AFTER
                secondaries.append(
                    {
                        "api_address": rec.api_address or (s.api_address if s else ""),
                        "cluster_address": s.peer if s else "",
                        "connection_status": "connected" if live else "disconnected",
                        "last_heartbeat": rfc3339(s.last_heartbeat) if s else "",
                        "node_id": sid,
                    }
                )
            out.update(
                known_secondaries=sorted(st.secondaries),
                last_wal=info.state.last_seq,
                primary_cluster_addr=st.primary_cluster_addr,
                secondaries=secondaries,
            )
            return out
        link, cl = st.primary, self.client
        primaries = (
            []
            if link is None
            else [
                {
                    "api_address": cl.primary_api_addr or link.api_addr,
                    "cluster_address": link.cluster_addr,
                    "connection_status": "connected" if cl.live else "disconnected",
                    "last_heartbeat": rfc3339(cl.last_heartbeat) if cl.last_heartbeat else "",
                }
            ]
        )
        out.update(
            known_primary_cluster_addrs=st.known_primary_cluster_addrs,
            last_remote_wal=self.progress.last_remote_wal,
            primaries=primaries,
            primary_cluster_addr=link.cluster_addr if link else "",
            secondary_id=st.secondary_id,
            state=cl.state,
        )
        return out

    # primary -------------------------------------------------------------------------------
    async def _become_primary(self, advertised: str, *, new_cluster_id: bool) -> None:
        before = _copy(self.state)
        st = self.state
        st.tls_cert, st.tls_key = new_identity(f"trellis-dr-{self.settings.cluster_name}")
        if new_cluster_id:
            st.cluster_id = str(uuid.uuid4())
        st.epoch = uuid.uuid4().hex
        st.secondaries, st.op_tokens, st.promote_keys = {}, [], {}
        st.primary, st.known_primary_cluster_addrs, st.secondary_id = None, [], ""
        try:
            bound = await self.server.start(self.settings.cluster_addr)
        except (OSError, ValueError) as exc:
            self.state = before
            raise ServiceError(
                400, f"cannot listen on the cluster address {self.settings.cluster_addr!r}: {exc}"
            ) from None
        st.primary_cluster_addr = advertised or f"https://{bound}"
        st.mode, st.synced = PRIMARY, True
        st.generation += 1
        await self.save_state()

    async def _cmd_EnablePrimary(self, cmd: c.EnablePrimary) -> None:
        next_mode(self.state.mode, Move.ENABLE_PRIMARY)
        await self._become_primary(cmd.primary_cluster_addr, new_cluster_id=True)

    async def _cmd_DemotePrimary(self, _cmd: c.DemotePrimary) -> None:
        next_mode(self.state.mode, Move.DEMOTE)
        await self.server.stop()
        st = self.state
        st.mode, st.primary, st.secondaries = SECONDARY, None, {}
        st.tls_cert = st.tls_key = st.epoch = ""
        st.known_primary_cluster_addrs, st.synced = [], True  # its data is whole
        self.progress = Progress()
        await self.store.save_progress(self.progress)
        await self.save_state()
        await self._seal_secrets()

    async def _cmd_DisablePrimary(self, _cmd: c.DisablePrimary) -> None:
        next_mode(self.state.mode, Move.DISABLE_PRIMARY)
        await self.server.stop()
        self.state = DrState(node_id=self.state.node_id, generation=self.state.generation + 1)
        await self.save_state()
        await self.indexer.idle()

    async def _cmd_SecondaryToken(self, cmd: c.SecondaryToken) -> c.DrReply:
        st = self.state
        require(st.mode, PRIMARY, "generate a secondary activation token")
        if not cmd.id:
            raise ServiceError(400, "missing required field 'id'")
        if cmd.id in st.secondaries:
            raise ServiceError(
                400,
                f"a secondary with id {cmd.id!r} already exists; revoke it "
                "first to issue a new token",
            )
        if cmd.ttl <= 0:
            raise ServiceError(400, "ttl must be positive")
        secret, digest = new_secret()
        now = time.time()
        activation = Activation(
            cluster_id=st.cluster_id,
            secondary_id=cmd.id,
            primary_cluster_addr=st.primary_cluster_addr,
            primary_api_addr=cmd.api_addr or self.settings.api_addr,
            fingerprint=fingerprint(st.tls_cert),
            secret=secret,
            expires_at=now + cmd.ttl,
        )
        sealed = seal_for(cmd.secondary_public_key, activation) if cmd.secondary_public_key else ""
        st.secondaries[cmd.id] = SecondaryRecord(
            id=cmd.id, secret_hash=digest, expires_at=now + cmd.ttl, created_at=now
        )
        await self.save_state()
        if sealed:
            return c.DrReply(data={"token": sealed})
        return c.DrReply(data={"activation": msgspec.to_builtins(activation)})

    async def _cmd_BindToken(self, cmd: c.BindToken) -> dict[str, Any]:
        rec = self.state.secondaries.get(cmd.id)
        if rec is None:
            raise ServiceError(400, f"no secondary with id {cmd.id!r}")
        rec.wrap_accessor = cmd.wrap_accessor
        await self.save_state()
        iat = int(cmd.creation_time)
        claims = {
            "accessor": "",
            "addr": cmd.api_addr or self.settings.api_addr,
            "exp": iat + cmd.ttl,
            "iat": iat,
            "jti": cmd.wrapping_token,
            "nbf": iat - 5,
            "type": "wrapping",
        }
        return {"token": sign_jwt(claims, self.state.tls_key)}

    async def _cmd_RevokeSecondary(self, cmd: c.RevokeSecondary) -> dict[str, Any]:
        require(self.state.mode, PRIMARY, "revoke a secondary")
        rec = self.state.secondaries.pop(cmd.id, None)
        if rec is None:
            raise ServiceError(400, f"no secondary with id {cmd.id!r}")
        await self.save_state()
        self.server.disconnect(cmd.id)  # at once, not at the next heartbeat
        return {"wrap_accessor": rec.wrap_accessor}

    # secondary -----------------------------------------------------------------------------
    async def _cmd_GeneratePublicKey(self, _cmd: c.GeneratePublicKey) -> dict[str, Any]:
        if self.state.mode == PRIMARY:
            raise ServiceError(
                400,
                "this cluster is a DR primary: only a (future) secondary generates a public key",
            )
        private, public = new_keypair()
        self.state.public_key_private = private
        await self.save_state()
        return {"secondary_public_key": public}

    async def _activation(
        self, token: str, api_addr: str, ca_file: str, ca_path: str
    ) -> tuple[Activation, str]:
        """Open an activation token: (activation, the JWT to verify after pinning or "")."""
        token = token.strip()
        if not token:
            raise ServiceError(400, "missing required field 'token'")
        if token.startswith(SEALED_PREFIX):
            return open_sealed(token, self.state.public_key_private), ""
        claims = jwt_claims(token)
        wrapping, addr = token, api_addr
        if claims is not None:
            wrapping = str(claims.get("jti") or "")
            addr = api_addr or str(claims.get("addr") or "")
            if claims.get("type") != "wrapping" or not wrapping:
                raise bad_token("it is not a wrapping token")
        if not addr:
            raise ServiceError(
                400, "the activation token names no primary API address; give primary_api_addr"
            )
        return await unwrap(
            addr, wrapping, ca_file=ca_file, ca_path=ca_path
        ), token if claims is not None else ""

    async def _probe(self, act: Activation, jwt: str) -> PrimaryLink:
        link = PrimaryLink(
            cluster_addr=act.primary_cluster_addr,
            api_addr=act.primary_api_addr,
            fingerprint=act.fingerprint,
            secret=act.secret,
            secondary_id=act.secondary_id,
        )
        try:
            _, der = await self.client.probe(link)
        except Rejected as exc:
            raise ServiceError(400, f"the primary refused this secondary: {exc}") from None
        except PinMismatch as exc:
            raise ServiceError(400, f"invalid activation token: {exc}") from None
        except (OSError, TimeoutError, ChannelClosed, ValueError) as exc:
            raise ServiceError(
                502,
                f"cannot reach the primary's cluster address "
                f"{link.cluster_addr}: {exc or type(exc).__name__}",
            ) from None
        if jwt and not verify_jwt(jwt, der):
            raise bad_token("it was not signed by the primary it names")
        return link

    async def _cmd_EnableSecondary(self, cmd: c.EnableSecondary) -> c.DrReply:
        next_mode(self.state.mode, Move.ENABLE_SECONDARY)
        act, jwt = await self._activation(cmd.token, cmd.primary_api_addr, cmd.ca_file, cmd.ca_path)
        link = await self._probe(act, jwt)
        # Past every check: from here this cluster is a secondary and its data goes.
        st = self.state
        st.mode, st.cluster_id, st.primary = SECONDARY, act.cluster_id, link
        st.secondary_id, st.known_primary_cluster_addrs = act.secondary_id, [link.cluster_addr]
        st.synced, st.public_key_private, st.op_tokens = False, "", []
        st.tls_cert = st.tls_key = st.epoch = ""
        st.generation += 1
        await self.save_state()
        await self._seal_secrets()
        await self._wipe()
        self.client.start()
        return c.DrReply(
            warnings=[
                f"all data on this cluster was cleared; it now replicates from {link.cluster_addr}"
            ]
        )

    async def _wipe(self) -> None:
        await self.js.purge_stream(f"KV_{self.bucket}")
        self.progress = Progress()
        await self.store.save_progress(self.progress)
        await self.indexer.rebuild()

    async def _cmd_Promote(self, cmd: c.Promote) -> c.DrReply:
        next_mode(self.state.mode, Move.PROMOTE)
        self._check_op_token(cmd.dr_operation_token)
        config, _ = await self._read_seal()
        if not cmd.force:
            if self.client.live:
                raise ServiceError(
                    400,
                    "the primary is still connected and streaming: "
                    "promoting now would make two primaries; demote it "
                    "first, or promote with force",
                )
            if not self.state.synced or config is None:
                raise ServiceError(
                    400,
                    "this secondary has not finished its first sync with "
                    "the primary, so promoting it may lose data; promote "
                    "with force to do it anyway",
                )
        kek = await self._promotion_key(cmd.dr_operation_token)
        await self.client.stop()
        await self._become_primary(cmd.primary_cluster_addr, new_cluster_id=False)
        required = config.secret_threshold if config is not None else 0
        data = {"progress": 0, "required": required, "complete": True}
        warnings = []
        if config is not None and config.type == "shamir" and kek is None:
            warnings.append(
                "unseal this cluster with the primary's unseal key shares to serve requests"
            )
        # The asking secrets replica unseals with the KEK; this reply is sealed to it.
        return c.DrReply(data=data, warnings=warnings, unseal_key=kek or b"")

    async def _promotion_key(self, token: str) -> bytes | None:
        """The primary's unseal key the operation-token ceremony proved, opened with the
        token now presented, if it still opens the replicated root key (promote_key.py)."""
        digest = token_hash(token)
        stored = self.state.promote_keys.get(digest)
        if not stored:
            return None
        kek = promote_key.unwrap(token, digest, base64.b64decode(stored))
        _, root = await self._read_seal()
        if kek is None or root is None:
            return None
        try:
            open_with(kek, root, ROOT_KEY.encode())
        except (BarrierError, ValueError):
            log.warning("the primary's unseal key changed since the operation token was made")
            return None
        return kek

    async def _cmd_DisableSecondary(self, cmd: c.DisableSecondary) -> None:
        next_mode(self.state.mode, Move.DISABLE_SECONDARY)
        self._check_op_token(cmd.dr_operation_token)
        await self.client.stop()
        self.state = DrState(node_id=self.state.node_id, generation=self.state.generation + 1)
        self.progress = Progress()
        await self.store.save_progress(self.progress)
        await self.save_state()
        await self.indexer.idle()

    async def _cmd_UpdatePrimary(self, cmd: c.UpdatePrimary) -> None:
        st = self.state
        next_mode(st.mode, Move.UPDATE_PRIMARY)
        self._check_op_token(cmd.dr_operation_token)
        if not cmd.token.strip():  # forget the past primary, stay a secondary
            await self.client.stop()
            st.primary, st.known_primary_cluster_addrs = None, []
            await self.save_state()
            return
        act, jwt = await self._activation(cmd.token, cmd.primary_api_addr, cmd.ca_file, cmd.ca_path)
        if act.cluster_id != st.cluster_id:
            raise ServiceError(
                400,
                "the activation token belongs to another replication set "
                "(cluster id); only disabling and enabling this secondary, "
                "which wipes it, can move it there",
            )
        link = await self._probe(act, jwt)
        await self.client.stop()
        st.primary, st.secondary_id = link, act.secondary_id
        st.known_primary_cluster_addrs = [link.cluster_addr]
        await self.save_state()
        self.client.start()

    # operation tokens ----------------------------------------------------------------------
    async def _cmd_AttemptRead(self, _cmd: c.AttemptRead) -> dict[str, Any]:
        require(self.state.mode, SECONDARY, "generate an operation token")
        return self.ops.record()

    async def _cmd_AttemptStart(self, cmd: c.AttemptStart) -> dict[str, Any]:
        require(self.state.mode, SECONDARY, "generate an operation token")
        return await self.ops.start(cmd.pgp_key)

    async def _cmd_AttemptCancel(self, _cmd: c.AttemptCancel) -> None:
        require(self.state.mode, SECONDARY, "generate an operation token")
        self.ops.cancel()

    async def _cmd_AttemptUpdate(self, cmd: c.AttemptUpdate) -> dict[str, Any]:
        require(self.state.mode, SECONDARY, "generate an operation token")
        record, token, wrapped = await self.ops.update(cmd.key, cmd.nonce)
        if token:
            digest = token_hash(token)
            self.state.op_tokens.append(digest)
            self.state.promote_keys[digest] = base64.b64encode(wrapped).decode()
            await self.save_state()
        return record

    async def _cmd_DeleteOperationToken(self, cmd: c.DeleteOperationToken) -> None:
        require(self.state.mode, SECONDARY, "delete an operation token")
        self._check_op_token(cmd.dr_operation_token)
        digest = token_hash(cmd.dr_operation_token)
        self.state.op_tokens = [h for h in self.state.op_tokens if h != digest]
        self.state.promote_keys.pop(digest, None)
        await self.save_state()

    async def _cmd_Reindex(self, cmd: c.Reindex) -> c.DrReply:
        require(self.state.mode, SECONDARY, "reindex")
        self._check_op_token(cmd.dr_operation_token)
        old = await self.indexer.rebuild()
        new = self.indexer.index
        warnings = [f"reindexed {len(new)} keys from storage; merkle root {new.root()}"]
        if cmd.diff:
            only_new, only_old, changed = new.diff_keys(old)
            for what, keys in (
                ("in storage but missing from the index", only_new),
                ("in the index but not in storage", only_old),
                ("indexed with a stale hash", changed),
            ):
                if keys:
                    shown = ", ".join(keys[:10]) + (" ..." if len(keys) > 10 else "")
                    warnings.append(f"{len(keys)} keys {what}: {shown}")
        if cmd.skip_flush:
            warnings.append(
                "skip_flush has no effect: the index is kept in memory and rebuilt "
                "from storage, so there is nothing to flush"
            )
        if cmd.force or old.root() != new.root():
            # Compare with the primary again by Merkle diff rather than resuming the WAL.
            self.client.resync()
            warnings.append("a Merkle resync with the primary follows")
        return c.DrReply(warnings=warnings)
