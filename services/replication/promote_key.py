"""What lets a promoted DR secondary unseal itself: the primary's unseal key (KEK), kept
wrapped under the DR operation token that the ceremony proved it with.

Generating an operation token (optoken.py) combines a threshold of the primary's unseal key
shares and checks that the result opens the primary's root key. At that moment the cluster
holds the KEK; instead of forgetting it, it keeps it encrypted under a key derived from the
new token (HKDF with a random salt, AES-256-GCM, bound to the token's hash), then forgets both
the KEK and the token. The token leaves only OTP- or PGP-encoded, and the cluster keeps its
SHA-256 alone, so until someone presents the token the wrapped KEK is ciphertext under a key
the secondary does not have. Promotion requires the token: then, and only then, the KEK opens
and the promoted cluster unseals with it. docs/bus-security.md ("DR failover") has the
argument.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_INFO = b"trellis dr promotion unseal key v1"
_SALT = 16
_NONCE = 12


def _key(token: str, salt: bytes) -> bytes:
    material = token.encode("utf-8", "surrogatepass")
    return HKDF(hashes.SHA256(), 32, salt=salt, info=_INFO).derive(material)


def wrap(token: str, token_digest: str, kek: bytes) -> bytes:
    """The KEK encrypted under `token` (salt | nonce | ciphertext)."""
    salt, nonce = os.urandom(_SALT), os.urandom(_NONCE)
    box = AESGCM(_key(token, salt)).encrypt(nonce, kek, token_digest.encode())
    return salt + nonce + box


def unwrap(token: str, token_digest: str, blob: bytes) -> bytes | None:
    """The KEK, or None when `blob` was not wrapped under this token."""
    if len(blob) < _SALT + _NONCE + 16:
        return None
    salt, nonce = blob[:_SALT], blob[_SALT : _SALT + _NONCE]
    try:
        return AESGCM(_key(token, salt)).decrypt(
            nonce, blob[_SALT + _NONCE :], token_digest.encode()
        )
    except InvalidTag:
        return None
