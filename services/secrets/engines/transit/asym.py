"""Loaded asymmetric keys of a key version, cached: parsing a PEM or DER key costs more than
the signature it is needed for."""

from __future__ import annotations

import base64
import functools
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from services.crypto.ops_transit import load_der
from services.secrets.engines.transit.policy import KeyVersion, Policy, TransitError


@functools.lru_cache(maxsize=1024)
def public_of(formatted: str) -> Any:
    """A version's public key from Vault's formatting (SPKI PEM, or base64 for Ed25519)."""
    if formatted.startswith("-----"):
        return serialization.load_pem_public_key(formatted.encode())
    return ed25519.Ed25519PublicKey.from_public_bytes(base64.b64decode(formatted))


@functools.lru_cache(maxsize=1024)
def _ed25519(key: bytes) -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.from_private_bytes(key[:32])


def private_of(p: Policy, e: KeyVersion) -> Any:
    if p.type == "ed25519":
        return _ed25519(e.key)
    if not e.private_der:
        raise TransitError("requested version for signing does not contain a private part")
    return load_der(e.private_der)
