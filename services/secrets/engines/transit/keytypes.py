"""Transit's key types and what each can do, with Vault's names and numbers (backups carry the
number)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyType:
    name: str
    vault_id: int  # keysutil.KeyType in Vault's policy JSON
    encrypt: bool = False
    sign: bool = False
    derive: bool = False
    key_bytes: int = 0  # symmetric key length
    curve: str = ""  # ECDSA: the name Vault prints for the key ("P-256")
    rsa_bits: int = 0

    @property
    def symmetric(self) -> bool:
        return self.key_bytes > 0 and self.name != "hmac"

    @property
    def is_rsa(self) -> bool:
        return self.rsa_bits > 0

    @property
    def is_ec(self) -> bool:
        return bool(self.curve)

    @property
    def hashes_input(self) -> bool:
        return self.is_rsa or self.is_ec


KEY_TYPES: dict[str, KeyType] = {
    kt.name: kt
    for kt in (
        KeyType("aes256-gcm96", 0, encrypt=True, derive=True, key_bytes=32),
        KeyType("ecdsa-p256", 1, sign=True, curve="P-256"),
        KeyType("ed25519", 2, sign=True, derive=True),
        KeyType("rsa-2048", 3, encrypt=True, sign=True, rsa_bits=2048),
        KeyType("rsa-4096", 4, encrypt=True, sign=True, rsa_bits=4096),
        KeyType("chacha20-poly1305", 5, encrypt=True, derive=True, key_bytes=32),
        KeyType("ecdsa-p384", 6, sign=True, curve="P-384"),
        KeyType("ecdsa-p521", 7, sign=True, curve="P-521"),
        KeyType("aes128-gcm96", 8, encrypt=True, derive=True, key_bytes=16),
        KeyType("rsa-3072", 9, encrypt=True, sign=True, rsa_bits=3072),
        KeyType("hmac", 10, key_bytes=32),
    )
}
BY_VAULT_ID = {kt.vault_id: kt for kt in KEY_TYPES.values()}
HMAC_MIN_BYTES, HMAC_MAX_BYTES = 32, 512


def key_type(name: str) -> KeyType | None:
    return KEY_TYPES.get(name.strip().lower())
