"""A new EC key's SEC1 PEM and its SubjectPublicKeyInfo from one serialisation.

An EC leaf's response shows the key in SEC1 form and its certificate carries the public key's
SPKI: two OpenSSL encodings and a public-key object, about a tenth of the op. SEC1's
ECPrivateKey (RFC 5915) already holds the curve and the public point, and a named-curve SPKI
(RFC 5480) is only those two behind the id-ecPublicKey OID, so both come from the one DER.
tests/unit/test_crypto_ec_forms.py checks both against `cryptography`'s own encodings.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from services.crypto.x509_leaf import content, oid_der, pem, tlv

_EC_PUBLIC_KEY = oid_der("1.2.840.10045.2.1")


def sec1_and_spki(key: ec.EllipticCurvePrivateKey) -> tuple[str, bytes]:
    """(`private_pem(key, "traditional")`, the public key's SPKI DER)."""
    der = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    # ECPrivateKey ::= SEQUENCE { version, privateKey, [0] parameters, [1] publicKey }
    fields: dict[int, bytes] = {}
    pos, end = content(der, 0)
    while pos < end:
        start, stop = content(der, pos)
        fields[der[pos]] = der[start:stop]
        pos = stop
    spki = tlv(0x30, tlv(0x30, _EC_PUBLIC_KEY + fields[0xA0]) + fields[0xA1])
    return pem(der, "EC PRIVATE KEY"), spki
