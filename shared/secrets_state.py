"""The public state of a secrets replica (initialised, sealed, unseal progress, cluster, DR mode:
exactly what sys/health, sys/seal-status and sys/leader tell anyone, nothing secret), as each
replica publishes it on SECRETS_STATE so the gateway can answer those endpoints without a bus
round trip (services/secrets/core/state_publisher.py, services/gateway/local_status.py).

Records are signed with the secrets cluster key, which every process pins: a NATS user without
that key cannot make a gateway report a sealed cluster as unsealed. Each carries its replica's id,
a sequence that only grows and the publisher's clock, so an old record cannot be replayed."""

from __future__ import annotations

import time

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

_CONTEXT = b"trellis secrets state v1\x00"
# A record older (or newer) than this by the receiver's clock is refused: no replays.
MAX_SKEW = 30.0


class SecretsState(msgspec.Struct, kw_only=True, frozen=True):
    initialized: bool
    sealed: bool
    seal_type: str = "shamir"
    threshold: int = 0
    shares: int = 0
    progress: int = 0
    nonce: str = ""
    recovery_seal: bool = False
    dr_mode: str = "disabled"
    cluster_name: str = ""
    cluster_id: str = ""


class StateRecord(msgspec.Struct, kw_only=True):
    node: str
    seq: int
    at: float  # the publisher's wall clock
    state: SecretsState | None  # None: the replica is stopping


class SignedRecord(msgspec.Struct, kw_only=True):
    record: bytes
    signature: bytes


_record_decoder = msgspec.msgpack.Decoder(StateRecord)
_signed_decoder = msgspec.msgpack.Decoder(SignedRecord)


def _message(cluster: str, record: bytes) -> bytes:
    return _CONTEXT + cluster.encode() + b"\x00" + record


def sign(key: Ed25519PrivateKey, cluster: str, record: StateRecord) -> bytes:
    body = msgspec.msgpack.encode(record)
    return msgspec.msgpack.encode(
        SignedRecord(record=body, signature=key.sign(_message(cluster, body)))
    )


def open_record(public: Ed25519PublicKey, cluster: str, data: bytes) -> StateRecord | None:
    """The record in `data` if the cluster key signed it for `cluster` and it is recent."""
    try:
        signed = _signed_decoder.decode(data)
        public.verify(signed.signature, _message(cluster, signed.record))
        record = _record_decoder.decode(signed.record)
    except (msgspec.DecodeError, InvalidSignature):
        return None
    if abs(time.time() - record.at) > MAX_SKEW:
        return None
    return record
