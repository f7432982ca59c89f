"""Arguments many crypto calls repeat (an issuer's certificate and key, a role's extensions), sent
to a worker once and then named by their digest instead of travelling with every call.

A call names them by `ref` (the SHA-256 of their msgpack bytes); a worker that does not hold them
answers `unknown_ref`, and the caller sends the call again with the bytes (`CryptoRequest.shared`).
The worker keeps them under the digest of the bytes it received, never under the one it was told,
so a name can only ever stand for those exact bytes: an issuer's new key or certificate is a new
name, and a restarted worker only costs one resend. Held in the worker's memory only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

# Digests a worker holds at once; past this it starts over (each costs its callers one resend).
STORE_MAX = 256


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True, slots=True)
class SharedArgs:
    """What the caller keeps: the encoded arguments and their name."""

    raw: bytes
    ref: str

    @classmethod
    def of(cls, args: dict[str, Any]) -> SharedArgs:
        raw = msgspec.msgpack.encode(args)
        return cls(raw, digest(raw))


def merge(shared: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments over the shared ones; a dict in both (a CertSpec) merged one level
    down, the call's fields winning."""
    out = {**shared, **args}
    for name, value in args.items():
        base = shared.get(name)
        if isinstance(base, dict) and isinstance(value, dict):
            out[name] = {**base, **value}
    return out


class UnknownRef(Exception):
    """The worker does not hold the arguments a call names."""


class SharedStore:
    """A worker's shared arguments by digest."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}

    def resolve(self, ref: str, raw: bytes, args: dict[str, Any]) -> dict[str, Any]:
        """`args` completed with the shared arguments `ref` names (`raw`, when sent, is them)."""
        if raw:
            ref = digest(raw)
            shared = self.entries.get(ref)
            if shared is None:
                shared = msgspec.msgpack.decode(raw, type=dict[str, Any])
                if len(self.entries) >= STORE_MAX:
                    self.entries.clear()
                self.entries[ref] = shared
        else:
            shared = self.entries.get(ref)  # type: ignore[assignment]
            if shared is None:
                raise UnknownRef(ref)
        return merge(shared, args)
