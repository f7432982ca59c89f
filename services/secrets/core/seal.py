"""Init, seal and unseal, across every replica of the secrets service.

Keys: a random unseal key (KEK) is Shamir-split into the shares handed out at init (not split
when there is one share); it encrypts the root key at `core/root-key`; the root key encrypts the
keyring at `core/keyring`. With the static seal, the configured key plays the KEK's part and
replicas unseal themselves.

Across replicas: a share submitted to one replica is broadcast to all, so progress is the
cluster's; a sealed replica that starts while the others are unsealed gets the keyring from a peer
(X25519-encrypted to a key it made for that request); sealing one seals all.

Every one of these messages is a sealed control box (shared/control.py) under the cluster's
replica key: a NATS user without the cluster key can neither read a share nor make a replica
act (seal, take a share, hand out the keyring); docs/bus-security.md.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import os
import secrets
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import structlog
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from services.crypto.client import register_crypto_key
from services.secrets import shamir
from services.secrets.errors import SecretsError, bad_request
from services.secrets.keyring import BarrierError, Keyring, open_with, seal_with
from shared import subjects
from shared.cluster_identity import load_identity
from shared.control import REPLICA, ControlBox, Rejected
from shared.errors import ServiceError

if TYPE_CHECKING:
    from services.secrets.core.core import Core

log = structlog.get_logger("seal")

M = TypeVar("M")

SEAL_CONFIG = "core/seal-config"
ROOT_KEY = "core/root-key"
KEYRING = "core/keyring"


class SealConfig(msgspec.Struct, kw_only=True):
    type: str = "shamir"
    secret_shares: int = 1
    secret_threshold: int = 1


class UnsealShare(msgspec.Struct, kw_only=True):
    share: bytes
    origin: str
    # The whole unseal key, not a share: a promoted DR secondary's (unseal_with_key).
    whole: bool = False
    # No share: discard the shares submitted so far (sys/unseal with reset), on every replica.
    reset: bool = False


class SealNotice(msgspec.Struct, kw_only=True):
    origin: str


class HandoffRequest(msgspec.Struct, kw_only=True):
    public_key: bytes
    origin: str


class HandoffReply(msgspec.Struct, kw_only=True):
    public_key: bytes = b""
    sealed_keyring: bytes = b""
    nonce: bytes = b""


def _handoff_key(private: X25519PrivateKey, peer_public: bytes) -> bytes:
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    return HKDF(hashes.SHA256(), 32, salt=None, info=b"trellis seal handoff").derive(shared)


def decode_share(text: str) -> bytes:
    """Vault tries hex first, then base64."""
    text = text.strip()
    try:
        return bytes.fromhex(text)
    except ValueError:
        pass
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("the unseal key is neither hex nor base64") from None


class SealManager:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.node_id = uuid.uuid4().hex
        self.config: SealConfig | None = None
        self.shares: dict[int, bytes] = {}  # x coordinate -> share, for this attempt
        self.nonce = ""
        self.explicitly_sealed = False
        self.initializing = False
        # The root key, once this replica opened the keyring itself (sys/rotate needs it;
        # services/secrets/core/rotation.py keeps a barrier copy for replicas that did not).
        self.root_key: bytes | None = None
        self._lock = asyncio.Lock()
        # A seal or unseal share another replica announced, being applied here: requests that
        # arrived after the announcement wait for it (Core.settle).
        self.transitions: set[asyncio.Future[None]] = set()
        self._handoff_task: asyncio.Task[None] | None = None
        self._storage = core.storage
        self.identity = identity = load_identity(core.settings)
        if identity.replica_key is None:
            raise ServiceError(500, "the secrets service needs the cluster key (cluster_key_file)")
        self.box = ControlBox(identity.replica_key, REPLICA)
        if identity.crypto_key is not None:
            register_crypto_key(core.settings.cluster_name, identity.crypto_key)

    # ---- control messages --------------------------------------------------------------
    async def broadcast(self, subject: subjects.Subject, message: Any) -> None:
        """Publish a control message sealed for the other replicas."""
        full = subject.on(self.core.settings.cluster_name)
        await self.core.bus.publish(full, self.box.seal(full, msgspec.msgpack.encode(message)))

    def open(self, subject: str, box: bytes, kind: type[M]) -> M | None:
        """The message inside a control box, or None (logged) if a genuine replica did not
        send it now: the receiver decides, whatever NATS let through."""
        try:
            return msgspec.msgpack.decode(self.box.open(subject, box), type=kind)
        except (Rejected, msgspec.DecodeError) as exc:
            log.warning("control message refused", subject=subject, reason=str(exc))
            return None

    def open_broadcast(self, subject: str, data: bytes, kind: type[M]) -> M | None:
        """`open` for a broadcast payload as it came off the bus (msgpack bytes)."""
        try:
            box = msgspec.msgpack.decode(data, type=bytes)
        except msgspec.DecodeError:
            log.warning("control message refused", subject=subject, reason="not msgpack bytes")
            return None
        return self.open(subject, box, kind)

    def _transition(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self.transitions.add(task)
        task.add_done_callback(self.transitions.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    # ---- state -------------------------------------------------------------------------
    async def read_config(self) -> SealConfig | None:
        """The stored seal config, without adopting it."""
        entry = await self._storage.get(SEAL_CONFIG)
        return None if entry is None else msgspec.json.decode(entry.value, type=SealConfig)

    async def load_config(self) -> SealConfig | None:
        self.config = await self.read_config()
        return self.config

    @property
    def initialized(self) -> bool:
        return self.config is not None

    @property
    def sealed(self) -> bool:
        return self.core.barrier.sealed

    @property
    def progress(self) -> int:
        return len(self.shares)

    # ---- init --------------------------------------------------------------------------
    async def initialize(self, shares: int, threshold: int) -> tuple[list[bytes], Keyring]:
        """Create the keys; returns the unseal key shares (empty for the static seal)."""
        static = self.core.settings.seal.type == "static"
        if not static:
            if shares < 1 or threshold < 1:
                raise bad_request("secret_shares and secret_threshold must be at least 1")
            if threshold > shares:
                raise bad_request("secret_threshold cannot be larger than secret_shares")
            if shares > 255:
                raise bad_request("secret_shares cannot be larger than 255")
            if shares > 1 and threshold == 1:
                raise bad_request("secret_threshold must be greater than one for multiple shares")
        kek = self.static_key() if static else secrets.token_bytes(32)
        root_key = secrets.token_bytes(32)
        keyring = Keyring.new()
        config = SealConfig(
            type="static" if static else "shamir",
            secret_shares=0 if static else shares,
            secret_threshold=0 if static else threshold,
        )
        # The config is written last with create(): two racing inits cannot both succeed.
        await self._storage.put(ROOT_KEY, seal_with(kek, root_key, ROOT_KEY.encode()))
        await self._storage.put(KEYRING, seal_with(root_key, keyring.to_bytes(), KEYRING.encode()))
        try:
            await self._storage.create(SEAL_CONFIG, msgspec.json.encode(config))
        except Exception:
            raise bad_request("the secrets service is already initialized") from None
        self.config = config
        self.root_key = root_key
        if static:
            return [], keyring
        return ([kek] if shares == 1 else shamir.split(kek, shares, threshold)), keyring

    def static_key(self) -> bytes:
        key = self.core.settings.seal.key
        try:
            raw = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise ServiceError(500, "the static seal key must be 32 bytes, base64-encoded")
        return raw

    async def _open_keyring(self, kek: bytes) -> Keyring:
        root_entry = await self._storage.get(ROOT_KEY)
        ring_entry = await self._storage.get(KEYRING)
        if root_entry is None or ring_entry is None:
            raise ServiceError(500, "the stored keys are missing")
        root_key = open_with(kek, root_entry.value, ROOT_KEY.encode())
        keyring = Keyring.from_bytes(open_with(root_key, ring_entry.value, KEYRING.encode()))
        self.root_key = root_key
        return keyring

    # ---- unseal ------------------------------------------------------------------------
    async def submit_share(self, share: bytes, *, broadcast: bool = True) -> None:
        """Add one share; unseal when the threshold is reached. Wrong keys reset progress."""
        async with self._lock:
            if self.config is None:
                await self.load_config()
            if self.config is None:
                raise bad_request("the secrets service is not initialized")
            if not self.sealed:
                return
            if broadcast:
                await self.broadcast(
                    subjects.SEAL_SHARE, UnsealShare(share=share, origin=self.node_id)
                )
            threshold = self.config.secret_threshold
            if threshold == 1 or self.config.secret_shares == 1:
                candidates = [share]
            else:
                if len(share) < 2:
                    raise bad_request("the unseal key share is too short")
                if not self.nonce:
                    self.nonce = str(uuid.uuid4())
                self.shares[share[-1]] = share
                self.core.state_changed()  # the progress
                if len(self.shares) < threshold:
                    return
                candidates = list(self.shares.values())
            try:
                kek = candidates[0] if len(candidates) == 1 else shamir.combine(candidates)
                keyring = await self._open_keyring(kek)
            except (BarrierError, ValueError):
                self.reset()
                raise bad_request(
                    "unseal failed: the key shares do not open the barrier; progress was reset"
                ) from None
            self.reset()
            await self._unsealed(keyring)

    async def unseal_with_key(self, kek: bytes, *, broadcast: bool = True) -> None:
        """Unseal with the unseal key itself (a promoted DR secondary: the operation-token
        ceremony proved it, services/replication/promote_key.py), and hand it to the peers
        as unseal shares are handed (sealed under the replica key), so they serve at once."""
        async with self._lock:
            await self.load_config()
            if not self.sealed:
                return
            try:
                keyring = await self._open_keyring(kek)
            except (BarrierError, ValueError):
                raise ServiceError(
                    500, "the promoted cluster's unseal key does not open it"
                ) from None
            self.reset()
            await self._unsealed(keyring)
            if broadcast:
                await self.broadcast(
                    subjects.SEAL_SHARE, UnsealShare(share=kek, origin=self.node_id, whole=True)
                )

    async def _on_whole_key(self, kek: bytes) -> None:
        """A peer's promoted-cluster unseal key: only once this replica sees the cluster is no
        longer a DR secondary (a secondary never unseals)."""
        link = getattr(self.core, "dr_link", None)
        if link is not None:
            await link.refresh()
        if self.core.dr_mode == "secondary":
            log.warning("unseal key refused: this cluster is a DR secondary")
            return
        await self.unseal_with_key(kek, broadcast=False)

    def reset(self) -> None:
        self.shares.clear()
        self.nonce = ""
        self.core.state_changed()

    async def _reset_locked(self) -> None:
        async with self._lock:
            self.reset()

    async def reset_everywhere(self) -> None:
        """Every replica collects the shares (each is broadcast), so each discards them."""
        async with self._lock:
            if self.sealed:
                await self.broadcast(
                    subjects.SEAL_SHARE, UnsealShare(share=b"", origin=self.node_id, reset=True)
                )
            self.reset()

    async def reload(self) -> None:
        """Re-read the seal after DR replication replaced storage (a promoted or disabled
        secondary holds its primary's keys); a static seal unseals by itself again."""
        async with self._lock:
            self.reset()
            await self.load_config()
            if self.sealed and self.config is not None and self.config.type == "static":
                with contextlib.suppress(BarrierError, ServiceError):
                    await self._unsealed(await self._open_keyring(self.static_key()))
            elif self.sealed and self.config is not None:
                # A promoted secondary may be unsealed by one replica (unseal_with_key): the
                # others take its keyring, as a starting replica does.
                self.explicitly_sealed = False
                self.keep_joining()

    def keep_joining(self) -> None:
        """Ask the peers for the keyring until unsealed, unless that is under way already."""
        if self._handoff_task is None or self._handoff_task.done():
            self._handoff_task = asyncio.create_task(self._join_unsealed_peers())

    async def _unsealed(self, keyring: Keyring) -> None:
        self.explicitly_sealed = False
        self.core.barrier.unseal(keyring)
        try:
            await self.core.post_unseal()
        except Exception:
            # Keys in but tables not loaded answers "sealed" for good while ignoring shares
            # and peers (both wait for a sealed barrier): close it again and keep asking.
            with contextlib.suppress(Exception):
                await self.core.pre_seal()
            self.core.barrier.seal()
            self.keep_joining()
            raise
        log.info("unsealed", node=self.node_id)

    async def seal(self, *, broadcast: bool = True) -> None:
        async with self._lock:
            self.explicitly_sealed = True
            if broadcast:
                await self.broadcast(subjects.SEAL_SEALED, SealNotice(origin=self.node_id))
            if not self.sealed:
                await self.core.pre_seal()
                self.core.barrier.seal()
                log.info("sealed", node=self.node_id)
            self.reset()

    # ---- peers -------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen to peers, then unseal without a human where that is possible."""
        cluster = self.core.settings.cluster_name
        bus = self.core.bus

        share_subject = subjects.SEAL_SHARE.on(cluster)
        sealed_subject = subjects.SEAL_SEALED.on(cluster)
        handoff_subject = subjects.SEAL_HANDOFF.on(cluster)

        async def apply_share(msg: UnsealShare) -> None:
            with contextlib.suppress(SecretsError, ServiceError):
                if msg.whole:
                    await self._on_whole_key(msg.share)
                else:
                    # The stored config, not ours: a rekey through another replica changes
                    # the threshold the share counts against.
                    await self.load_config()
                    await self.submit_share(msg.share, broadcast=False)

        # Both applied as the bus client reads them (Bus.listen): a request sent after the
        # sender's answer finds this replica sealed or unsealing, never still serving.
        def on_share(data: bytes) -> None:
            msg = self.open_broadcast(share_subject, data, UnsealShare)
            if msg is None or msg.origin == self.node_id or not self.sealed:
                return
            # In arrival order: the lock is taken first come, first served.
            self._transition(self._reset_locked() if msg.reset else apply_share(msg))

        def on_sealed(data: bytes) -> None:
            msg = self.open_broadcast(sealed_subject, data, SealNotice)
            if msg is not None and msg.origin != self.node_id:
                self._transition(self.seal(broadcast=False))

        async def on_handoff(box: bytes, _ctx: object) -> bytes:
            # The request must be sealed by a replica before any key material leaves.
            msg = self.open(handoff_subject, box, HandoffRequest)
            keyring = self.core.barrier.keyring
            if msg is None or keyring is None or msg.origin == self.node_id or self.initializing:
                return b""
            private = X25519PrivateKey.generate()
            key = _handoff_key(private, msg.public_key)
            nonce = os.urandom(12)
            reply = HandoffReply(
                public_key=private.public_key().public_bytes_raw(),
                sealed_keyring=AESGCM(key).encrypt(nonce, keyring.to_bytes(), msg.public_key),
                nonce=nonce,
            )
            # The reply is sealed too: a requester takes a keyring only from a replica.
            return self.box.seal(
                ControlBox.reply_context(handoff_subject, box), msgspec.msgpack.encode(reply)
            )

        await bus.listen(share_subject, on_share)
        await bus.listen(sealed_subject, on_sealed)
        # Not a queue group: a sealed replica must not be the only one asked.
        await bus.serve(handoff_subject, on_handoff, bytes)
        await self.load_config()
        if self.config is not None and self.config.type == "static":
            await self._unsealed(await self._open_keyring(self.static_key()))
            return
        self.keep_joining()

    async def announce_unsealed(self) -> None:
        """After an init with the static seal, peers waiting for a keyring can take ours."""
        self.explicitly_sealed = False

    async def _join_unsealed_peers(self) -> None:
        """Ask peers for the keyring until one has it, we are unsealed by shares, or someone
        seals the cluster on purpose. An init opens this replica's barrier for a moment
        (Core.first_unseal) and closes it again: that is no reason to stop."""
        delay = 0.2
        while (self.sealed or self.initializing) and not self.explicitly_sealed:
            if self.config is None:
                with contextlib.suppress(Exception):
                    await self.load_config()
            if self.config is not None and self.config.type == "static":
                with contextlib.suppress(Exception):
                    async with self._lock:
                        if self.sealed:
                            await self._unsealed(await self._open_keyring(self.static_key()))
                return
            got = None
            if self.config is not None:
                # A bus hiccup (a publish or subscribe refused under load) must not end the
                # loop: a replica that stops asking stays sealed for good.
                with contextlib.suppress(Exception):
                    got = await self._ask_peers()
            if got is not None:
                try:
                    async with self._lock:
                        if self.sealed and not self.explicitly_sealed:
                            await self._unsealed(got)
                    return
                except Exception:
                    log.warning("unseal with a peer's keyring failed; asking again", exc_info=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _ask_peers(self) -> Keyring | None:
        private = X25519PrivateKey.generate()
        public = private.public_key().public_bytes_raw()
        subject = subjects.SEAL_HANDOFF.on(self.core.settings.cluster_name)
        request = HandoffRequest(public_key=public, origin=self.node_id)
        async with contextlib.aclosing(
            self.ask_replicas(subject, request, HandoffReply, 0.5)
        ) as replies:
            async for reply in replies:
                if not reply.sealed_keyring:
                    continue
                with contextlib.suppress(Exception):  # a reply that does not open: the next
                    key = _handoff_key(private, reply.public_key)
                    plain = AESGCM(key).decrypt(reply.nonce, reply.sealed_keyring, public)
                    return Keyring.from_bytes(plain)
        return None

    async def ask_replicas(
        self, subject: str, message: Any, kind: type[M], timeout: float
    ) -> AsyncIterator[M]:
        """Ask the other replicas (`message` sealed with the replica key, one reply inbox) and
        yield each answer that opens as a replica's reply to this very request, for at most
        `timeout` seconds. An empty answer (a replica with nothing to give) is skipped. Use
        it under `contextlib.aclosing`, so the inbox goes when the caller stops early."""
        nc = self.core.bus.nc
        inbox = nc.new_inbox()
        replies: asyncio.Queue[bytes] = asyncio.Queue()

        async def collect(msg: object) -> None:
            replies.put_nowait(msg.data)  # type: ignore[attr-defined]

        sub = await nc.subscribe(inbox, cb=collect)
        request = self.box.seal(subject, msgspec.msgpack.encode(message))
        context = ControlBox.reply_context(subject, request)
        try:
            await nc.publish(subject, msgspec.msgpack.encode(request), reply=inbox)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while (remaining := deadline - loop.time()) > 0:
                try:
                    data = await asyncio.wait_for(replies.get(), remaining)
                    box = msgspec.msgpack.decode(data, type=bytes)
                except TimeoutError:
                    return
                except msgspec.DecodeError:
                    continue
                if box:
                    reply = self.open(context, box, kind)
                    if reply is not None:
                        yield reply
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def stop(self) -> None:
        if self._handoff_task:
            self._handoff_task.cancel()
