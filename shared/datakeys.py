"""Data keys kept by the secrets service: a service that must encrypt data at rest outside the
barrier (the workspace service's states and variables) asks the secrets service for a named
32-byte key. The key lives only in the barrier; on the bus it travels sealed to an X25519 key
the requester made for that one request, so a subscriber of the subject learns nothing."""

from __future__ import annotations

import os

import msgspec
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY_BYTES = 32
_INFO = b"trellis data key transport"


class DataKeyRequest(msgspec.Struct, kw_only=True):
    name: str  # e.g. "workspace/state": one key per purpose
    public_key: bytes  # the requester's one-time X25519 public key


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


def new_request(name: str) -> tuple[X25519PrivateKey, DataKeyRequest]:
    private = X25519PrivateKey.generate()
    return private, DataKeyRequest(name=name, public_key=private.public_key().public_bytes_raw())


def open_reply(private: X25519PrivateKey, request: DataKeyRequest, reply: DataKeyReply) -> bytes:
    """The requester's side; raises cryptography's InvalidTag on a forged or altered reply."""
    key = _transport_key(private, reply.public_key, request.name)
    data_key = AESGCM(key).decrypt(reply.nonce, reply.sealed_key, request.name.encode())
    if len(data_key) != KEY_BYTES:
        raise ValueError("data key of the wrong length")
    return data_key
