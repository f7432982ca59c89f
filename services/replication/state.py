"""What a cluster remembers about DR, kept in its own KV bucket `<cluster>-dr`: never shipped,
never wiped, never in the Merkle index (each cluster has its own).

The channel credentials stored here (the primary's TLS key, a secondary's channel secret) give
access to barrier ciphertext only; nothing in this bucket opens the barrier. Entries are sealed
under the cluster's state key all the same (StateStore): the mode in them commands the secrets
replicas, so a NATS user must not be able to write one.
"""

from __future__ import annotations

import os

import msgspec
import nats.js.errors
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from services.replication.modes import DISABLED
from shared.errors import ServiceError
from shared.settings import Settings

STATE_KEY = "state"
PROGRESS_KEY = "progress"


class SecondaryRecord(msgspec.Struct, kw_only=True):
    """A secondary as the primary knows it (one per secondary-token id)."""

    id: str
    secret_hash: str  # SHA-256 hex of the channel secret handed out in the activation token
    expires_at: float  # the first connection must happen before this
    created_at: float = 0.0
    node_id: str = ""  # bound at first connection: a reused token from elsewhere is refused
    activated: bool = False
    wrap_accessor: str = ""  # of the wrapping token, revoked with the secondary
    api_address: str = ""


class PrimaryLink(msgspec.Struct, kw_only=True):
    """Where a secondary streams from and how it proves who it is."""

    cluster_addr: str
    api_addr: str = ""
    fingerprint: str  # SHA-256 hex of the primary's TLS certificate, pinned
    secret: str  # base64 channel secret
    secondary_id: str


class DrState(msgspec.Struct, kw_only=True):
    mode: str = DISABLED
    # The replication set's id: shared by a primary and its secondaries; new on each enable.
    cluster_id: str = ""
    # This cluster's own random id, made once (a secondary's identity at its primary).
    node_id: str = ""
    # primary ---------------------------------------------------------------------------
    # Names this primary's WAL: a secondary that streamed from another one must Merkle-sync.
    epoch: str = ""
    primary_cluster_addr: str = ""
    tls_cert: str = ""  # PEM
    tls_key: str = ""  # PEM
    secondaries: dict[str, SecondaryRecord] = {}
    # secondary -------------------------------------------------------------------------
    primary: PrimaryLink | None = None
    known_primary_cluster_addrs: list[str] = []
    secondary_id: str = ""
    # A first full sync finished (or this was a primary): the data is whole.
    synced: bool = False
    op_tokens: list[str] = []  # SHA-256 hex of live DR operation tokens
    # Per token hash: the primary's unseal key wrapped under that token (promote_key.py),
    # base64; unusable without the token, which the cluster does not keep.
    promote_keys: dict[str, str] = {}
    # From secondary/generate-public-key, until an encrypted activation token uses it.
    public_key_private: str = ""
    # Bumped whenever storage was wiped or replaced, so secrets replicas re-read the seal.
    generation: int = 0


class Progress(msgspec.Struct, kw_only=True):
    """Written often (every applied batch), so kept apart from the state document."""

    remote_epoch: str = ""
    last_remote_wal: int = 0


_enc = msgspec.json.Encoder()


class TamperedState(ServiceError):
    def __init__(self, key: str) -> None:
        super().__init__(500, f"the DR {key} entry is not sealed by this cluster; refusing it")


class StateStore:
    """The bucket's entries are sealed (AES-GCM under the cluster's state key, bound to the
    bucket and key): whoever may write this bucket on NATS cannot forge a DR mode that the
    secrets replicas would obey (a `secondary` seals them), nor read the TLS key in it."""

    def __init__(self, kv: KeyValue, key: bytes) -> None:
        self.kv = kv
        self._aead = AESGCM(key)
        self._bucket = kv._name.encode()  # binds an entry to its cluster's bucket

    def _aad(self, name: str) -> bytes:
        return b"trellis dr state\x00" + self._bucket + b"\x00" + name.encode()

    def seal(self, name: str, plain: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, plain, self._aad(name))

    def open_entry(self, name: str, raw: bytes) -> bytes:
        try:
            return self._aead.decrypt(raw[:12], raw[12:], self._aad(name))
        except (InvalidTag, ValueError):
            raise TamperedState(name) from None

    def decode_state(self, raw: bytes | None) -> DrState:
        if not raw:
            return DrState()
        return msgspec.json.decode(self.open_entry(STATE_KEY, raw), type=DrState)

    @classmethod
    async def open(
        cls, js: JetStreamContext, bucket: str, key: bytes, *, replicas: int = 1
    ) -> StateStore:
        try:
            kv = await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            try:
                kv = await js.create_key_value(
                    KeyValueConfig(
                        bucket=bucket, history=1, replicas=replicas, storage=StorageType.FILE
                    )
                )
            except nats.js.errors.BadRequestError:
                kv = await js.key_value(bucket)
        return cls(kv, key)

    async def _get(self, key: str) -> bytes | None:
        try:
            entry = await self.kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return entry.value or None

    async def load(self) -> DrState:
        return self.decode_state(await self._get(STATE_KEY))

    async def save(self, state: DrState) -> None:
        await self.kv.put(STATE_KEY, self.seal(STATE_KEY, _enc.encode(state)))

    async def load_progress(self) -> Progress:
        raw = await self._get(PROGRESS_KEY)
        if raw is None:
            return Progress()
        return msgspec.json.decode(self.open_entry(PROGRESS_KEY, raw), type=Progress)

    async def save_progress(self, progress: Progress) -> None:
        await self.kv.put(PROGRESS_KEY, self.seal(PROGRESS_KEY, _enc.encode(progress)))


def bucket_for(settings: Settings, suffix: str) -> str:
    """Bucket names as the secrets service makes them (`<cluster>-secrets`, `<cluster>-dr`)."""
    return f"{settings.cluster_name}-{suffix}".replace(".", "-")
