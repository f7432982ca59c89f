"""The service-account JWT of a kubernetes login: parsed, its signature checked against the
configured `pem_keys` (when there are any, as Vault), its time, issuer and audience claims
validated, and the service account it names read from the legacy or projected claims.

Failures raise JwtError with a message that never quotes the token."""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
_HASHES = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
# The algorithms Vault's kubernetes method accepts (RFC 7518 3.1).
ALGORITHMS = {f"{kind}{bits}" for kind in ("RS", "ES") for bits in _HASHES}
# Clock skew allowed on exp and nbf.
LEEWAY = 60
_PREFIX = "kubernetes.io/serviceaccount/"


class JwtError(ValueError):
    pass


def _b64(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise JwtError("the JWT is not valid base64url") from None


def parse_public_key(pem: str) -> PublicKey:
    """A PEM public key, or the public key of a PEM certificate (Vault's ParsePublicKeyPEM)."""
    raw = pem.encode()
    key: Any
    try:
        key = serialization.load_pem_public_key(raw)
    except ValueError:
        try:
            key = x509.load_pem_x509_certificate(raw).public_key()
        except ValueError:
            raise JwtError("data does not contain any valid public keys") from None
    if not isinstance(key, (rsa.RSAPublicKey, ec.EllipticCurvePublicKey)):
        raise JwtError("only RSA and ECDSA public keys are supported")
    return key


def _verify(key: PublicKey, alg: str, signed: bytes, sig: bytes) -> bool:
    digest = _HASHES[alg[2:]]()
    try:
        if alg.startswith("RS"):
            if not isinstance(key, rsa.RSAPublicKey):
                return False
            key.verify(sig, signed, padding.PKCS1v15(), digest)
        else:
            if not isinstance(key, ec.EllipticCurvePublicKey) or len(sig) % 2:
                return False
            half = len(sig) // 2
            der = encode_dss_signature(
                int.from_bytes(sig[:half], "big"), int.from_bytes(sig[half:], "big")
            )
            key.verify(der, signed, ec.ECDSA(digest))
    except InvalidSignature:
        return False
    return True


def _audiences(claims: dict[str, Any]) -> list[str]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return [aud]
    if isinstance(aud, list):
        return [a for a in aud if isinstance(a, str)]
    return []


def validated_claims(
    token: str, keys: list[PublicKey], *, issuer: str, audience: str, now: float | None = None
) -> dict[str, Any]:
    """The claims of a compact JWS that passes every configured check."""
    parts = token.split(".")
    if len(parts) != 3:
        raise JwtError("compact JWS format must have three parts")
    try:
        header = json.loads(_b64(parts[0]))
        claims = json.loads(_b64(parts[1]))
    except ValueError:
        raise JwtError("the JWT header or claims are not JSON") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise JwtError("the JWT header or claims are not JSON objects")
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise JwtError(f"token is signed with an unsupported algorithm: {str(alg)[:16]!r}")
    if keys:
        signed = f"{parts[0]}.{parts[1]}".encode()
        sig = _b64(parts[2])
        if not any(_verify(k, alg, signed, sig) for k in keys):
            raise JwtError("failed to verify token signature")
    at = time.time() if now is None else now
    exp, nbf = claims.get("exp"), claims.get("nbf")
    if isinstance(exp, (int, float)) and at > exp + LEEWAY:
        raise JwtError("token is expired (exp)")
    if isinstance(nbf, (int, float)) and at < nbf - LEEWAY:
        raise JwtError("token is not yet valid (nbf)")
    if issuer and claims.get("iss") != issuer:
        raise JwtError("invalid issuer (iss) claim")
    if audience and audience not in _audiences(claims):
        raise JwtError(
            "invalid audience (aud) claim: audience claim does not match any expected audience"
        )
    return claims


@dataclass(frozen=True)
class ServiceAccount:
    name: str
    namespace: str
    uid: str
    secret_name: str
    audiences: tuple[str, ...]

    @classmethod
    def from_claims(cls, claims: dict[str, Any]) -> ServiceAccount:
        """Projected tokens nest the account under `kubernetes.io`; legacy ones use flat keys."""
        name = str(claims.get(_PREFIX + "service-account.name", ""))
        uid = str(claims.get(_PREFIX + "service-account.uid", ""))
        namespace = str(claims.get(_PREFIX + "namespace", ""))
        projected = claims.get("kubernetes.io")
        if isinstance(projected, dict):
            namespace = str(projected.get("namespace", ""))
            account = projected.get("serviceaccount")
            if isinstance(account, dict):
                name = str(account.get("name", ""))
                uid = str(account.get("uid", ""))
        return cls(
            name=name,
            namespace=namespace,
            uid=uid,
            secret_name=str(claims.get(_PREFIX + "secret.name", "")),
            audiences=tuple(_audiences(claims)),
        )
