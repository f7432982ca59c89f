"""Activation tokens: what a primary hands a new secondary, and how the secondary opens it.

The default form is a response-wrapping token of the primary, shown as a compact JWT (ES256,
signed with the primary's cluster TLS key) whose claims carry `jti` (the wrapping token) and
`addr` (the primary's API address), as Vault's are. The secondary unwraps `jti` against `addr`
(or `primary_api_addr`), gets the Activation below, pins the cluster certificate it names, and
checks the JWT's signature with that certificate's key: a token not made by that primary fails.

The alternative (`secondary_public_key`) encrypts the Activation to an X25519 key the secondary
made with `secondary/generate-public-key`, so activation needs no call to the primary's API.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import time
from typing import Any

import aiohttp
import msgspec
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shared.errors import ServiceError

SEALED_PREFIX = "tdr1."
_INFO = b"trellis dr activation v1"


class Activation(msgspec.Struct, kw_only=True):
    version: int = 1
    cluster_id: str
    secondary_id: str
    primary_cluster_addr: str
    primary_api_addr: str = ""
    fingerprint: str  # of the primary's cluster TLS certificate
    secret: str  # base64: the secondary's channel secret
    expires_at: float


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def bad_token(why: str) -> ServiceError:
    return ServiceError(400, f"invalid activation token: {why}")


# ---- the wrapped form ---------------------------------------------------------------------
def sign_jwt(claims: dict[str, Any], key_pem: str) -> str:
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    head = _b64url(json.dumps({"alg": "ES256", "typ": "JWT"}).encode())
    body = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    r, s = decode_dss_signature(key.sign(f"{head}.{body}".encode(), ec.ECDSA(hashes.SHA256())))
    return f"{head}.{body}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT-shaped token, or None when it is not one (a bare wrapping token)."""
    parts = token.split(".")
    if len(parts) != 3 or token.startswith(SEALED_PREFIX):
        return None
    try:
        claims = json.loads(_unb64url(parts[1]))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


def verify_jwt(token: str, cert_der: bytes) -> bool:
    parts = token.split(".")
    try:
        sig = _unb64url(parts[2])
        key = x509.load_der_x509_certificate(cert_der).public_key()
        if len(sig) != 64 or not isinstance(key, ec.EllipticCurvePublicKey):
            return False
        der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
        key.verify(der, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256()))
        return True
    except (InvalidSignature, ValueError, IndexError):
        return False


def _ssl_for(addr: str, ca_file: str, ca_path: str) -> ssl.SSLContext | bool:
    if not addr.startswith("https://"):
        return False
    try:
        if ca_file or ca_path:
            return ssl.create_default_context(cafile=ca_file or None, capath=ca_path or None)
    except (OSError, ssl.SSLError) as exc:
        raise ServiceError(
            400, f"cannot load the CA given by ca_file/ca_path: {exc.strerror or exc}"
        ) from None
    return ssl.create_default_context()


async def unwrap(
    addr: str, wrapping_token: str, *, ca_file: str = "", ca_path: str = "", wait: float = 15.0
) -> Activation:
    """Unwrap the activation token against the primary's API (it spends the token)."""
    if not addr.startswith(("http://", "https://")):
        raise ServiceError(
            400, f"the primary API address {addr!r} must start with http:// or https://"
        )
    headers = {"X-Svc-Token": wrapping_token, "X-Svc-Request": "true"}
    url = addr.rstrip("/") + "/v1/sys/wrapping/unwrap"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=wait)) as s,
            s.post(url, json={}, headers=headers, ssl=_ssl_for(addr, ca_file, ca_path)) as resp,
        ):
            text = await resp.text()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise ServiceError(
            502, f"cannot reach the primary's API at {addr}: {exc or type(exc).__name__}"
        ) from None
    if status != 200:
        raise bad_token(
            "the primary refused to unwrap it (expired, revoked, already used, or "
            "not issued by that primary)"
        )
    try:
        data = json.loads(text).get("data") or {}
        return msgspec.convert(data, Activation)
    except (ValueError, AttributeError, msgspec.ValidationError):
        raise bad_token("it does not wrap a DR secondary activation") from None


# ---- the encrypted form -------------------------------------------------------------------
def new_keypair() -> tuple[str, str]:
    """(private, public), both base64 raw X25519 keys."""
    key = X25519PrivateKey.generate()
    return (
        base64.b64encode(key.private_bytes_raw()).decode(),
        base64.b64encode(key.public_key().public_bytes_raw()).decode(),
    )


def _kdf(shared: bytes, eph_public: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt=eph_public, info=_INFO).derive(shared)


def seal_for(public_key_b64: str, activation: Activation) -> str:
    try:
        peer = X25519PublicKey.from_public_bytes(base64.b64decode(public_key_b64, validate=True))
    except ValueError:
        raise ServiceError(
            400, "secondary_public_key is not a key made by secondary/generate-public-key"
        ) from None
    eph = X25519PrivateKey.generate()
    eph_pub = eph.public_key().public_bytes_raw()
    nonce = os.urandom(12)
    ct = AESGCM(_kdf(eph.exchange(peer), eph_pub)).encrypt(
        nonce, msgspec.json.encode(activation), eph_pub
    )
    return SEALED_PREFIX + _b64url(eph_pub + nonce + ct)


def open_sealed(token: str, private_key_b64: str) -> Activation:
    if not private_key_b64:
        raise bad_token(
            "it is encrypted to a public key, and this cluster has not generated "
            "one (secondary/generate-public-key)"
        )
    try:
        raw = _unb64url(token[len(SEALED_PREFIX) :])
        eph_pub, nonce, ct = raw[:32], raw[32:44], raw[44:]
        key = X25519PrivateKey.from_private_bytes(base64.b64decode(private_key_b64))
        plain = AESGCM(
            _kdf(key.exchange(X25519PublicKey.from_public_bytes(eph_pub)), eph_pub)
        ).decrypt(nonce, ct, eph_pub)
        activation = msgspec.json.decode(plain, type=Activation)
    except Exception:
        raise bad_token("it was not encrypted to this cluster's public key") from None
    if activation.expires_at < time.time():
        raise bad_token("it has expired")
    return activation
