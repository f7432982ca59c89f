"""Signing keys of the identity token issuer: generation on a crypto worker, public JWKs, JWS.

A named key holds its current signing key, the next one (published ahead of use, so verifiers
that cache the JWKS already know it when rotation happens) and the public halves of retired
keys until their verification TTL ends. Private keys stay in the barrier; only public JWKs
are ever served. Signing and the JWK encoding are PyJWT's, over `cryptography`.
"""

from __future__ import annotations

import json
import uuid
from functools import lru_cache
from typing import Any

import jwt
import msgspec
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from jwt.algorithms import get_default_algorithms

# Vault's supported signing algorithms -> the key the crypto worker generates for them.
ALGORITHMS: dict[str, tuple[str, int]] = {
    "RS256": ("rsa", 2048),
    "RS384": ("rsa", 2048),
    "RS512": ("rsa", 2048),
    "ES256": ("ec", 256),
    "ES384": ("ec", 384),
    "ES512": ("ec", 521),
    "EdDSA": ("ed25519", 0),
}


class KeyVersion(msgspec.Struct, kw_only=True):
    kid: str
    public_jwk: dict[str, Any]
    # Empty once the key is retired: a retired key only verifies.
    private_pem: str = ""
    # Unix time after which a retired key leaves the JWKS (0: not retired).
    expire_at: float = 0.0


def public_jwk(private_pem: str, algorithm: str, kid: str) -> dict[str, Any]:
    public = _private_key(private_pem).public_key()
    jwk = json.loads(get_default_algorithms()[algorithm].to_jwk(public))
    return {**jwk, "kid": kid, "alg": algorithm, "use": "sig"}


def key_version(private_pem: str, algorithm: str) -> KeyVersion:
    kid = str(uuid.uuid4())
    return KeyVersion(
        kid=kid, public_jwk=public_jwk(private_pem, algorithm, kid), private_pem=private_pem
    )


def sign(claims: dict[str, Any], key: KeyVersion, algorithm: str) -> str:
    return jwt.encode(claims, _private_key(key.private_pem), algorithm, headers={"kid": key.kid})


def verifying_key(jwk: dict[str, Any]) -> Any:
    """The public key object of a JWK (for jwt.decode)."""
    return jwt.PyJWK(jwk).key


@lru_cache(maxsize=256)
def _private_key(pem: str) -> Any:
    # Parsing an RSA key checks it (milliseconds): parse each key once per process.
    return load_pem_private_key(pem.encode(), password=None)
