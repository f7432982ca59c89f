"""Signature and time checks of JWTs presented to the jwt/oidc auth method (PyJWT does the JWS
work), against public keys from the mount's configuration or a provider's JWKS.

Leeways follow Vault's roles: 0 means the default (150 s for exp and nbf, 60 s of clock
skew), -1 means none.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from services.secrets.auth.jwt_claims import as_list

# Vault's default set: no HMAC and no "none", so a public key can never be used as a secret.
DEFAULT_ALGORITHMS = [
    "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA",
]  # fmt: skip
DEFAULT_LEEWAY = 150
DEFAULT_SKEW = 60


class VerifyError(ValueError):
    pass


@dataclass
class Expected:
    algorithms: list[str]
    issuer: str = ""
    audiences: list[str] = field(default_factory=list)
    subject: str = ""
    expiration_leeway: int = 0
    not_before_leeway: int = 0
    clock_skew_leeway: int = 0
    nonce: str | None = None


@dataclass(frozen=True)
class PublicKey:
    key: Any
    kid: str = ""


def pem_keys(pems: list[str]) -> list[PublicKey]:
    """Raises VerifyError naming the key that does not parse."""
    out = []
    for i, pem in enumerate(pems):
        try:
            out.append(PublicKey(load_pem_public_key(pem.strip().encode())))
        except (ValueError, TypeError):
            raise VerifyError(f"error parsing public key {i}") from None
    return out


def jwks_keys(jwks: dict[str, Any]) -> list[PublicKey]:
    """The signing keys of a JWKS; keys of unknown types are skipped, as verifiers do."""
    out = []
    for jwk in jwks.get("keys") or []:
        # Public keys only: a symmetric ("oct") key would turn a published value into a secret.
        if not isinstance(jwk, dict) or jwk.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        if jwk.get("use", "sig") != "sig":
            continue
        try:
            out.append(PublicKey(jwt.PyJWK(jwk).key, str(jwk.get("kid") or "")))
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            continue
    return out


def _leeway(value: int, default: int) -> int:
    return default if value == 0 else max(value, 0)


def _check_times(claims: dict[str, Any], e: Expected) -> None:
    now = time.time()
    skew = _leeway(e.clock_skew_leeway, DEFAULT_SKEW)
    for name in ("exp", "nbf", "iat"):
        if name in claims and not isinstance(claims[name], (int, float)):
            raise VerifyError(f"invalid {name} claim")
    if "exp" in claims and now > claims["exp"] + skew + _leeway(
        e.expiration_leeway, DEFAULT_LEEWAY
    ):
        raise VerifyError("token is expired (exp)")
    if (
        "nbf" in claims
        and now + skew + _leeway(e.not_before_leeway, DEFAULT_LEEWAY) < claims["nbf"]
    ):
        raise VerifyError("token not valid yet (nbf)")
    if "iat" in claims and now + skew < claims["iat"]:
        raise VerifyError("token issued in the future (iat)")


def verify(token: str, keys: list[PublicKey], e: Expected) -> dict[str, Any]:
    """The claims of `token` once its signature, times, issuer, audience and subject check."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise VerifyError("malformed JWT") from None
    if header.get("alg") not in e.algorithms:
        raise VerifyError(f"unsupported signing algorithm {header.get('alg')!r}")
    kid = header.get("kid")
    candidates = [k for k in keys if kid and k.kid == kid] or keys
    options = {"verify_exp": False, "verify_nbf": False, "verify_iat": False, "verify_aud": False}
    claims: dict[str, Any] | None = None
    for candidate in candidates:
        try:
            claims = jwt.decode(token, candidate.key, algorithms=e.algorithms, options=options)
            break
        except (jwt.InvalidSignatureError, jwt.InvalidKeyError, jwt.InvalidAlgorithmError):
            continue
        except TypeError:
            continue  # a key of another type than the header's algorithm (RSA for ES256)
        except jwt.PyJWTError:
            raise VerifyError("malformed JWT") from None
    if claims is None:
        raise VerifyError("failed to verify id token signature")
    _check_times(claims, e)
    if e.issuer and claims.get("iss") != e.issuer:
        raise VerifyError("invalid issuer (iss) claim")
    if e.subject and claims.get("sub") != e.subject:
        raise VerifyError("invalid subject (sub) claim")
    if e.audiences and not set(map(str, as_list(claims.get("aud", [])))) & set(e.audiences):
        raise VerifyError(
            "invalid audience (aud) claim: audience claim does not match any expected audience"
        )
    if e.nonce is not None and claims.get("nonce") != e.nonce:
        raise VerifyError("invalid ID token nonce")
    return claims
