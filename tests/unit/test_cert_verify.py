"""Chain building and constraint matching of the cert auth method (services/secrets/auth/
cert_verify.py): intermediates, CA rights, path length, key usage, time, globs, extensions."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.secrets.auth import cert_verify as cv
from services.secrets.globs import glob

NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)


@dataclass
class Node:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def make(
    cn: str,
    issuer: Node | None = None,
    *,
    ca: bool = False,
    path_length: int | None = None,
    usages: list[x509.ObjectIdentifier] | None = None,
    start: datetime.datetime = NOW - DAY,
    end: datetime.datetime = NOW + DAY,
    extra: list[x509.ExtensionType] | None = None,
    ou: str = "",
) -> Node:
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    name = x509.Name(attrs)
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.cert.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length), critical=True)
    )
    if usages is not None:
        b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    for ext in extra or []:
        b = b.add_extension(ext, critical=False)
    signer = issuer.key if issuer else key
    return Node(b.sign(signer, hashes.SHA256()), key)


@dataclass
class Role:
    allowed_names: list[str] = field(default_factory=list)
    allowed_common_names: list[str] = field(default_factory=list)
    allowed_dns_sans: list[str] = field(default_factory=list)
    allowed_email_sans: list[str] = field(default_factory=list)
    allowed_uri_sans: list[str] = field(default_factory=list)
    allowed_organizational_units: list[str] = field(default_factory=list)
    required_extensions: list[str] = field(default_factory=list)


def test_chain_through_a_client_sent_intermediate() -> None:
    root = make("root", ca=True)
    inter = make("inter", root, ca=True, path_length=0)
    leaf = make("leaf", inter, usages=[ExtendedKeyUsageOID.CLIENT_AUTH])
    chains = cv.verify_chains(leaf.cert, [inter.cert], [root.cert], NOW)
    assert [[c.subject for c in ch] for ch in chains] == [
        [leaf.cert.subject, inter.cert.subject, root.cert.subject]
    ]
    # Without the intermediate nothing links the leaf to the root.
    assert cv.verify_chains(leaf.cert, [], [root.cert], NOW) == []
    # A trusted intermediate is an anchor by itself.
    assert len(cv.verify_chains(leaf.cert, [], [inter.cert], NOW)) == 1


def test_refused_links() -> None:
    root = make("root", ca=True)
    not_ca = make("not-ca", root)
    under_not_ca = make("leaf", not_ca)
    assert cv.verify_chains(under_not_ca.cert, [not_ca.cert], [root.cert], NOW) == []
    # Path length 0 on the root forbids an intermediate below it.
    tight = make("tight", ca=True, path_length=0)
    inter = make("inter", tight, ca=True)
    leaf = make("leaf", inter)
    assert cv.verify_chains(leaf.cert, [inter.cert], [tight.cert], NOW) == []
    # Same subject name, different key: the signature does not verify.
    impostor = make("root", ca=True)
    leaf2 = make("leaf2", root)
    assert cv.verify_chains(leaf2.cert, [], [impostor.cert], NOW) == []
    # An expired intermediate breaks the chain.
    old = make("old", root, ca=True, end=NOW - DAY, start=NOW - 3 * DAY)
    leaf3 = make("leaf3", old)
    assert cv.verify_chains(leaf3.cert, [old.cert], [root.cert], NOW) == []


def test_leaf_time_and_usage() -> None:
    root = make("root", ca=True)
    expired = make("expired", root, start=NOW - 3 * DAY, end=NOW - DAY)
    with pytest.raises(cv.CertError, match="expired"):
        cv.verify_chains(expired.cert, [], [root.cert], NOW)
    server = make("server", root, usages=[ExtendedKeyUsageOID.SERVER_AUTH])
    with pytest.raises(cv.CertError, match="key usage"):
        cv.verify_chains(server.cert, [], [root.cert], NOW)
    anything = make("any", root, usages=[ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE])
    assert len(cv.verify_chains(anything.cert, [], [root.cert], NOW)) == 1


def test_constraints() -> None:
    root = make("root", ca=True)
    leaf = make(
        "app.example.com",
        root,
        ou="payments",
        extra=[
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("app.internal"),
                    x509.RFC822Name("ops@example.com"),
                    x509.UniformResourceIdentifier("spiffe://example/app"),
                ]
            ),
            x509.UnrecognizedExtension(
                x509.ObjectIdentifier("1.2.3.4"),
                b"\x0c\x05hello",  # UTF8String "hello"
            ),
        ],
    )
    c = leaf.cert
    assert cv.matches_constraints(c, Role())
    assert cv.matches_constraints(c, Role(allowed_common_names=["*.example.com"]))
    assert not cv.matches_constraints(c, Role(allowed_common_names=["other.example.com"]))
    assert cv.matches_constraints(c, Role(allowed_dns_sans=["app.*"]))
    assert cv.matches_constraints(c, Role(allowed_email_sans=["*@example.com"]))
    assert cv.matches_constraints(c, Role(allowed_uri_sans=["spiffe://example/*"]))
    assert not cv.matches_constraints(c, Role(allowed_uri_sans=["spiffe://other/*"]))
    assert cv.matches_constraints(c, Role(allowed_organizational_units=["pay*"]))
    assert not cv.matches_constraints(c, Role(allowed_organizational_units=["hr"]))
    assert cv.matches_constraints(c, Role(allowed_names=["app.internal"]))
    assert cv.matches_constraints(c, Role(required_extensions=["1.2.3.4:hel*"]))
    assert not cv.matches_constraints(c, Role(required_extensions=["1.2.3.4:bye"]))
    assert not cv.matches_constraints(c, Role(required_extensions=["1.2.3.5:*"]))
    assert cv.extension_strings(c)["1.2.3.4"] == "hello"


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("a", "a", True),
        ("a", "ab", False),
        ("*", "", True),
        ("a*c", "abbc", True),
        ("a*c", "ab", False),
        ("*.example.com", "x.example.com", True),
        ("*.example.com", "example.com", False),
        ("a*b*c", "abc", True),
        ("a*a", "a", False),
    ],
)
def test_glob(pattern: str, value: str, expected: bool) -> None:
    assert glob(pattern, value) is expected


def test_der_string() -> None:
    assert cv.der_string(b"\x13\x02hi") == "hi"
    assert cv.der_string(b"\x0c\x81\x03abc") == "abc"
    assert cv.der_string(b"\x02\x01\x05") == ""  # an INTEGER is not a string
    assert cv.der_string(b"\x0c\x05ab") == ""  # truncated
