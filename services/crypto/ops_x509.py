"""X.509: certificates (new key or existing public key / CSR), CSRs, CRLs, self-issued re-signing
and certificate/bundle parsing. Policy (which names, how long) is the caller's business: these ops
build exactly what they are told, and refuse input that cannot make a valid certificate.

Ops and their results (times are unix seconds, serials colon-separated lowercase hex):

`x509_issue` {key_type, key_bits, cert: CertSpec, signer: Signer | None, key_forms}
    A new key pair and its certificate; without a signer the certificate is self-signed.
    -> {certificate, serial_number, not_before, not_after, private_key (PKCS#1/SEC1 PEM; PKCS#8
        for Ed25519), private_key_pkcs8, private_key_type, key_bits, info}; of the two key
        forms, those named in key_forms (default both: "traditional", "pkcs8")
`x509_sign` {csr | public_key | private_key, cert: CertSpec, signer: Signer | None}
    A certificate for an existing key (self-signed only with private_key).
    -> {certificate, serial_number, not_before, not_after, info}
`csr_parse` {csr} -> the CSR's subject, SANs, key and requested extensions (signature checked)
`csr_create` {key_type, key_bits | private_key, subject, sans, add_basic_constraints}
    -> {csr, private_key, private_key_pkcs8, private_key_type, key_bits, fingerprint}
`crl_build` {signer, revoked: [{serial_number, revocation_time}], crl_number, this_update,
    next_update} -> {crl: PEM}
`cert_resign` {certificate, signer, require_matching_certificate_algorithms, urls...}
    Re-sign a self-issued CA certificate: only issuer DN, AKI and distribution points change.
`bundle_parse` {pem_bundle} -> {certificates: [info], keys: [key fields]} (CRLs are skipped)
`cert_info` {certificate, candidates: [PEM]} -> info + signed_by (indices of candidates whose key
    signed it)
`issuer_links` {certificates: [PEM]} -> {parents: [[j, ...], ...]}: which certificate issued which
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import ipaddress
import re
from typing import Any

import msgspec
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import ExtensionOID, NameOID

from services.crypto import ec_forms, x509_leaf
from services.crypto.ops import CryptoFailure, operation
from services.crypto.ops_keys import (
    PrivateKey,
    PublicKey,
    describe,
    fingerprint,
    generate_private_key,
    guarded,
    load_private,
    load_public,
    private_pem,
    public_pem,
)
from shared.name_constraints import NAME_CONSTRAINT_FIELDS

# Go's names (crypto/x509 KeyUsage* and ExtKeyUsage* without the prefix), as Vault accepts them.
KEY_USAGES = (
    "DigitalSignature",
    "ContentCommitment",
    "KeyEncipherment",
    "DataEncipherment",
    "KeyAgreement",
    "CertSign",
    "CRLSign",
    "EncipherOnly",
    "DecipherOnly",
)
_KU_ALIASES = {"nonrepudiation": "contentcommitment"}
EXT_KEY_USAGES: dict[str, str] = {
    "Any": "2.5.29.37.0",
    "ServerAuth": "1.3.6.1.5.5.7.3.1",
    "ClientAuth": "1.3.6.1.5.5.7.3.2",
    "CodeSigning": "1.3.6.1.5.5.7.3.3",
    "EmailProtection": "1.3.6.1.5.5.7.3.4",
    "IPSECEndSystem": "1.3.6.1.5.5.7.3.5",
    "IPSECTunnel": "1.3.6.1.5.5.7.3.6",
    "IPSECUser": "1.3.6.1.5.5.7.3.7",
    "TimeStamping": "1.3.6.1.5.5.7.3.8",
    "OCSPSigning": "1.3.6.1.5.5.7.3.9",
    "MicrosoftServerGatedCrypto": "1.3.6.1.4.1.311.10.3.3",
    "NetscapeServerGatedCrypto": "2.16.840.1.113730.4.1",
    "MicrosoftCommercialCodeSigning": "1.3.6.1.4.1.311.2.1.22",
    "MicrosoftKernelCodeSigning": "1.3.6.1.4.1.311.61.1.1",
}
_EKU_BY_LOWER = {k.lower(): v for k, v in EXT_KEY_USAGES.items()}
_EKU_NAME_BY_OID = {v: k for k, v in EXT_KEY_USAGES.items()}
_OID = re.compile(r"^[0-2](\.(0|[1-9][0-9]*))+$")
USER_ID_OID = x509.ObjectIdentifier("0.9.2342.19200300.100.1.1")


# ---- argument types ------------------------------------------------------------------------
class SubjectSpec(msgspec.Struct, kw_only=True):
    common_name: str = ""
    ou: list[str] = []
    organization: list[str] = []
    country: list[str] = []
    locality: list[str] = []
    province: list[str] = []
    street_address: list[str] = []
    postal_code: list[str] = []
    serial_number: str = ""  # the subject's serialNumber attribute, not the certificate's
    user_ids: list[str] = []


class SansSpec(msgspec.Struct, kw_only=True):
    dns: list[str] = []
    email: list[str] = []
    ip: list[str] = []
    uri: list[str] = []
    other: list[str] = []  # "<oid>;UTF8:<value>"


class CertSpec(msgspec.Struct, kw_only=True):
    subject: SubjectSpec = msgspec.field(default_factory=SubjectSpec)
    sans: SansSpec = msgspec.field(default_factory=SansSpec)
    not_before: int
    not_after: int
    serial: str = ""  # hex; random 159 bits when empty
    is_ca: bool = False
    max_path_length: int = -1  # -1: no limit
    basic_constraints_valid_for_non_ca: bool = False
    key_usage: list[str] = []
    ext_key_usage: list[str] = []
    ext_key_usage_oids: list[str] = []
    policy_identifiers: list[str] = []
    permitted_dns_domains: list[str] = []
    excluded_dns_domains: list[str] = []
    permitted_ip_ranges: list[str] = []
    excluded_ip_ranges: list[str] = []
    permitted_email_addresses: list[str] = []
    excluded_email_addresses: list[str] = []
    permitted_uri_domains: list[str] = []
    excluded_uri_domains: list[str] = []
    issuing_certificates: list[str] = []
    crl_distribution_points: list[str] = []
    ocsp_servers: list[str] = []
    skid: str = ""  # hex; computed from the key when empty
    signature_bits: int = 0
    use_pss: bool = False
    # With a CSR: take the subject verbatim, and copy its requested extensions (SANs, key usage,
    # others) instead of the spec's; the spec's key usages still apply when the CSR has none.
    use_csr_subject: bool = False
    copy_csr_extensions: bool = False


class Signer(msgspec.Struct, kw_only=True):
    certificate: str
    private_key: str


class IssueArgs(msgspec.Struct, kw_only=True):
    key_type: str
    key_bits: int = 0
    cert: CertSpec
    signer: Signer | None = None
    # The PEM forms of the new key the result carries: a leaf's response shows one, and each
    # serialisation costs ~10 µs, a twentieth of an EC leaf.
    key_forms: list[str] = msgspec.field(default_factory=lambda: ["traditional", "pkcs8"])


class SignArgs(msgspec.Struct, kw_only=True):
    csr: str = ""
    public_key: str = ""
    private_key: str = ""
    cert: CertSpec
    signer: Signer | None = None


class CsrArgs(msgspec.Struct, kw_only=True):
    csr: str


class CsrCreateArgs(msgspec.Struct, kw_only=True):
    key_type: str = "rsa"
    key_bits: int = 0
    private_key: str = ""  # reuse this key instead of generating one
    subject: SubjectSpec = msgspec.field(default_factory=SubjectSpec)
    sans: SansSpec = msgspec.field(default_factory=SansSpec)
    add_basic_constraints: bool = False
    signature_bits: int = 0


class RevokedEntry(msgspec.Struct, kw_only=True):
    serial_number: str
    revocation_time: int


class CrlArgs(msgspec.Struct, kw_only=True):
    signer: Signer
    revoked: list[RevokedEntry] = []
    crl_number: int
    this_update: int
    next_update: int


class ResignArgs(msgspec.Struct, kw_only=True):
    certificate: str
    signer: Signer
    require_matching_certificate_algorithms: bool = False
    issuing_certificates: list[str] = []
    crl_distribution_points: list[str] = []
    ocsp_servers: list[str] = []


class BundleArgs(msgspec.Struct, kw_only=True):
    pem_bundle: str


class CertInfoArgs(msgspec.Struct, kw_only=True):
    certificate: str
    candidates: list[str] = []


class LinksArgs(msgspec.Struct, kw_only=True):
    certificates: list[str]


# ---- small helpers ---------------------------------------------------------------------------
def colon_hex(value: int) -> str:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big").hex(":")


def parse_serial(text: str) -> int:
    clean = text.strip().replace(":", "").replace("-", "").lower()
    try:
        value = int(clean, 16)
    except ValueError:
        raise CryptoFailure(f"invalid serial number {text!r}: expected hexadecimal") from None
    if value <= 0 or value.bit_length() > 159:
        raise CryptoFailure(f"invalid serial number {text!r}: must be positive and under 2^159")
    return value


def _when(ts: int) -> dt.datetime:
    try:
        return dt.datetime.fromtimestamp(ts, dt.UTC)
    except (OverflowError, OSError, ValueError):
        raise CryptoFailure(f"time {ts} is out of range") from None


def _ts(value: dt.datetime) -> int:
    return int(value.timestamp())


def _der_utf8(value: str) -> bytes:
    """DER of an ASN.1 UTF8String (the inner value of an otherName SAN)."""
    data = value.encode()
    n = len(data)
    if n < 0x80:
        length = bytes([n])
    else:
        body = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(body)]) + body
    return b"\x0c" + length + data


def _read_der_string(data: bytes) -> str | None:
    """The text of a DER UTF8String / IA5String / PrintableString, else None."""
    if len(data) < 2 or data[0] not in (0x0C, 0x16, 0x13):
        return None
    n, pos = data[1], 2
    if n & 0x80:
        width = n & 0x7F
        n = int.from_bytes(data[2 : 2 + width], "big")
        pos = 2 + width
    try:
        return data[pos : pos + n].decode()
    except UnicodeDecodeError:
        return None


def parse_other_san(entry: str) -> tuple[str, str]:
    """`<oid>;UTF8:<value>` -> (oid, value)."""
    oid, sep, rest = entry.partition(";")
    kind, sep2, value = rest.partition(":")
    if not sep or not sep2 or not _OID.match(oid.strip()):
        raise CryptoFailure(f"invalid other SAN {entry!r}: expected <oid>;UTF8:<value>")
    if kind.strip().upper() not in ("UTF8", "UTF-8"):
        raise CryptoFailure(f"invalid other SAN {entry!r}: only the UTF8 type is supported")
    return oid.strip(), value


def _subject(spec: SubjectSpec) -> x509.Name:
    # Go's (and so Vault's) attribute order.
    attrs: list[x509.NameAttribute] = []
    for oid, values in (
        (NameOID.COUNTRY_NAME, spec.country),
        (NameOID.STATE_OR_PROVINCE_NAME, spec.province),
        (NameOID.LOCALITY_NAME, spec.locality),
        (NameOID.STREET_ADDRESS, spec.street_address),
        (NameOID.POSTAL_CODE, spec.postal_code),
        (NameOID.ORGANIZATION_NAME, spec.organization),
        (NameOID.ORGANIZATIONAL_UNIT_NAME, spec.ou),
    ):
        for v in values:
            if oid == NameOID.COUNTRY_NAME and len(v) != 2:
                raise CryptoFailure(f"country {v!r} must be a two-letter code")
            attrs.append(x509.NameAttribute(oid, v))
    if spec.common_name:
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, spec.common_name))
    if spec.serial_number:
        attrs.append(x509.NameAttribute(NameOID.SERIAL_NUMBER, spec.serial_number))
    for uid in spec.user_ids:
        attrs.append(x509.NameAttribute(USER_ID_OID, uid))
    return x509.Name(attrs)


def _general_names(sans: SansSpec) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in sans.dns]
    names += [x509.RFC822Name(e) for e in sans.email]
    for ip in sans.ip:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(ip.strip())))
        except ValueError:
            raise CryptoFailure(f"invalid IP address {ip!r}") from None
    names += [x509.UniformResourceIdentifier(u) for u in sans.uri]
    for entry in sans.other:
        oid, value = parse_other_san(entry)
        names.append(x509.OtherName(x509.ObjectIdentifier(oid), _der_utf8(value)))
    return names


@functools.lru_cache(maxsize=256)  # a role's usages: the same on every leaf it issues
def _key_usage(names: tuple[str, ...]) -> x509.KeyUsage | None:
    wanted: set[str] = set()
    known = {k.lower() for k in KEY_USAGES}
    for n in names:
        low = n.strip().lower()
        low = _KU_ALIASES.get(low, low)
        if not low:
            continue
        if low not in known:
            raise CryptoFailure(f"unknown key usage {n!r}")
        wanted.add(low)
    if not wanted:
        return None
    if ("encipheronly" in wanted or "decipheronly" in wanted) and "keyagreement" not in wanted:
        raise CryptoFailure("EncipherOnly and DecipherOnly need KeyAgreement")
    return x509.KeyUsage(
        digital_signature="digitalsignature" in wanted,
        content_commitment="contentcommitment" in wanted,
        key_encipherment="keyencipherment" in wanted,
        data_encipherment="dataencipherment" in wanted,
        key_agreement="keyagreement" in wanted,
        key_cert_sign="certsign" in wanted,
        crl_sign="crlsign" in wanted,
        encipher_only="encipheronly" in wanted,
        decipher_only="decipheronly" in wanted,
    )


def key_usage_names(ku: x509.KeyUsage) -> list[str]:
    out = []
    flags = (
        ("DigitalSignature", ku.digital_signature),
        ("ContentCommitment", ku.content_commitment),
        ("KeyEncipherment", ku.key_encipherment),
        ("DataEncipherment", ku.data_encipherment),
        ("KeyAgreement", ku.key_agreement),
        ("CertSign", ku.key_cert_sign),
        ("CRLSign", ku.crl_sign),
    )
    out = [name for name, on in flags if on]
    if ku.key_agreement:
        out += [
            n
            for n, on in (("EncipherOnly", ku.encipher_only), ("DecipherOnly", ku.decipher_only))
            if on
        ]
    return out


@functools.lru_cache(maxsize=256)
def _eku(names: tuple[str, ...], oids: tuple[str, ...]) -> tuple[x509.ObjectIdentifier, ...]:
    out: list[x509.ObjectIdentifier] = []
    for n in names:
        if not n.strip():
            continue
        oid = _EKU_BY_LOWER.get(n.strip().lower())
        if oid is None:
            raise CryptoFailure(f"unknown extended key usage {n!r}")
        out.append(x509.ObjectIdentifier(oid))
    for o in oids:
        if not o.strip():
            continue
        if not _OID.match(o.strip()):
            raise CryptoFailure(f"invalid extended key usage OID {o!r}")
        out.append(x509.ObjectIdentifier(o.strip()))
    seen: set[str] = set()
    return tuple(o for o in out if not (o.dotted_string in seen or seen.add(o.dotted_string)))


def _hash_for(key: PrivateKey, signature_bits: int) -> hashes.HashAlgorithm | None:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return None
    if isinstance(key, ec.EllipticCurvePrivateKey):
        size = key.curve.key_size
        return hashes.SHA512() if size > 384 else hashes.SHA384() if size > 256 else hashes.SHA256()
    bits = signature_bits or 256
    if bits not in (256, 384, 512):
        raise CryptoFailure(f"unsupported signature_bits {bits}: use 256, 384 or 512")
    return {256: hashes.SHA256(), 384: hashes.SHA384(), 512: hashes.SHA512()}[bits]


def _padding(key: PrivateKey, use_pss: bool, alg: hashes.HashAlgorithm | None) -> Any:
    if use_pss and isinstance(key, rsa.RSAPrivateKey) and alg is not None:
        return padding.PSS(mgf=padding.MGF1(alg), salt_length=padding.PSS.DIGEST_LENGTH)
    return None


def _ski(pub: PublicKey, skid: str = "") -> x509.SubjectKeyIdentifier:
    if skid:
        try:
            return x509.SubjectKeyIdentifier(bytes.fromhex(skid.replace(":", "")))
        except ValueError:
            raise CryptoFailure(f"invalid skid {skid!r}: expected hexadecimal") from None
    return x509.SubjectKeyIdentifier.from_public_key(pub)


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@functools.lru_cache(maxsize=256)
def load_cert(pem: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem.strip().encode())
    except ValueError as exc:
        raise CryptoFailure(f"could not parse the certificate: {str(exc)[:200]}") from None


@functools.lru_cache(maxsize=64)
def _signer(
    cert_pem: str, key_pem: str
) -> tuple[x509.Certificate, PrivateKey, x509.AuthorityKeyIdentifier]:
    """The issuer's certificate, key and the AKI its children carry (cached per issuer)."""
    cert = load_cert(cert_pem)
    key = load_private(key_pem)
    if fingerprint(cert.public_key()) != fingerprint(key.public_key()):  # type: ignore[arg-type]
        raise CryptoFailure("the issuer's private key does not match its certificate")
    try:
        ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)
    except x509.ExtensionNotFound:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(cert.public_key())  # type: ignore[arg-type]
    return cert, key, aki


@functools.lru_cache(maxsize=256)  # an issuer's URLs: the same on every leaf it signs
def _urls(
    spec_issuing: tuple[str, ...], spec_crl: tuple[str, ...], spec_ocsp: tuple[str, ...]
) -> tuple[tuple[x509.ExtensionType, bool], ...]:
    out: list[tuple[x509.ExtensionType, bool]] = []
    access = [
        x509.AccessDescription(
            x509.oid.AuthorityInformationAccessOID.OCSP, x509.UniformResourceIdentifier(u)
        )
        for u in spec_ocsp
    ]
    access += [
        x509.AccessDescription(
            x509.oid.AuthorityInformationAccessOID.CA_ISSUERS, x509.UniformResourceIdentifier(u)
        )
        for u in spec_issuing
    ]
    if access:
        out.append((x509.AuthorityInformationAccess(access), False))
    if spec_crl:
        out.append(
            (
                x509.CRLDistributionPoints(
                    [
                        x509.DistributionPoint(
                            full_name=[x509.UniformResourceIdentifier(u)],
                            relative_name=None,
                            reasons=None,
                            crl_issuer=None,
                        )
                        for u in spec_crl
                    ]
                ),
                False,
            )
        )
    return tuple(out)


def _name_constraints(s: CertSpec) -> x509.NameConstraints | None:
    def subtrees(
        dns: list[str], ips: list[str], emails: list[str], uris: list[str]
    ) -> list[x509.GeneralName]:
        out: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        for r in ips:
            try:
                out.append(x509.IPAddress(ipaddress.ip_network(r.strip(), strict=False)))
            except ValueError:
                raise CryptoFailure(f"invalid IP range {r!r}: expected CIDR notation") from None
        out += [x509.RFC822Name(e) for e in emails]
        out += [x509.UniformResourceIdentifier(u) for u in uris]
        return out

    permitted = subtrees(
        s.permitted_dns_domains,
        s.permitted_ip_ranges,
        s.permitted_email_addresses,
        s.permitted_uri_domains,
    )
    excluded = subtrees(
        s.excluded_dns_domains,
        s.excluded_ip_ranges,
        s.excluded_email_addresses,
        s.excluded_uri_domains,
    )
    if not permitted and not excluded:
        return None
    return x509.NameConstraints(
        permitted_subtrees=permitted or None, excluded_subtrees=excluded or None
    )


_CSR_SKIP = {
    ExtensionOID.BASIC_CONSTRAINTS,
    ExtensionOID.SUBJECT_KEY_IDENTIFIER,
    ExtensionOID.AUTHORITY_KEY_IDENTIFIER,
    ExtensionOID.AUTHORITY_INFORMATION_ACCESS,
    ExtensionOID.CRL_DISTRIBUTION_POINTS,
}


def _extension(value: x509.ExtensionType, critical: bool) -> x509.Extension[x509.ExtensionType]:
    return x509.Extension(value.oid, critical, value)


def _head_extensions(
    spec: CertSpec, csr_exts: dict[x509.ObjectIdentifier, x509.Extension[x509.ExtensionType]]
) -> list[x509.Extension[x509.ExtensionType]]:
    """The extensions before the SAN: basic constraints, key usage, extended key usage (the
    CSR's usages, taken out of `csr_exts`, where it has them)."""
    exts: list[x509.Extension[x509.ExtensionType]] = []
    if spec.is_ca:
        path_len = None if spec.max_path_length < 0 else spec.max_path_length
        exts.append(_extension(x509.BasicConstraints(ca=True, path_length=path_len), True))
    elif spec.basic_constraints_valid_for_non_ca:
        exts.append(_extension(x509.BasicConstraints(ca=False, path_length=None), True))

    ku_names = list(spec.key_usage)
    if spec.is_ca:
        ku_names += ["CertSign", "CRLSign"]
    if ExtensionOID.KEY_USAGE in csr_exts:
        csr_ku = key_usage_names(csr_exts.pop(ExtensionOID.KEY_USAGE).value)  # type: ignore[arg-type]
        ku_names = (ku_names + csr_ku) if spec.is_ca else csr_ku
    ku = _key_usage(tuple(ku_names))
    if ku is not None:
        exts.append(_extension(ku, True))
    if ExtensionOID.EXTENDED_KEY_USAGE in csr_exts:
        exts.append(csr_exts.pop(ExtensionOID.EXTENDED_KEY_USAGE))
    else:
        eku = _eku(tuple(spec.ext_key_usage), tuple(spec.ext_key_usage_oids))
        if eku:
            exts.append(_extension(x509.ExtendedKeyUsage(eku), False))
    return exts


def _tail_extensions(spec: CertSpec) -> list[x509.Extension[x509.ExtensionType]]:
    """The extensions after the AKI: AIA, CRL distribution points, name constraints, policies."""
    exts = [
        _extension(value, critical)
        for value, critical in _urls(
            tuple(spec.issuing_certificates),
            tuple(spec.crl_distribution_points),
            tuple(spec.ocsp_servers),
        )
    ]
    nc = _name_constraints(spec)
    if nc is not None:
        if not spec.is_ca:
            raise CryptoFailure("name constraints are only valid on CA certificates")
        exts.append(_extension(nc, True))
    if spec.policy_identifiers:
        policies = []
        for p in spec.policy_identifiers:
            if not _OID.match(p.strip()):
                raise CryptoFailure(f"invalid policy identifier {p!r}: expected an OID")
            policies.append(x509.PolicyInformation(x509.ObjectIdentifier(p.strip()), None))
        exts.append(_extension(x509.CertificatePolicies(policies), False))
    return exts


def build_certificate(
    spec: CertSpec,
    subject_pub: PublicKey,
    signer: Signer | None,
    self_key: PrivateKey | None,
    csr: x509.CertificateSigningRequest | None,
) -> x509.Certificate:
    """Assemble and sign one certificate; `self_key` signs when there is no signer."""
    if spec.not_after <= spec.not_before:
        raise CryptoFailure("not_after must be later than not_before")
    if signer is not None:
        issuer_cert, sign_key, aki = _signer(signer.certificate, signer.private_key)
        issuer_name = issuer_cert.subject
    else:
        if self_key is None:
            raise CryptoFailure("a self-signed certificate needs its private key")
        sign_key = self_key
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(subject_pub)  # type: ignore[arg-type]
        issuer_name = None
    subject = csr.subject if (csr is not None and spec.use_csr_subject) else _subject(spec.subject)
    if signer is None:
        issuer_name = subject
    serial = parse_serial(spec.serial) if spec.serial else x509.random_serial_number()

    csr_exts: dict[x509.ObjectIdentifier, x509.Extension[x509.ExtensionType]] = {}
    if csr is not None and spec.copy_csr_extensions:
        csr_exts = {e.oid: e for e in csr.extensions if e.oid not in _CSR_SKIP}

    # Collected in a list and handed to the builder once: add_extension copies the builder and
    # rescans the list each time, a sizeable share of a leaf's CPU.
    exts = _head_extensions(spec, csr_exts)
    if ExtensionOID.SUBJECT_ALTERNATIVE_NAME in csr_exts:
        exts.append(csr_exts.pop(ExtensionOID.SUBJECT_ALTERNATIVE_NAME))
    else:
        names = _general_names(spec.sans)
        if names:
            # RFC 5280: the SAN extension is critical when the subject is empty.
            exts.append(_extension(x509.SubjectAlternativeName(names), len(subject) == 0))
    exts += [_extension(_ski(subject_pub, spec.skid), False), _extension(aki, False)]
    exts += _tail_extensions(spec)
    for oid, ext in csr_exts.items():
        if oid == ExtensionOID.NAME_CONSTRAINTS and not spec.is_ca:
            continue
        exts.append(ext)
    if len({e.oid for e in exts}) != len(exts):
        raise ValueError("This extension has already been set.")  # as add_extension says it

    b = (
        x509.CertificateBuilder(extensions=exts)
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(subject_pub)
        .serial_number(serial)
        .not_valid_before(_when(spec.not_before))
        .not_valid_after(_when(spec.not_after))
    )
    alg = _hash_for(sign_key, spec.signature_bits)
    return b.sign(sign_key, alg, rsa_padding=_padding(sign_key, spec.use_pss, alg))  # type: ignore[arg-type]


# (signer, the spec's role-wide fields) -> the template its leaves share, None where the builder
# makes them. Bounded: cleared when full (a role or issuer change makes a new key).
_TEMPLATES: dict[tuple[Any, ...], x509_leaf.LeafTemplate | None] = {}
TEMPLATES_MAX = 256


def _template(spec: CertSpec, signer: Signer) -> x509_leaf.LeafTemplate | None:
    key = (
        signer.certificate,
        signer.private_key,
        spec.basic_constraints_valid_for_non_ca,
        tuple(spec.key_usage),
        tuple(spec.ext_key_usage),
        tuple(spec.ext_key_usage_oids),
        tuple(spec.policy_identifiers),
        tuple(spec.issuing_certificates),
        tuple(spec.crl_distribution_points),
        tuple(spec.ocsp_servers),
        spec.signature_bits,
    )
    if key in _TEMPLATES:
        return _TEMPLATES[key]
    try:
        issuer_cert, sign_key, aki = _signer(signer.certificate, signer.private_key)
        alg = _hash_for(sign_key, spec.signature_bits)
        head, tail = _head_extensions(spec, {}), _tail_extensions(spec)
    except (CryptoFailure, ValueError, TypeError):
        return None  # the builder reports it, in its own order
    algorithm = x509_leaf.algorithm_id(sign_key, alg)
    template = None
    if algorithm is not None:
        template = x509_leaf.LeafTemplate(
            sign_key=sign_key,
            alg=alg,
            algorithm=algorithm,
            issuer=issuer_cert.subject,
            head=head,
            tail=[_extension(aki, False), *tail],
        )
    if len(_TEMPLATES) >= TEMPLATES_MAX:
        _TEMPLATES.clear()
    _TEMPLATES[key] = template
    return template


# The validity the builder accepts: from 1950 (its own limit) to the end of 9999 (datetime's).
_EARLIEST, _LATEST = -631_152_000, 253_402_300_799
_CONSTRAINTS = NAME_CONSTRAINT_FIELDS


@functools.lru_cache(maxsize=256)  # a role's attributes: the same on every leaf it issues
def _role_rdns(*attrs: tuple[str, ...]) -> bytes:
    """The RDNs of a subject without CN, serialNumber or UIDs (the role's part), as `_subject`
    and `cryptography` encode them; `attrs` in SubjectSpec's order from ou to postal_code."""
    ou, organization, country, locality, province, street_address, postal_code = attrs
    name = _subject(
        SubjectSpec(
            ou=list(ou),
            organization=list(organization),
            country=list(country),
            locality=list(locality),
            province=list(province),
            street_address=list(street_address),
            postal_code=list(postal_code),
        )
    ).public_bytes()
    start, end = x509_leaf.content(name, 0)
    return name[start:end]


_CN = x509_leaf.oid_der(NameOID.COMMON_NAME.dotted_string)


def _subject_der(spec: SubjectSpec) -> bytes:
    """`_subject(spec).public_bytes()`: the role's RDNs once per role, the CN per leaf."""
    if spec.serial_number or spec.user_ids:
        return _subject(spec).public_bytes()
    rdns = _role_rdns(
        tuple(spec.ou),
        tuple(spec.organization),
        tuple(spec.country),
        tuple(spec.locality),
        tuple(spec.province),
        tuple(spec.street_address),
        tuple(spec.postal_code),
    )
    if spec.common_name:
        cn = spec.common_name.encode()
        if not 1 <= len(cn) <= 64:  # cryptography's bound: its refusal, from the builder
            raise ValueError("common name length")
        rdns += x509_leaf.tlv(0x31, x509_leaf.tlv(0x30, _CN + x509_leaf.tlv(0x0C, cn)))
    return x509_leaf.tlv(0x30, rdns)


def _san_der(sans: SansSpec) -> bytes | None:
    """The SubjectAlternativeName value `_general_names` makes (None without names), written
    here: GeneralNames of IA5 strings (ASCII only, as cryptography requires) and addresses."""
    if sans.other:
        names = _general_names(sans)
        return x509.SubjectAlternativeName(names).public_bytes()
    tlv = x509_leaf.tlv
    parts = [tlv(0x82, d.encode("ascii")) for d in sans.dns]
    parts += [tlv(0x81, e.encode("ascii")) for e in sans.email]
    for ip in sans.ip:
        try:
            parts.append(tlv(0x87, ipaddress.ip_address(ip.strip()).packed))
        except ValueError:
            raise CryptoFailure(f"invalid IP address {ip!r}") from None
    parts += [tlv(0x86, u.encode("ascii")) for u in sans.uri]
    return tlv(0x30, b"".join(parts)) if parts else None


def leaf_der(
    spec: CertSpec, subject_pub: PublicKey | None, signer: Signer | None, *, spki: bytes = b""
) -> tuple[bytes, int] | None:
    """A leaf signed by `signer` from its template, (DER, serial): what build_certificate would
    make (with no CSR) for `subject_pub` (or its SPKI DER, `spki`), or None where that must make
    it (CA, RSA-PSS, a given SKI, name constraints, anything refused)."""
    if signer is None or spec.is_ca or spec.use_pss or spec.skid:
        return None
    if any(getattr(spec, name) for name in _CONSTRAINTS):
        return None
    if not _EARLIEST <= spec.not_before < spec.not_after <= _LATEST:
        return None
    try:
        template = _template(spec, signer)
        if template is None:
            return None
        serial = parse_serial(spec.serial) if spec.serial else x509.random_serial_number()
        der = template.certificate(
            serial=serial,
            not_before=spec.not_before,
            not_after=spec.not_after,
            subject=_subject_der(spec.subject),
            san=_san_der(spec.sans),
            spki=spki or _spki(subject_pub),  # type: ignore[arg-type]
        )
    except (CryptoFailure, ValueError, TypeError):
        return None
    return der, serial


def _spki(pub: PublicKey) -> bytes:
    return pub.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def cert_info(cert: x509.Certificate) -> dict[str, Any]:
    pub = cert.public_key()
    key_type, key_bits = describe(pub)  # type: ignore[arg-type]
    exts = cert.extensions
    is_ca, path_len = False, -1
    try:
        bc = exts.get_extension_for_class(x509.BasicConstraints).value
        is_ca = bc.ca
        path_len = -1 if bc.path_length is None else bc.path_length
    except x509.ExtensionNotFound:
        pass
    ski = aki = ""
    with contextlib.suppress(x509.ExtensionNotFound):
        ski = exts.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest.hex(":")
    try:
        raw = exts.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
        aki = raw.hex(":") if raw else ""
    except x509.ExtensionNotFound:
        pass
    ku: list[str] = []
    with contextlib.suppress(x509.ExtensionNotFound):
        ku = key_usage_names(exts.get_extension_for_class(x509.KeyUsage).value)
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return {
        "certificate": _pem(cert),
        "serial_number": colon_hex(cert.serial_number),
        "not_before": _ts(cert.not_valid_before_utc),
        "not_after": _ts(cert.not_valid_after_utc),
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "common_name": str(cns[0].value) if cns else "",
        "self_issued": cert.subject == cert.issuer,
        "is_ca": is_ca,
        "max_path_length": path_len,
        "ski": ski,
        "aki": aki,
        "key_usage": ku,
        "key_type": key_type,
        "key_bits": key_bits,
        "fingerprint": fingerprint(pub),  # type: ignore[arg-type]
        "signature_algorithm": cert.signature_algorithm_oid._name,
    }


def _cert_result(cert: x509.Certificate, *, info: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "certificate": _pem(cert),
        "serial_number": colon_hex(cert.serial_number),
        "not_before": _ts(cert.not_valid_before_utc),
        "not_after": _ts(cert.not_valid_after_utc),
    }
    if info:
        out["info"] = cert_info(cert)
    return out


def load_csr(text: str) -> x509.CertificateSigningRequest:
    data = text.strip().encode()
    if b"-----BEGIN" not in data:
        raise CryptoFailure("malformed CSR: expected a PEM CERTIFICATE REQUEST block")
    try:
        csr = x509.load_pem_x509_csr(data)
    except ValueError as exc:
        raise CryptoFailure(f"malformed CSR: {str(exc).splitlines()[0][:200]}") from None
    try:
        valid = csr.is_signature_valid
    except (ValueError, TypeError, InvalidSignature):
        valid = False
    if not valid:
        raise CryptoFailure("malformed CSR: its signature does not verify")
    try:
        describe(csr.public_key())  # type: ignore[arg-type]
    except (ValueError, TypeError) as exc:
        raise CryptoFailure(f"malformed CSR: unsupported public key: {exc}") from None
    return csr


def _sans_of(names: x509.SubjectAlternativeName | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"dns": [], "email": [], "ip": [], "uri": [], "other": []}
    if names is None:
        return out
    for n in names:
        if isinstance(n, x509.DNSName):
            out["dns"].append(n.value)
        elif isinstance(n, x509.RFC822Name):
            out["email"].append(n.value)
        elif isinstance(n, x509.IPAddress):
            out["ip"].append(str(n.value))
        elif isinstance(n, x509.UniformResourceIdentifier):
            out["uri"].append(n.value)
        elif isinstance(n, x509.OtherName):
            text = _read_der_string(n.value)
            if text is not None:
                out["other"].append(f"{n.type_id.dotted_string};UTF8:{text}")
    return out


def _subject_fields(name: x509.Name) -> dict[str, Any]:
    def vals(oid: x509.ObjectIdentifier) -> list[str]:
        return [str(a.value) for a in name.get_attributes_for_oid(oid)]

    cn = vals(NameOID.COMMON_NAME)
    sn = vals(NameOID.SERIAL_NUMBER)
    return {
        "common_name": cn[0] if cn else "",
        "ou": vals(NameOID.ORGANIZATIONAL_UNIT_NAME),
        "organization": vals(NameOID.ORGANIZATION_NAME),
        "country": vals(NameOID.COUNTRY_NAME),
        "locality": vals(NameOID.LOCALITY_NAME),
        "province": vals(NameOID.STATE_OR_PROVINCE_NAME),
        "street_address": vals(NameOID.STREET_ADDRESS),
        "postal_code": vals(NameOID.POSTAL_CODE),
        "serial_number": sn[0] if sn else "",
    }


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.S)


# ---- ops -----------------------------------------------------------------------------------
@operation("x509_issue", IssueArgs)
@guarded
def x509_issue(a: IssueArgs) -> dict[str, Any]:
    key = generate_private_key(a.key_type, a.key_bits)
    sec1, spki = "", b""
    if isinstance(key, ec.EllipticCurvePrivateKey) and "traditional" in a.key_forms:
        sec1, spki = ec_forms.sec1_and_spki(key)
    pub = None if spki else key.public_key()
    leaf = leaf_der(a.cert, pub, a.signer, spki=spki)  # type: ignore[arg-type]
    if leaf is not None:
        der, serial = leaf
        out: dict[str, Any] = {
            "certificate": x509_leaf.pem(der),
            "serial_number": colon_hex(serial),
            "not_before": a.cert.not_before,
            "not_after": a.cert.not_after,
        }
    else:
        pub = key.public_key()
        cert = build_certificate(a.cert, pub, a.signer, key, None)  # type: ignore[arg-type]
        # Leaves are the hot path: skip the full info block unless this is a CA.
        out = _cert_result(cert, info=a.cert.is_ca)
    key_type, key_bits = describe(key)
    if "traditional" in a.key_forms:
        out["private_key"] = sec1 or private_pem(key, "traditional")
    if "pkcs8" in a.key_forms:
        out["private_key_pkcs8"] = private_pem(key, "pkcs8")
    out.update(private_key_type=key_type, key_bits=key_bits)
    return out


@operation("x509_sign", SignArgs)
@guarded
def x509_sign(a: SignArgs) -> dict[str, Any]:
    sources = [bool(a.csr), bool(a.public_key), bool(a.private_key)]
    if sum(sources) != 1:
        raise CryptoFailure("give exactly one of csr, public_key or private_key")
    csr = None
    self_key: PrivateKey | None = None
    if a.csr:
        csr = load_csr(a.csr)
        pub: PublicKey = csr.public_key()  # type: ignore[assignment]
    elif a.public_key:
        pub = load_public(a.public_key)
    else:
        self_key = load_private(a.private_key)
        pub = self_key.public_key()  # type: ignore[assignment]
    cert = build_certificate(a.cert, pub, a.signer, self_key, csr)
    return _cert_result(cert)


@operation("csr_parse", CsrArgs)
@guarded
def csr_parse(a: CsrArgs) -> dict[str, Any]:
    csr = load_csr(a.csr)
    pub = csr.public_key()
    key_type, key_bits = describe(pub)  # type: ignore[arg-type]
    exts = csr.extensions
    san = None
    with contextlib.suppress(x509.ExtensionNotFound):
        san = exts.get_extension_for_class(x509.SubjectAlternativeName).value
    is_ca = False
    with contextlib.suppress(x509.ExtensionNotFound):
        is_ca = exts.get_extension_for_class(x509.BasicConstraints).value.ca
    ku: list[str] | None = None
    with contextlib.suppress(x509.ExtensionNotFound):
        ku = key_usage_names(exts.get_extension_for_class(x509.KeyUsage).value)
    eku: list[str] | None = None
    with contextlib.suppress(x509.ExtensionNotFound):
        eku = [o.dotted_string for o in exts.get_extension_for_class(x509.ExtendedKeyUsage).value]
    return {
        "subject": _subject_fields(csr.subject),
        "subject_dn": csr.subject.rfc4514_string(),
        "sans": _sans_of(san),
        "key_type": key_type,
        "key_bits": key_bits,
        "public_key": public_pem(pub),
        "fingerprint": fingerprint(pub),  # type: ignore[arg-type]
        "is_ca": is_ca,
        "key_usage": ku,
        "ext_key_usage_oids": eku,
        "ext_key_usage": [_EKU_NAME_BY_OID.get(o, o) for o in eku] if eku else eku,
    }


@operation("csr_create", CsrCreateArgs)
@guarded
def csr_create(a: CsrCreateArgs) -> dict[str, Any]:
    key = (
        load_private(a.private_key)
        if a.private_key
        else generate_private_key(a.key_type, a.key_bits)
    )
    b = x509.CertificateSigningRequestBuilder().subject_name(_subject(a.subject))
    names = _general_names(a.sans)
    if names:
        b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if a.add_basic_constraints:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    csr = b.sign(key, _hash_for(key, a.signature_bits))  # type: ignore[arg-type]
    key_type, key_bits = describe(key)
    return {
        "csr": csr.public_bytes(serialization.Encoding.PEM).decode(),
        "private_key": private_pem(key, "traditional"),
        "private_key_pkcs8": private_pem(key, "pkcs8"),
        "private_key_type": key_type,
        "key_bits": key_bits,
        "fingerprint": fingerprint(key.public_key()),
    }  # type: ignore[arg-type]


@operation("crl_build", CrlArgs)
@guarded
def crl_build(a: CrlArgs) -> dict[str, Any]:
    cert, key, aki = _signer(a.signer.certificate, a.signer.private_key)
    b = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(cert.subject)
        .last_update(_when(a.this_update))
        .next_update(_when(a.next_update))
        .add_extension(x509.CRLNumber(a.crl_number), critical=False)
        .add_extension(aki, critical=False)
    )
    for r in a.revoked:
        b = b.add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(parse_serial(r.serial_number))
            .revocation_date(_when(r.revocation_time))
            .build()
        )
    crl = b.sign(key, _hash_for(key, 0))  # type: ignore[arg-type]
    return {"crl": crl.public_bytes(serialization.Encoding.PEM).decode()}


@operation("cert_resign", ResignArgs)
@guarded
def cert_resign(a: ResignArgs) -> dict[str, Any]:
    cert = load_cert(a.certificate)
    issuer_cert, key, aki = _signer(a.signer.certificate, a.signer.private_key)
    try:
        bc = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        bc = None
    if bc is None or not bc.ca:
        raise CryptoFailure("the given certificate is not a CA certificate")
    if cert.subject != cert.issuer:
        raise CryptoFailure("the given certificate is not self-issued")
    if (
        a.require_matching_certificate_algorithms
        and describe(cert.public_key())[0] != describe(key)[0]
    ):  # type: ignore[arg-type]
        raise CryptoFailure("the certificate's key algorithm does not match the issuer's")
    b = (
        x509.CertificateBuilder()
        .subject_name(cert.subject)
        .issuer_name(issuer_cert.subject)
        .public_key(cert.public_key())
        .serial_number(cert.serial_number)  # type: ignore[arg-type]
        .not_valid_before(cert.not_valid_before_utc)
        .not_valid_after(cert.not_valid_after_utc)
    )
    replaced = {ExtensionOID.AUTHORITY_KEY_IDENTIFIER}
    urls = _urls(
        tuple(a.issuing_certificates), tuple(a.crl_distribution_points), tuple(a.ocsp_servers)
    )
    if a.issuing_certificates or a.ocsp_servers:
        replaced.add(ExtensionOID.AUTHORITY_INFORMATION_ACCESS)
    if a.crl_distribution_points:
        replaced.add(ExtensionOID.CRL_DISTRIBUTION_POINTS)
    for ext in cert.extensions:
        if ext.oid not in replaced:
            b = b.add_extension(ext.value, critical=ext.critical)
    b = b.add_extension(aki, critical=False)
    for ext_value, critical in urls:
        b = b.add_extension(ext_value, critical=critical)
    alg = _hash_for(key, 0)
    return _cert_result(b.sign(key, alg))  # type: ignore[arg-type]


@operation("bundle_parse", BundleArgs)
@guarded
def bundle_parse(a: BundleArgs) -> dict[str, Any]:
    certs: list[dict[str, Any]] = []
    keys: list[dict[str, Any]] = []
    blocks = _PEM_BLOCK.findall(a.pem_bundle)
    if not blocks:
        raise CryptoFailure("no PEM blocks found in the bundle")
    for kind, body in blocks:
        pem = f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n"
        if kind == "CERTIFICATE":
            certs.append(cert_info(load_cert(pem)))
        elif kind.endswith("PRIVATE KEY") and kind != "ENCRYPTED PRIVATE KEY":
            key = load_private(pem)
            key_type, key_bits = describe(key)
            keys.append(
                {
                    "private_key_pkcs8": private_pem(key, "pkcs8"),
                    "key_type": key_type,
                    "key_bits": key_bits,
                    "fingerprint": fingerprint(key.public_key()),
                }
            )  # type: ignore[arg-type]
        elif kind in ("X509 CRL", "EC PARAMETERS"):
            continue
        else:
            raise CryptoFailure(f"unsupported PEM block {kind!r} in the bundle")
    return {"certificates": certs, "keys": keys}


def _issued_by(child: x509.Certificate, parent: x509.Certificate) -> bool:
    if child.issuer != parent.subject:
        return False
    try:
        child.verify_directly_issued_by(parent)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@operation("cert_info", CertInfoArgs)
@guarded
def cert_info_op(a: CertInfoArgs) -> dict[str, Any]:
    cert = load_cert(a.certificate)
    out = cert_info(cert)
    out["signed_by"] = [i for i, c in enumerate(a.candidates) if _issued_by(cert, load_cert(c))]
    return out


@operation("issuer_links", LinksArgs)
@guarded
def issuer_links(a: LinksArgs) -> dict[str, Any]:
    certs = [load_cert(c) for c in a.certificates]
    return {"parents": [[j for j, p in enumerate(certs) if _issued_by(c, p)] for c in certs]}
