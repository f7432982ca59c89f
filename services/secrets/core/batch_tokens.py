"""Batch tokens: `hvb.` + the token's own entry, encrypted under the barrier keyring. Nothing
is stored, so they cost no write, cannot be listed, renewed or revoked, and have no accessor;
they die at their TTL or with their parent (a service token: checked on every use).

The ciphertext is AES-256-GCM under the active keyring term with a fixed associated-data path,
so a batch token made under an older term still opens after `sys/rotate`, and one edited by
its holder does not open at all."""

from __future__ import annotations

import base64
import binascii

import msgspec

from services.secrets.core.tokens import TokenEntry
from services.secrets.keyring import BarrierError, Keyring, UnknownTerm

PREFIX = "hvb."
# The associated data binds the blob to this use: no barrier value (whose associated data is
# its storage path, never containing NUL) opens as a token, nor a token as a value.
_AAD_PATH = "\x00trellis batch token"
MAX_LENGTH = 4096


class _Sealed(msgspec.Struct, array_like=True, omit_defaults=True):
    """The entry in a compact form: the token should stay a header-sized string."""

    policies: list[str]
    namespace_id: str
    creation_time: float
    ttl: int
    expire_time: float
    parent: str = ""
    display_name: str = "token"
    path: str = "auth/token/create"
    meta: dict[str, str] | None = None
    orphan: bool = False
    explicit_max_ttl: int = 0
    role: str = ""
    entity_id: str = ""
    bound_cidrs: list[str] = []


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(_Sealed)


def is_batch(token_id: str) -> bool:
    return token_id.startswith(PREFIX)


def seal(keyring: Keyring, entry: TokenEntry) -> str:
    """The token id of a batch token carrying `entry`; sets entry.id."""
    body = _Sealed(
        policies=entry.policies,
        namespace_id=entry.namespace_id,
        creation_time=entry.creation_time,
        ttl=entry.ttl,
        expire_time=entry.expire_time,
        parent=entry.parent,
        display_name=entry.display_name,
        path=entry.path,
        meta=entry.meta,
        orphan=entry.orphan,
        explicit_max_ttl=entry.explicit_max_ttl,
        role=entry.role,
        entity_id=entry.entity_id,
        bound_cidrs=entry.bound_cidrs,
    )
    blob = keyring.encrypt(_AAD_PATH, _enc.encode(body))
    token = PREFIX + base64.urlsafe_b64encode(blob).rstrip(b"=").decode()
    if entry.namespace_id != "root":
        token += "." + entry.namespace_id
    entry.id = token
    return token


def open_token(keyring: Keyring, token_id: str) -> TokenEntry | None:
    """The entry a batch token carries, or None if it is not one this cluster made. Raises
    UnknownTerm for a token sealed under a term this keyring lacks (re-read it and retry)."""
    if not is_batch(token_id) or len(token_id) > MAX_LENGTH:
        return None
    text = token_id[len(PREFIX) :].split(".", 1)[0]
    try:
        blob = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        body = _dec.decode(keyring.decrypt(_AAD_PATH, blob))
    except UnknownTerm:
        raise
    except (binascii.Error, ValueError, BarrierError, msgspec.DecodeError):
        return None
    return TokenEntry(
        id=token_id,
        accessor="",
        policies=body.policies,
        meta=body.meta,
        display_name=body.display_name,
        path=body.path,
        parent=body.parent,
        creation_time=body.creation_time,
        ttl=body.ttl,
        explicit_max_ttl=body.explicit_max_ttl,
        renewable=False,
        orphan=body.orphan,
        namespace_id=body.namespace_id,
        type="batch",
        entity_id=body.entity_id,
        expire_time=body.expire_time,
        role=body.role,
        bound_cidrs=body.bound_cidrs,
    )
