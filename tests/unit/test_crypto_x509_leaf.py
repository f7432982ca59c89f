"""Leaves from a template (services/crypto/x509_leaf.py) against cryptography's builder
(`build_certificate`): the same TBSCertificate, byte for byte, for every issuer key type and a
spread of subjects, SANs and role extensions; what the template does not make goes to the
builder with the builder's answers."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from services.crypto.ops import CryptoFailure, run_local
from services.crypto.ops_keys import generate_private_key, load_private
from services.crypto.ops_x509 import CertSpec, Signer, build_certificate, leaf_der

NOW = int(time.time())
ISSUERS = [("ec", 256), ("ec", 384), ("ec", 521), ("rsa", 2048), ("ed25519", 0)]
LEAF_KEYS = [("ec", 256), ("ec", 384), ("rsa", 2048), ("ed25519", 0)]


def spec(**extra: Any) -> CertSpec:
    base: dict[str, Any] = {
        "subject": {"common_name": "leaf.example.com"},
        "sans": {"dns": ["leaf.example.com"]},
        "not_before": NOW - 30,
        "not_after": NOW + 3600,
        "serial": "3f:00:a1:17:42:ff:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e",
        "key_usage": ["DigitalSignature", "KeyAgreement", "KeyEncipherment"],
        "ext_key_usage": ["ServerAuth", "ClientAuth"],
    }
    return msgspec.convert({**base, **extra}, CertSpec)


SPECS = {
    "plain": spec(),
    "rich subject": spec(
        subject={
            "common_name": "rich.example.com",
            "ou": ["Ops", "Sec"],
            "organization": ["Acme"],
            "country": ["DE"],
            "locality": ["Köln"],
            "province": ["NRW"],
            "street_address": ["1 Main St"],
            "postal_code": ["50667"],
            "serial_number": "SN-1",
            "user_ids": ["u1"],
        }
    ),
    "every san": spec(
        sans={
            # a SAN longer than 127 bytes: long-form DER lengths inside an extension
            "dns": ["a.example.com", "*.b.example.com", ".".join(["x" * 60] * 4)],
            "email": ["ops@example.com"],
            "ip": ["10.0.0.1", "2001:db8::1"],
            "uri": ["spiffe://example.com/x"],
            "other": ["1.3.6.1.4.1.311.20.2.3;UTF8:user@example.com"],
        }
    ),
    "role attributes, no serialNumber or UID": spec(
        subject={
            "common_name": "ö.example.com",
            "ou": ["Ops", ""],
            "organization": ["Acme", "Ä GmbH"],
            "country": ["DE", "fr"],
            "locality": ["Köln"],
            "province": ["NRW"],
            "street_address": ["1 Main St"],
            "postal_code": ["50667"],
        }
    ),
    "a 64-byte common name": spec(subject={"common_name": "c" * 60 + ".com"}),
    "every san but other names": spec(
        sans={
            "dns": ["a.example.com", "*.b.example.com", ".".join(["x" * 60] * 4), ""],
            "email": ["ops@example.com"],
            "ip": [" 10.0.0.1", "2001:db8::1"],
            "uri": ["spiffe://example.com/x", "urn:a:" + "b" * 200],
        }
    ),
    "empty subject, critical san": spec(subject={}),
    "no extensions of the role": spec(key_usage=[], ext_key_usage=[], sans={}),
    "role extensions": spec(
        basic_constraints_valid_for_non_ca=True,
        ext_key_usage_oids=["1.2.3.4.5", "1.3.6.1.5.5.7.3.1"],
        policy_identifiers=["1.2.3.4", "2.23.140.1.2.1"],
        issuing_certificates=["http://ca.example.com/ca"],
        crl_distribution_points=["http://ca.example.com/crl", "http://b.example.com/crl"],
        ocsp_servers=["http://ocsp.example.com"],
    ),
    "after 2049: GeneralizedTime": spec(not_after=2_600_000_000),
    "random serial": spec(serial=""),
    "sha384 and sha512 where the key allows": spec(signature_bits=384),
}


@pytest.fixture(scope="module")
def issuers() -> dict[tuple[str, int], Signer]:
    out = {}
    for kind, bits in ISSUERS:
        root = run_local(
            "x509_issue",
            {
                "key_type": kind,
                "key_bits": bits,
                "cert": {
                    "subject": {"common_name": f"Root {kind} {bits}", "organization": ["T"]},
                    "not_before": NOW - 60,
                    "not_after": NOW + 86400,
                    "is_ca": True,
                },
            },
        )
        out[(kind, bits)] = Signer(certificate=root["certificate"], private_key=root["private_key"])
    return out


@pytest.fixture(scope="module")
def leaf_keys() -> dict[tuple[str, int], Any]:
    return {kind: generate_private_key(*kind).public_key() for kind in LEAF_KEYS}


@pytest.mark.parametrize("issuer", ISSUERS, ids=lambda i: f"{i[0]}{i[1] or ''}")
@pytest.mark.parametrize("leaf", LEAF_KEYS, ids=lambda i: f"{i[0]}{i[1] or ''}")
@pytest.mark.parametrize("case", list(SPECS))
def test_template_writes_what_the_builder_writes(
    issuers: dict[tuple[str, int], Signer],
    leaf_keys: dict[tuple[str, int], Any],
    issuer: tuple[str, int],
    leaf: tuple[str, int],
    case: str,
) -> None:
    s = SPECS[case]
    signer = issuers[issuer]
    pub = leaf_keys[leaf]
    leaf = leaf_der(s, pub, signer)
    assert leaf is not None, "the template declined a leaf it can make"
    fast = x509.load_der_x509_certificate(leaf[0])
    assert fast.serial_number == leaf[1]
    slow = build_certificate(s, pub, signer, None, None)  # type: ignore[arg-type]
    if not s.serial:  # a random serial each: compare the rest
        slow = build_certificate(
            msgspec.structs.replace(s, serial=format(fast.serial_number, "x")),
            pub,  # type: ignore[arg-type]
            signer,
            None,
            None,
        )
    assert fast.tbs_certificate_bytes == slow.tbs_certificate_bytes
    assert fast.signature_algorithm_oid == slow.signature_algorithm_oid
    fast.verify_directly_issued_by(x509.load_pem_x509_certificate(signer.certificate.encode()))


def test_each_leaf_has_its_own_key_and_serial(issuers: dict[tuple[str, int], Signer]) -> None:
    args = {
        "key_type": "ec",
        "key_bits": 256,
        "cert": msgspec.to_builtins(msgspec.structs.replace(SPECS["plain"], serial="")),
        "signer": msgspec.to_builtins(issuers[("ec", 256)]),
    }
    got = [run_local("x509_issue", args) for _ in range(3)]
    certs = [x509.load_pem_x509_certificate(g["certificate"].encode()) for g in got]
    assert len({c.serial_number for c in certs}) == 3
    assert len({g["private_key"] for g in got}) == 3
    for g, c in zip(got, certs, strict=True):
        key = load_private(g["private_key"])
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert key.public_key() == c.public_key()
        assert g["not_before"] == SPECS["plain"].not_before
        assert int(g["serial_number"].replace(":", ""), 16) == c.serial_number
        assert g["certificate"] == c.public_bytes(serialization.Encoding.PEM).decode()
        assert (g["not_before"], g["not_after"]) == (
            int(c.not_valid_before_utc.timestamp()),
            int(c.not_valid_after_utc.timestamp()),
        )


@pytest.mark.parametrize(
    "extra",
    [
        {"is_ca": True},
        {"use_pss": True},
        {"skid": "01:02:03"},
        {"not_before": -700_000_000},  # before 1950: the builder's refusal
        {"not_after": 253_402_400_000},  # after 9999
        {"key_usage": ["NoSuchUsage"]},
        {"permitted_dns_domains": ["example.com"]},
        {"subject": {"common_name": "c" * 65}},
        {"sans": {"dns": ["bücher.example"]}},
        {"sans": {"email": ["ö@example.com"]}},
        {"sans": {"ip": ["1.2.3"]}},
        {"subject": {"country": ["DEU"]}},
    ],
    ids=[
        "ca",
        "pss",
        "skid",
        "before-1950",
        "after-9999",
        "bad-usage",
        "name-constraints",
        "long-cn",
        "unicode-dns",
        "unicode-email",
        "bad-ip",
        "bad-country",
    ],
)
def test_the_builder_makes_what_the_template_does_not(
    issuers: dict[tuple[str, int], Signer], extra: dict[str, Any]
) -> None:
    s = spec(**extra)
    signer = issuers[("rsa", 2048)]
    pub = generate_private_key("ec", 256).public_key()
    assert leaf_der(s, pub, signer) is None


def test_refusals_are_the_builders() -> None:
    root = run_local(
        "x509_issue",
        {
            "key_type": "ec",
            "cert": {"subject": {"common_name": "R"}, "not_before": NOW, "not_after": NOW + 60},
        },
    )
    signer = {"certificate": root["certificate"], "private_key": root["private_key"]}
    cert = msgspec.to_builtins(msgspec.structs.replace(SPECS["plain"], key_usage=["Bogus"]))
    with pytest.raises(CryptoFailure, match="unknown key usage 'Bogus'"):
        run_local("x509_issue", {"key_type": "ec", "cert": cert, "signer": signer})
    cert = {**msgspec.to_builtins(SPECS["plain"]), "sans": {"ip": ["1.2.3"]}}
    with pytest.raises(CryptoFailure, match="invalid IP address"):
        run_local("x509_issue", {"key_type": "ec", "cert": cert, "signer": signer})
