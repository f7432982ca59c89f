"""Sealing a reply to the one requester that holds an ephemeral X25519 key: the requester sends
its public key, the answer is AES-GCM under a key derived (HKDF) from a fresh X25519 exchange,
so whoever else sees the message on the bus learns nothing of what it carries."""

from __future__ import annotations

import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

INFO = b"trellis sched sealbox v1"


class SealError(ValueError):
    pass


def _key(shared: bytes, eph_pub: bytes, rcpt_pub: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt=eph_pub + rcpt_pub, info=INFO).derive(shared)


def seal(recipient_public: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """ephemeral public (32) | nonce (12) | ciphertext."""
    try:
        rcpt = X25519PublicKey.from_public_bytes(recipient_public)
    except ValueError:
        raise SealError("invalid recipient key") from None
    eph = X25519PrivateKey.generate()
    eph_pub = eph.public_key().public_bytes_raw()
    key = _key(eph.exchange(rcpt), eph_pub, recipient_public)
    nonce = os.urandom(12)
    return eph_pub + nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(private: X25519PrivateKey, box: bytes, aad: bytes) -> bytes:
    if len(box) < 44 + 16:
        raise SealError("sealed box too short")
    eph_pub, nonce, ct = box[:32], box[32:44], box[44:]
    mine = private.public_key().public_bytes_raw()
    key = _key(private.exchange(X25519PublicKey.from_public_bytes(eph_pub)), eph_pub, mine)
    try:
        return AESGCM(key).decrypt(nonce, ct, aad)
    except Exception:
        raise SealError("sealed box does not open") from None
