"""Transit's symmetric work, byte-compatible with Vault: `vault:v<N>:` + base64(nonce || sealed),
AES-GCM with a 96-bit nonce or ChaCha20-Poly1305, keys derived per context (HKDF-SHA256, or
Vault's legacy SP 800-108 counter mode), convergent nonces from an HMAC of the plaintext."""

from __future__ import annotations

import binascii
import hashlib
import hmac
import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from services.secrets.engines.transit.ed25519_signer import Ed25519Signer
from services.secrets.engines.transit.keyobjects import kept
from services.secrets.engines.transit.policy import (
    CONVERGENT_VERSION,
    KDF_COUNTER,
    Policy,
    TransitError,
)

NONCE_BYTES = 12
PREFIX = "vault:v"
TOO_OLD = "ciphertext or signature version is disallowed by policy (too old)"
MISSING_CONTEXT = (
    "missing 'context' for key derivation; the key was created using a derived key, which "
    "means additional, per-request information must be included in order to perform operations "
    "with the key"
)


def b64decode(value: str, what: str = "input") -> bytes:
    try:
        return binascii.a2b_base64(value, strict_mode=True)  # base64.b64decode(validate=True)
    except ValueError:
        raise TransitError(f"unable to decode {what} as base64") from None


def b64encode(data: bytes) -> str:
    """base64.b64encode(data).decode(), without its Python frame."""
    return binascii.b2a_base64(data, newline=False).decode()


def counter_kdf(key: bytes, context: bytes, bits: int = 256) -> bytes:
    """NIST SP 800-108 counter mode with HMAC-SHA256: Vault's derivation before HKDF."""
    out = b""
    for i in range((bits + 255) // 256):
        block = struct.pack(">I", i) + context + struct.pack(">I", bits)
        out += hmac.new(key, block, hashlib.sha256).digest()
    return out[: bits // 8]


def derive(p: Policy, ver: int, context: bytes, length: int) -> bytes:
    if not context:
        raise TransitError(MISSING_CONTEXT)
    base = p.version(ver).key
    if p.kdf == KDF_COUNTER:
        return counter_kdf(base, context, 256)[:length]
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=context).derive(base)


def _derived_ed25519(p: Policy, ver: int, context: bytes) -> Ed25519Signer:
    return Ed25519Signer(derive(p, ver, context, 32))


def derived_ed25519(p: Policy, ver: int, context: bytes) -> Ed25519Signer:
    """Vault feeds HKDF output to ed25519.GenerateKey as its seed."""
    return kept(p, ("ed25519", ver, context), _derived_ed25519, p, ver, context)


def _cipher(p: Policy, ver: int, context: bytes) -> tuple[AESGCM | ChaCha20Poly1305, bytes]:
    kt = p.kt
    if p.derived:
        # The convergent nonce's HMAC key follows the cipher key in the KDF's output; a shorter
        # output is the same prefix, so decryption finds the same cipher key here.
        extra = 32 if p.convergent_encryption else 0
        material = derive(p, ver, context, kt.key_bytes + extra)
        key, hmac_key = material[: kt.key_bytes], material[kt.key_bytes :]
    else:
        key, hmac_key = p.version(ver).key, b""
    aead = ChaCha20Poly1305(key) if kt.name == "chacha20-poly1305" else AESGCM(key)
    return aead, hmac_key


def cipher(p: Policy, ver: int, context: bytes) -> tuple[AESGCM | ChaCha20Poly1305, bytes]:
    """Version `ver`'s AEAD (under `context` when the key is derived) and the HMAC key of its
    convergent nonces."""
    return kept(p, ("cipher", ver, context if p.derived else b""), _cipher, p, ver, context)


def resolve_encrypt_version(p: Policy, ver: int) -> int:
    if ver == 0:
        return p.latest_version
    if ver < 0:
        raise TransitError("requested version for encryption is negative")
    if ver > p.latest_version:
        raise TransitError("requested version for encryption is higher than the latest key version")
    if ver < p.min_encryption_version:
        raise TransitError(
            "requested version for encryption is less than the minimum encryption key version"
        )
    return ver


def encrypt(p: Policy, ver: int, plaintext: bytes, context: bytes = b"", ad: bytes = b"") -> bytes:
    """The raw (nonce || sealed) bytes for version `ver` (already resolved)."""
    aead, hmac_key = cipher(p, ver, context)
    if p.convergent_encryption:
        if p.version(ver).convergent_version not in (0, CONVERGENT_VERSION):
            raise TransitError("refusing to encrypt with an old convergent encryption version")
        nonce = hmac.new(hmac_key, plaintext, hashlib.sha256).digest()[:NONCE_BYTES]
    else:
        nonce = os.urandom(NONCE_BYTES)
    return nonce + aead.encrypt(nonce, plaintext, ad or None)


def decrypt(p: Policy, ver: int, raw: bytes, context: bytes = b"", ad: bytes = b"") -> bytes:
    aead = cipher(p, ver, context)[0]
    if len(raw) < NONCE_BYTES:
        raise TransitError("invalid ciphertext length")
    try:
        return aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], ad or None)
    except InvalidTag:
        raise TransitError("cipher: message authentication failed") from None


def prefix(ver: int) -> str:
    return f"{PREFIX}{ver}:"


def split_versioned(p: Policy, value: str, what: str = "ciphertext") -> tuple[int, str]:
    """(version, base64 body) of `vault:vN:...`, with Vault's checks and messages."""
    if not value.startswith(PREFIX):
        raise TransitError(f"invalid {what}: no prefix")
    head, sep, body = value[len(PREFIX) :].partition(":")
    if not sep:
        raise TransitError(f"invalid {what}: wrong number of fields")
    try:
        ver = int(head)
    except ValueError:
        raise TransitError(f"invalid {what}: version number could not be decoded") from None
    if ver == 0:
        ver = 1  # Vault's first keys were numbered from zero
    if ver > p.latest_version:
        raise TransitError(f"invalid {what}: version is too new")
    if p.min_decryption_version > 0 and ver < p.min_decryption_version:
        raise TransitError(TOO_OLD)
    return ver, body


def decode_body(body: str, what: str = "ciphertext") -> bytes:
    try:
        return binascii.a2b_base64(body, strict_mode=True)
    except ValueError:
        raise TransitError(f"invalid {what}: could not decode base64") from None
