"""Leaf certificates from a template made once per issuer and role: the DER written here, then
one signature by the issuer's key.

`cryptography`'s CertificateBuilder costs a P-256 leaf about three times its key generation and
signature together: the builder is copied per setter, every value is checked and encoded again,
and the extensions a role puts on every leaf (basic constraints, key usages, AKI, AIA, CRL
distribution points, policies) are rebuilt each time. Here those are encoded once (by
`cryptography` itself, `public_bytes()`, so the string types and flags stay the library's) and
kept as bytes; a leaf adds only its own parts (serial, validity, subject, SANs, public key and
the SKI derived from it). The TBSCertificate is the builder's, byte for byte
(tests/unit/test_crypto_x509_leaf.py compares the two); RSA-PSS, CA certificates, CSRs and
self-signed certificates go through the builder.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import ExtensionOID

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey

_VERSION_3 = b"\xa0\x03\x02\x01\x02"  # [0] EXPLICIT INTEGER 2
_EMPTY = b"\x30\x00"  # an empty Name
_ECDSA = {
    "sha256": "1.2.840.10045.4.3.2",
    "sha384": "1.2.840.10045.4.3.3",
    "sha512": "1.2.840.10045.4.3.4",
}
_RSA_PKCS1 = {
    "sha256": "1.2.840.113549.1.1.11",
    "sha384": "1.2.840.113549.1.1.12",
    "sha512": "1.2.840.113549.1.1.13",
}
_ED25519 = "1.3.101.112"


def tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    if n < 0x80:
        return bytes((tag, n)) + body
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(size))) + size + body


def content(der: bytes, pos: int) -> tuple[int, int]:
    """(start, end) of the contents of the TLV at `pos`."""
    n = der[pos + 1]
    if n < 0x80:
        return pos + 2, pos + 2 + n
    width = n & 0x7F
    start = pos + 2 + width
    return start, start + int.from_bytes(der[pos + 2 : start], "big")


@functools.lru_cache(maxsize=256)
def oid_der(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    out = bytearray()
    for arc in [arcs[0] * 40 + arcs[1], *arcs[2:]]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        out += bytes(reversed(chunk))
    return tlv(0x06, bytes(out))


def integer_der(value: int) -> bytes:
    """A non-negative INTEGER (a leading zero byte keeps the high bit clear)."""
    return tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def time_der(ts: int) -> bytes:
    """A validity time, unix seconds from 1950 through 9999 (the builder's range)."""
    t = time.gmtime(ts)
    clock = f"{t.tm_mon:02}{t.tm_mday:02}{t.tm_hour:02}{t.tm_min:02}{t.tm_sec:02}Z"
    # RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050.
    if t.tm_year < 2050:
        return tlv(0x17, f"{t.tm_year % 100:02}{clock}".encode())
    return tlv(0x18, f"{t.tm_year:04}{clock}".encode())


@functools.lru_cache(maxsize=1024)
def validity_der(not_before: int, not_after: int) -> bytes:
    """The Validity SEQUENCE; leaves issued in the same second share it."""
    return tlv(0x30, time_der(not_before) + time_der(not_after))


def extension_der(oid: x509.ObjectIdentifier, critical: bool, value_der: bytes) -> bytes:
    body = oid_der(oid.dotted_string) + (b"\x01\x01\xff" if critical else b"")
    return tlv(0x30, body + tlv(0x04, value_der))


# The SKI extension up to its 20-byte SHA-1 key identifier, which ends it.
_SKI_HEAD = extension_der(ExtensionOID.SUBJECT_KEY_IDENTIFIER, False, tlv(0x04, bytes(20)))[:-20]


def pem(der: bytes, label: str = "CERTIFICATE") -> str:
    """A PEM block (a certificate's by default), as `cryptography` writes it (64 characters a
    line)."""
    b64 = base64.b64encode(der).decode()
    lines = "\n".join(b64[i : i + 64] for i in range(0, len(b64), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n"


def _ext(e: x509.Extension[x509.ExtensionType]) -> bytes:
    return extension_der(e.oid, e.critical, e.value.public_bytes())


def algorithm_id(key: PrivateKey, alg: hashes.HashAlgorithm | None) -> bytes | None:
    """The AlgorithmIdentifier `key` signs under with `alg` (PKCS#1 v1.5 for RSA), or None for
    a combination this module leaves to the builder."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return tlv(0x30, oid_der(_ED25519)) if alg is None else None
    if alg is None:
        return None
    if isinstance(key, ec.EllipticCurvePrivateKey) and alg.name in _ECDSA:
        return tlv(0x30, oid_der(_ECDSA[alg.name]))
    if isinstance(key, rsa.RSAPrivateKey) and alg.name in _RSA_PKCS1:
        return tlv(0x30, oid_der(_RSA_PKCS1[alg.name]) + b"\x05\x00")
    return None


class LeafTemplate:
    """What every leaf of one issuer under one role shares, encoded: extensions before the SAN
    (`head`), after the SKI (`tail`, starting with the AKI), the issuer and the algorithm."""

    def __init__(
        self,
        *,
        sign_key: PrivateKey,
        alg: hashes.HashAlgorithm | None,
        algorithm: bytes,
        issuer: x509.Name,
        head: list[x509.Extension[x509.ExtensionType]],
        tail: list[x509.Extension[x509.ExtensionType]],
    ) -> None:
        self.sign_key = sign_key
        self.alg = alg
        self.ecdsa = ec.ECDSA(alg) if alg is not None else None
        self.algorithm = algorithm
        self.issuer = issuer.public_bytes()
        self.head = b"".join(_ext(e) for e in head)
        self.tail = b"".join(_ext(e) for e in tail)

    def _sign(self, data: bytes) -> bytes:
        key = self.sign_key
        if isinstance(key, ec.EllipticCurvePrivateKey):
            return key.sign(data, self.ecdsa)  # type: ignore[arg-type]
        if isinstance(key, rsa.RSAPrivateKey):
            return key.sign(data, padding.PKCS1v15(), self.alg)  # type: ignore[arg-type]
        return key.sign(data)

    def certificate(
        self,
        *,
        serial: int,
        not_before: int,
        not_after: int,
        subject: bytes,
        san: bytes | None,
        spki: bytes,
    ) -> bytes:
        """The signed certificate's DER (times as `time_der` takes them) for a subject Name's DER,
        the SubjectAlternativeName's value (None: no SANs) and the subject's SPKI DER."""
        # The SKI is the SHA-1 of the subjectPublicKey bits (RFC 5280 4.2.1.2 method 1), the
        # BIT STRING after the algorithm in the SPKI.
        start, _ = content(spki, 0)
        _, alg_end = content(spki, start)
        bits_start, bits_end = content(spki, alg_end)
        ski = hashlib.sha1(spki[bits_start + 1 : bits_end]).digest()
        exts = self.head
        if san is not None:
            # RFC 5280: the SAN extension is critical when the subject is empty.
            exts += extension_der(ExtensionOID.SUBJECT_ALTERNATIVE_NAME, subject == _EMPTY, san)
        exts += _SKI_HEAD + ski + self.tail
        tbs = tlv(
            0x30,
            _VERSION_3
            + integer_der(serial)
            + self.algorithm
            + self.issuer
            + validity_der(not_before, not_after)
            + subject
            + spki
            + tlv(0xA3, tlv(0x30, exts)),
        )
        signature = self._sign(tbs)
        return tlv(0x30, tbs + self.algorithm + tlv(0x03, b"\x00" + signature))
