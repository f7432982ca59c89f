"""Data keys kept by the secrets service: a service that must encrypt data at rest outside the
barrier (the workspace service's states and variables) asks the secrets service for a named
32-byte key. The key lives only in the barrier; on the bus it travels sealed to an X25519 key
the requester made for that one request, so a subscriber of the subject learns nothing.

Who may ask: the request is signed by the requester's service key and carries that key's
certificate (shared/service_identity.py), so the secrets service hands a key only to a genuine
replica of the service the key belongs to (`workspace/...` to the workspace service), not to
whoever NATS lets publish on the subject. The signature covers a timestamp and the one-time
key, and the secrets service refuses a one-time key it has seen (replays)."""

from __future__ import annotations

import os
import struct
import time

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shared.service_identity import ServiceKey, verify_service

KEY_BYTES = 32
_INFO = b"trellis data key transport"
_SIGNED = b"trellis data key request v1"


class DataKeyRequest(msgspec.Struct, kw_only=True):
    name: str  # e.g. "workspace/state": one key per purpose
    public_key: bytes  # the requester's one-time X25519 public key
    service: str = ""  # the requesting service, whose certified key signed this request
    service_public: bytes = b""
    certificate: bytes = b""
    sent: float = 0.0
    signature: bytes = b""


def signed_message(cluster: str, request: DataKeyRequest) -> bytes:
    """What the requester signs: everything but the signature, bound to the cluster."""
    return b"\x00".join(
        (
            _SIGNED,
            cluster.encode(),
            request.service.encode(),
            request.name.encode(),
            request.public_key,
            struct.pack(">d", request.sent),
        )
    )


class DataKeyReply(msgspec.Struct, kw_only=True):
    public_key: bytes  # the responder's one-time X25519 public key
    nonce: bytes
    sealed_key: bytes


def _transport_key(private: X25519PrivateKey, peer_public: bytes, name: str) -> bytes:
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    return HKDF(hashes.SHA256(), 32, salt=None, info=_INFO + b"|" + name.encode()).derive(shared)


def seal_for(request: DataKeyRequest, data_key: bytes) -> DataKeyReply:
    """The responder's side: `data_key` encrypted to the requester's one-time key."""
    private = X25519PrivateKey.generate()
    nonce = os.urandom(12)
    key = _transport_key(private, request.public_key, request.name)
    sealed = AESGCM(key).encrypt(nonce, data_key, request.name.encode())
    return DataKeyReply(
        public_key=private.public_key().public_bytes_raw(), nonce=nonce, sealed_key=sealed
    )


def new_request(
    name: str, signer: ServiceKey, cluster: str
) -> tuple[X25519PrivateKey, DataKeyRequest]:
    """A request for `name` with a fresh one-time key, signed as `signer`'s service."""
    private = X25519PrivateKey.generate()
    req = DataKeyRequest(
        name=name,
        public_key=private.public_key().public_bytes_raw(),
        service=signer.service,
        service_public=signer.public,
        certificate=signer.certificate,
        sent=time.time(),
    )
    req.signature = signer.signing_key.sign(signed_message(cluster, req))
    return private, req


def open_reply(private: X25519PrivateKey, request: DataKeyRequest, reply: DataKeyReply) -> bytes:
    """The requester's side; raises cryptography's InvalidTag on a forged or altered reply."""
    key = _transport_key(private, reply.public_key, request.name)
    data_key = AESGCM(key).decrypt(reply.nonce, reply.sealed_key, request.name.encode())
    if len(data_key) != KEY_BYTES:
        raise ValueError("data key of the wrong length")
    return data_key


MAX_SKEW = 30.0  # seconds a request may be old (or early)
_SERVES = {"workspace", "scheduler"}  # the services that may hold data keys


class RequestRefused(Exception):
    """Not a genuine request from the service the key belongs to; the message says why."""


class RequestChecker:
    """The secrets service's check of who asks: a certificate by the cluster key for the
    service the key name belongs to, that service's signature, a fresh timestamp and a
    one-time key never seen before (a recorded request cannot be replayed)."""

    def __init__(self, cluster_public: Ed25519PublicKey, cluster: str) -> None:
        self.cluster_public = cluster_public
        self.cluster = cluster
        self._seen: dict[bytes, float] = {}

    def check(self, req: DataKeyRequest, now: float | None = None) -> None:
        now = time.time() if now is None else now
        owner = req.name.split("/", 1)[0]
        if req.service not in _SERVES or owner != req.service:
            raise RequestRefused(f"data key {req.name!r} is not for service {req.service!r}")
        try:
            key = verify_service(
                self.cluster_public, req.service, req.service_public, req.certificate
            )
            key.verify(req.signature, signed_message(self.cluster, req))
        except InvalidSignature:
            raise RequestRefused("the request is not signed by a genuine service replica") from None
        if not abs(now - req.sent) <= MAX_SKEW:  # also false for NaN
            raise RequestRefused("stale data key request")
        if req.public_key in self._seen:
            raise RequestRefused("replayed data key request")
        self._seen[req.public_key] = now + 2 * MAX_SKEW
        if len(self._seen) > 1024:
            self._seen = {k: t for k, t in self._seen.items() if t > now}
