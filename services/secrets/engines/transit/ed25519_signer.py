"""Ed25519 signing through libsodium (PyNaCl), the transit engine's in-process signer.

An Ed25519 signature is deterministic (RFC 8032): libsodium and OpenSSL give the same bytes for
the same seed and message, so the choice of library shows only in the cost. Measured on the
2-core dev machine: `cryptography`'s `sign` (OpenSSL's EVP interface, a context built per call)
takes ~47 us, libsodium's `crypto_sign` ~26 us, and the secrets replica is the busiest process of
an Ed25519 sign load (docs/performance.md). Verification stays with `cryptography`: its answers to
malformed signatures and keys are the ones the tests and Vault's callers already rely on.
"""

from __future__ import annotations

from functools import cached_property

import nacl.bindings
from cryptography.hazmat.primitives.asymmetric import ed25519

SIGNATURE_BYTES = nacl.bindings.crypto_sign_BYTES


class Ed25519Signer:
    """An Ed25519 private key from its 32-byte seed: `sign` and `public_key` as
    `cryptography`'s Ed25519PrivateKey has them."""

    __slots__ = ("__dict__", "_secret")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != nacl.bindings.crypto_sign_SEEDBYTES:
            raise ValueError("an Ed25519 seed is 32 bytes")
        # libsodium's secret key: the seed followed by the public point it computes once here.
        _, self._secret = nacl.bindings.crypto_sign_seed_keypair(seed)

    def sign(self, data: bytes) -> bytes:
        # crypto_sign returns the signature followed by the message.
        return nacl.bindings.crypto_sign(data, self._secret)[:SIGNATURE_BYTES]

    @cached_property
    def _public(self) -> ed25519.Ed25519PublicKey:
        return ed25519.Ed25519PublicKey.from_public_bytes(self._secret[32:])

    def public_key(self) -> ed25519.Ed25519PublicKey:
        return self._public
