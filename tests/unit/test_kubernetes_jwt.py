"""Service-account JWT checks of the kubernetes auth method (services/secrets/auth/
kubernetes_jwt.py): RS256 and ES256 signatures, time, issuer, audience, legacy claims."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from services.secrets.auth.kubernetes_jwt import (
    JwtError,
    ServiceAccount,
    parse_public_key,
    validated_claims,
)

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def sign(claims: dict[str, Any], key: Any, alg: str) -> str:
    head = b64(json.dumps({"alg": alg}).encode())
    body = b64(json.dumps(claims).encode())
    signed = f"{head}.{body}".encode()
    if alg == "RS256":
        sig = key.sign(signed, padding.PKCS1v15(), hashes.SHA256())
    else:
        r, s = decode_dss_signature(key.sign(signed, ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return f"{head}.{body}.{b64(sig)}"


def pem(key: Any) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


LEGACY = {
    "iss": "kubernetes/serviceaccount",
    "kubernetes.io/serviceaccount/namespace": "default",
    "kubernetes.io/serviceaccount/secret.name": "vault-auth-token-abcde",
    "kubernetes.io/serviceaccount/service-account.name": "vault-auth",
    "kubernetes.io/serviceaccount/service-account.uid": "0a1b",
}


@pytest.mark.parametrize(("key", "alg"), [(RSA_KEY, "RS256"), (EC_KEY, "ES256")])
def test_signature_checked_against_pem_keys(key: Any, alg: str) -> None:
    token = sign(LEGACY, key, alg)
    keys = [parse_public_key(pem(key))]
    claims = validated_claims(token, keys, issuer="", audience="")
    account = ServiceAccount.from_claims(claims)
    assert (account.name, account.namespace, account.uid) == ("vault-auth", "default", "0a1b")
    assert account.secret_name == "vault-auth-token-abcde"
    other = [parse_public_key(pem(ec.generate_private_key(ec.SECP256R1())))]
    with pytest.raises(JwtError, match="signature"):
        validated_claims(token, other, issuer="", audience="")
    # Without configured keys the signature is not checked (Vault's behaviour).
    assert validated_claims(token, [], issuer="", audience="") == claims


def test_time_issuer_audience_and_shape() -> None:
    now = time.time()
    with pytest.raises(JwtError, match="expired"):
        validated_claims(sign({"exp": now - 3600}, EC_KEY, "ES256"), [], issuer="", audience="")
    with pytest.raises(JwtError, match="not yet valid"):
        validated_claims(sign({"nbf": now + 3600}, EC_KEY, "ES256"), [], issuer="", audience="")
    token = sign({**LEGACY, "aud": "vault"}, EC_KEY, "ES256")
    with pytest.raises(JwtError, match="issuer"):
        validated_claims(token, [], issuer="https://other", audience="")
    assert validated_claims(token, [], issuer="kubernetes/serviceaccount", audience="vault")
    with pytest.raises(JwtError, match="audience"):
        validated_claims(token, [], issuer="", audience="other")
    with pytest.raises(JwtError, match="three parts"):
        validated_claims("abc.def", [], issuer="", audience="")
    hs = ".".join([b64(json.dumps({"alg": "HS256"}).encode()), b64(b"{}"), b64(b"x")])
    with pytest.raises(JwtError, match="unsupported algorithm"):
        validated_claims(hs, [], issuer="", audience="")
    with pytest.raises(JwtError):
        parse_public_key("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
