"""The barrier's keyring: the AES-256-GCM keys, by term, that encrypt every stored value.

A stored value is `[term: u32 BE][0x02][12-byte nonce][ciphertext + 16-byte tag]`. Version 2
binds the value to its storage path by using the path as associated data, so a blob copied to
another key fails to decrypt instead of silently serving one secret under another name.

Rotation adds a term and makes it active; old terms stay so existing values remain readable.
The keyring itself is stored wrapped with the root key, and the root key with the unseal key, via
`seal_with` / `open_with` (nonce || ciphertext, no term header).

No error raised here ever carries key or plaintext material: messages are fixed strings plus
public numbers (term, version, lengths).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "KEY_SIZE",
    "NONCE_SIZE",
    "TAG_SIZE",
    "VALUE_VERSION",
    "BarrierError",
    "Keyring",
    "UnknownTerm",
    "open_with",
    "seal_with",
]

KEY_SIZE = 32  # AES-256
NONCE_SIZE = 12  # the GCM standard nonce; random per value
TAG_SIZE = 16
VALUE_VERSION = 2  # version 2 = the storage path is the AAD
_TERM_SIZE = 4
_HEADER_SIZE = _TERM_SIZE + 1
_MAX_TERM = 0xFFFFFFFF  # the term is a u32 on disk
_KEYRING_FORMAT = 1


class BarrierError(ValueError):
    """A value or wrapped key could not be encrypted or decrypted; the message is safe to log."""


class UnknownTerm(BarrierError):
    """A value written under a term this keyring does not have yet (another replica rotated)."""


class _TermRecord(msgspec.Struct, frozen=True):
    term: int
    key: bytes  # base64 in JSON; the document itself is only ever stored wrapped
    installed_at: datetime


class _KeyringDocument(msgspec.Struct, frozen=True):
    format: int
    active_term: int
    terms: list[_TermRecord]


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_KeyringDocument)


def _check_key(key: bytes) -> None:
    if len(key) != KEY_SIZE:
        raise BarrierError(f"key must be {KEY_SIZE} bytes, got {len(key)}")


def _check_term(term: int) -> None:
    if not 1 <= term <= _MAX_TERM:
        raise BarrierError(f"term must be between 1 and {_MAX_TERM}, got {term}")


class Keyring:
    """Keys by term plus the active term used for new writes."""

    __slots__ = ("_active", "_ciphers", "_installed", "_keys", "encryptions")

    def __init__(
        self,
        keys: Mapping[int, bytes],
        active_term: int,
        installed_at: Mapping[int, datetime] | None = None,
    ) -> None:
        if not keys:
            raise BarrierError("a keyring needs at least one term")
        for term, key in keys.items():
            _check_term(term)
            _check_key(key)
        if active_term not in keys:
            raise BarrierError(f"active term {active_term} is not in the keyring")
        now = datetime.now(UTC)
        installed_at = installed_at or {}
        self._keys: dict[int, bytes] = {term: bytes(key) for term, key in keys.items()}
        self._installed: dict[int, datetime] = {t: installed_at.get(t, now) for t in self._keys}
        # One AESGCM object per term: building it does the AES key schedule, so reuse it.
        self._ciphers: dict[int, AESGCM] = {t: AESGCM(k) for t, k in self._keys.items()}
        self._active = active_term
        # Values encrypted under the active term by this replica (sys/key-status).
        self.encryptions = 0

    @classmethod
    def new(cls) -> Keyring:
        """A fresh keyring with a random key at term 1, as after `sys/init`."""
        return cls({1: secrets.token_bytes(KEY_SIZE)}, active_term=1)

    @property
    def active_term(self) -> int:
        return self._active

    @property
    def terms(self) -> list[int]:
        return sorted(self._keys)

    def installed_at(self, term: int) -> datetime:
        if term not in self._installed:
            raise BarrierError(f"unknown key term {term}")
        return self._installed[term]

    def __repr__(self) -> str:
        # Deliberately without keys, so a keyring in a log line or traceback leaks nothing.
        return f"Keyring(active_term={self._active}, terms={self.terms})"

    def rotate(self) -> int:
        """Install a new random key one term above the highest and make it active."""
        term = max(self._keys) + 1
        _check_term(term)
        key = secrets.token_bytes(KEY_SIZE)
        self._keys[term] = key
        self._installed[term] = datetime.now(UTC)
        self._ciphers[term] = AESGCM(key)
        # Switch last: until here every write still uses a term that is fully installed.
        self._active = term
        self.encryptions = 0
        return term

    def encrypt(self, path: str, plaintext: bytes) -> bytes:
        """Encrypt a value for `path` with the active term."""
        header = self._active.to_bytes(_TERM_SIZE, "big") + bytes([VALUE_VERSION])
        nonce = secrets.token_bytes(NONCE_SIZE)
        self.encryptions += 1
        sealed = self._ciphers[self._active].encrypt(nonce, plaintext, path.encode())
        return header + nonce + sealed

    def decrypt(self, path: str, blob: bytes) -> bytes:
        """Decrypt a value read from `path`; raises BarrierError if it is not authentic there."""
        if len(blob) < _HEADER_SIZE + NONCE_SIZE + TAG_SIZE:
            raise BarrierError(f"encrypted value is too short ({len(blob)} bytes)")
        term = int.from_bytes(blob[:_TERM_SIZE], "big")
        version = blob[_TERM_SIZE]
        if version != VALUE_VERSION:
            raise BarrierError(f"unknown encrypted value version {version}")
        cipher = self._ciphers.get(term)
        if cipher is None:
            raise UnknownTerm(f"encrypted value uses unknown key term {term}")
        nonce = blob[_HEADER_SIZE : _HEADER_SIZE + NONCE_SIZE]
        try:
            return cipher.decrypt(nonce, blob[_HEADER_SIZE + NONCE_SIZE :], path.encode())
        except InvalidTag:
            # `from None`: the cause carries nothing useful and keeps tracebacks short.
            raise BarrierError(
                f"encrypted value failed authentication (key term {term}): "
                "it was tampered with or belongs to another path"
            ) from None

    def to_bytes(self) -> bytes:
        """The keyring as JSON; it contains every key, so store it only wrapped by the root key."""
        document = _KeyringDocument(
            format=_KEYRING_FORMAT,
            active_term=self._active,
            terms=[
                _TermRecord(term=t, key=self._keys[t], installed_at=self._installed[t])
                for t in self.terms
            ],
        )
        return _encoder.encode(document)

    @classmethod
    def from_bytes(cls, data: bytes) -> Keyring:
        try:
            document = _decoder.decode(data)
        except msgspec.MsgspecError:
            # The decoder's message could quote input, and the input is key material.
            raise BarrierError("stored keyring is malformed") from None
        if document.format != _KEYRING_FORMAT:
            raise BarrierError(f"unknown keyring format {document.format}")
        terms = [record.term for record in document.terms]
        if len(set(terms)) != len(terms):
            raise BarrierError("stored keyring lists a term twice")
        return cls(
            {record.term: record.key for record in document.terms},
            active_term=document.active_term,
            installed_at={record.term: record.installed_at for record in document.terms},
        )


def seal_with(key: bytes, data: bytes, aad: bytes) -> bytes:
    """Encrypt `data` under `key` as nonce || ciphertext+tag (for wrapping keys, not values)."""
    _check_key(key)
    nonce = secrets.token_bytes(NONCE_SIZE)
    return nonce + AESGCM(bytes(key)).encrypt(nonce, data, aad)


def open_with(key: bytes, blob: bytes, aad: bytes) -> bytes:
    """Reverse `seal_with`; a wrong key, wrong AAD or tampering raises BarrierError."""
    _check_key(key)
    if len(blob) < NONCE_SIZE + TAG_SIZE:
        raise BarrierError(f"sealed blob is too short ({len(blob)} bytes)")
    try:
        return AESGCM(bytes(key)).decrypt(blob[:NONCE_SIZE], blob[NONCE_SIZE:], aad)
    except InvalidTag:
        raise BarrierError("sealed blob failed authentication (wrong key or tampered)") from None
