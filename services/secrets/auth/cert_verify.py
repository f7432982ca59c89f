"""Client-certificate checks of the `cert` auth method: chain building to the trusted
certificates of its roles, signature, validity, CA and key-usage rules, and the role
constraints (names, SANs, OUs, extensions) matched with Vault's `*` globs.

The gateway's TLS listener only proves the client holds the key of the leaf it sent; trust
is decided here, against this mount's own roles."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.secrets.globs import glob

# Chains longer than this are refused rather than explored (a loop or an abusive chain).
MAX_DEPTH = 8
_CLIENT_USAGES = {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
DER = Encoding.DER


class Constraints(Protocol):
    """What a role restricts about the client certificate (empty lists allow anything)."""

    allowed_names: list[str]
    allowed_common_names: list[str]
    allowed_dns_sans: list[str]
    allowed_email_sans: list[str]
    allowed_uri_sans: list[str]
    allowed_organizational_units: list[str]
    required_extensions: list[str]


class CertError(ValueError):
    """The certificate cannot be trusted; the message is safe to return to the client."""


def parse_pem_certs(text: str) -> list[x509.Certificate]:
    """Every CERTIFICATE block that parses; anything else is skipped, as Vault's parsePEM."""
    out: list[x509.Certificate] = []
    marker = "-----BEGIN CERTIFICATE-----"
    for part in text.split(marker)[1:]:
        end = part.find("-----END CERTIFICATE-----")
        if end < 0:
            continue
        block = marker + part[: end + len("-----END CERTIFICATE-----")] + "\n"
        try:
            out.append(x509.load_pem_x509_certificate(block.encode()))
        except ValueError:
            continue
    return out


def is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def ext_key_usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier] | None:
    """The extended key usages, or None when the certificate has no such extension."""
    try:
        return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return None


def allows_client_auth(cert: x509.Certificate) -> bool:
    usages = ext_key_usages(cert)
    return usages is None or bool(usages & _CLIENT_USAGES)


def _valid_now(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return cert.not_valid_before_utc <= now <= cert.not_valid_after_utc


def _may_sign(issuer: x509.Certificate, below: int) -> bool:
    """A CA whose key may sign certificates, with room for `below` CAs under it."""
    try:
        bc = issuer.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    if not bc.ca or (bc.path_length is not None and below > bc.path_length):
        return False
    try:
        ku = issuer.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return bool(ku.key_cert_sign)


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def verify_chains(
    leaf: x509.Certificate,
    intermediates: list[x509.Certificate],
    roots: list[x509.Certificate],
    now: datetime.datetime,
) -> list[list[x509.Certificate]]:
    """Every chain leaf -> ... -> a certificate in `roots`, each link checked for signature,
    validity, CA rights and path length, and every certificate allowing client auth.
    Raises CertError for a leaf that is itself unusable (expired, wrong key usage)."""
    if not _valid_now(leaf, now):
        raise CertError(
            "failed to verify client's certificate: certificate has expired or is not yet valid"
        )
    if not allows_client_auth(leaf):
        raise CertError(
            "failed to verify client's certificate: certificate specifies an incompatible key usage"
        )
    root_der = {r.public_bytes(DER) for r in roots}
    chains: list[list[x509.Certificate]] = []

    def walk(chain: list[x509.Certificate]) -> None:
        cert = chain[-1]
        if len(chain) > MAX_DEPTH:
            return
        for cand in (*roots, *intermediates):
            der = cand.public_bytes(DER)
            if any(der == c.public_bytes(DER) for c in chain):
                continue  # no loops
            if cand.subject != cert.issuer or not _may_sign(cand, len(chain) - 1):
                continue
            if not _valid_now(cand, now) or not allows_client_auth(cand):
                continue
            if not _signed_by(cert, cand):
                continue
            if der in root_der:
                chains.append([*chain, cand])
            else:
                walk([*chain, cand])

    walk([leaf])
    return chains


def _any_glob(patterns: list[str], values: Iterable[str]) -> bool:
    vals = list(values)
    return any(glob(p, v) for p in patterns for v in vals)


def common_name(cert: x509.Certificate) -> str:
    attrs = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else ""


def _sans(cert: x509.Certificate, kind: type[x509.GeneralName]) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(v) for v in san.get_values_for_type(kind)]  # type: ignore[arg-type]


def _ous(cert: x509.Certificate) -> list[str]:
    return [
        str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    ]


# ASN.1 string tags Go's asn1.Unmarshal reads into a string.
_STRING_TAGS = {0x0C, 0x12, 0x13, 0x14, 0x16, 0x1A, 0x1E}


def der_string(raw: bytes) -> str:
    """The text of a DER string value, or "" when it is not one (as Vault treats it)."""
    if len(raw) < 2 or raw[0] not in _STRING_TAGS:
        return ""
    length, pos = raw[1], 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4 or len(raw) < 2 + n:
            return ""
        length, pos = int.from_bytes(raw[2 : 2 + n], "big"), 2 + n
    body = raw[pos : pos + length]
    if len(body) != length:
        return ""
    codec = "utf-16-be" if raw[0] == 0x1E else "utf-8"
    return body.decode(codec, errors="replace")


def extension_strings(cert: x509.Certificate) -> dict[str, str]:
    """OID (dotted) -> the extension's value read as a DER string."""
    out: dict[str, str] = {}
    for ext in cert.extensions:
        try:
            raw = ext.value.public_bytes()
        except (NotImplementedError, ValueError):
            raw = b""
        out[ext.oid.dotted_string] = der_string(raw)
    return out


def matches_constraints(cert: x509.Certificate, role: Constraints) -> bool:
    """The role's name, SAN, OU and extension constraints; an empty constraint allows all."""
    cn = common_name(cert)
    dns = _sans(cert, x509.DNSName)
    emails = _sans(cert, x509.RFC822Name)
    uris = _sans(cert, x509.UniformResourceIdentifier)
    if role.allowed_names and not _any_glob(role.allowed_names, [cn, *dns, *emails]):
        return False
    checks = (
        (role.allowed_common_names, [cn]),
        (role.allowed_dns_sans, dns),
        (role.allowed_email_sans, emails),
        (role.allowed_uri_sans, uris),
        (role.allowed_organizational_units, _ous(cert)),
    )
    for patterns, values in checks:
        if patterns and not _any_glob(patterns, values):
            return False
    if role.required_extensions:
        present = extension_strings(cert)
        for item in role.required_extensions:
            oid, _, want = item.partition(":")
            if oid not in present or not glob(want, present[oid]):
                return False
    return True


def hex_colons(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def key_ids(cert: x509.Certificate) -> tuple[bytes, bytes]:
    """(subject key id, authority key id), empty where the certificate has none."""
    try:
        skid = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    except x509.ExtensionNotFound:
        skid = b""
    try:
        akid = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        akid_raw = akid.key_identifier or b""
    except x509.ExtensionNotFound:
        akid_raw = b""
    return skid, akid_raw
