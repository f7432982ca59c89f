"""A key version's asymmetric keys as loaded objects, kept on the cached copy of the key (parsing
a PEM or DER key, or deriving an Ed25519 public point, costs more than the signature)."""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from services.secrets.engines.transit.ed25519_signer import Ed25519Signer
from services.secrets.engines.transit.keyobjects import kept
from services.secrets.engines.transit.policy import Policy, TransitError


def _public(formatted: str) -> Any:
    if formatted.startswith("-----"):
        return serialization.load_pem_public_key(formatted.encode())
    return ed25519.Ed25519PublicKey.from_public_bytes(base64.b64decode(formatted))


def public_of(p: Policy, ver: int) -> Any:
    """Version `ver`'s public key, from Vault's formatting (SPKI PEM, or base64 for Ed25519)."""
    return kept(p, ("public", ver), _public, p.version(ver).public_key)


def _private(p: Policy, ver: int) -> Any:
    e = p.version(ver)
    if p.type == "ed25519":
        return Ed25519Signer(e.key[:32])
    if not e.private_der:
        raise TransitError("requested version for signing does not contain a private part")
    return serialization.load_der_private_key(e.private_der, password=None)


def private_of(p: Policy, ver: int) -> Any:
    return kept(p, ("private", ver), _private, p, ver)
