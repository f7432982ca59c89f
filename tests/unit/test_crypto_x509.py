"""X.509 ops checked with independent tools: `openssl verify` on chains, `openssl x509 -text` and
`openssl crl -text` for what was written, `cryptography` parsing for exact values."""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.crypto.ops import CryptoFailure, run_local

assert shutil.which("openssl"), "openssl is not installed (./test.sh installs it)"
NOW = int(time.time())


def openssl(*args: str) -> str:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def spec(cn: str, *, hours: int = 24, **extra: Any) -> dict[str, Any]:
    return {
        "subject": {"common_name": cn},
        "not_before": NOW - 30,
        "not_after": NOW + hours * 3600,
        **extra,
    }


def signer(result: dict[str, Any], key: str | None = None) -> dict[str, str]:
    return {"certificate": result["certificate"], "private_key": key or result["private_key"]}


@pytest.fixture(scope="module")
def chain() -> dict[str, Any]:
    root = run_local(
        "x509_issue",
        {"key_type": "ec", "key_bits": 384, "cert": spec("Root X1", hours=240, is_ca=True)},
    )
    csr = run_local("csr_create", {"key_type": "rsa", "subject": {"common_name": "Int X1"}})
    inter = run_local(
        "x509_sign",
        {
            "csr": csr["csr"],
            "signer": signer(root),
            "cert": spec("Int X1", hours=120, is_ca=True, max_path_length=0),
        },
    )
    return {"root": root, "int": inter, "int_signer": signer(inter, csr["private_key"])}


def write(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("forms", "markers"),
    [
        (["traditional"], {"private_key": "BEGIN EC PRIVATE KEY"}),
        (["pkcs8"], {"private_key_pkcs8": "BEGIN PRIVATE KEY"}),
        (
            ["traditional", "pkcs8"],
            {"private_key": "BEGIN EC PRIVATE KEY", "private_key_pkcs8": "BEGIN PRIVATE KEY"},
        ),
    ],
)
def test_issue_returns_only_the_key_forms_asked_for(
    chain: dict[str, Any], forms: list[str], markers: dict[str, str]
) -> None:
    leaf = run_local(
        "x509_issue",
        {
            "key_type": "ec",
            "signer": chain["int_signer"],
            "cert": spec(f"forms-{'-'.join(forms)}.example.com", hours=1),
            "key_forms": forms,
        },
    )
    got = {k: v for k, v in leaf.items() if k in ("private_key", "private_key_pkcs8")}
    assert sorted(got) == sorted(markers)
    cert_key = x509.load_pem_x509_certificate(leaf["certificate"].encode()).public_key()
    for field, marker in markers.items():
        assert marker in got[field]
        key = serialization.load_pem_private_key(got[field].encode(), None)
        assert key.public_key() == cert_key  # the key the certificate was issued for
    assert leaf["private_key_type"] == "ec"


def test_leaf_with_role_subject_and_plain_sans_verifies_with_openssl(
    chain: dict[str, Any], tmp_path: Path
) -> None:
    """The leaf whose subject and SANs the template writes itself (no serialNumber, UID or
    other name), read back by openssl."""
    leaf = run_local(
        "x509_issue",
        {
            "key_type": "ec",
            "signer": chain["int_signer"],
            "cert": {
                **spec("direct.example.com", hours=1),
                "subject": {
                    "common_name": "direct.example.com",
                    "organization": ["Acme"],
                    "ou": ["Ops"],
                    "country": ["DE"],
                    "locality": ["Berlin"],
                },
                "sans": {
                    "dns": ["direct.example.com", "*.direct.example.com"],
                    "email": ["ops@example.com"],
                    "ip": ["192.0.2.7", "2001:db8::7"],
                    "uri": ["spiffe://example.com/direct"],
                },
            },
        },
    )
    root = write(tmp_path, "root.pem", chain["root"]["certificate"])
    inter = write(tmp_path, "int.pem", chain["int"]["certificate"])
    path = write(tmp_path, "leaf.pem", leaf["certificate"])
    assert "leaf.pem: OK" in openssl("verify", "-CAfile", root, "-untrusted", inter, path)
    text = openssl("x509", "-in", path, "-noout", "-text", "-nameopt", "RFC2253")
    for needle in (
        "Subject: CN=direct.example.com,OU=Ops,O=Acme,L=Berlin,C=DE",
        "DNS:direct.example.com, DNS:*.direct.example.com, email:ops@example.com, "
        "IP Address:192.0.2.7, IP Address:2001:DB8:0:0:0:0:0:7, URI:spiffe://example.com/direct",
    ):
        assert needle in text, needle
    # RFC 5280: the SAN extension is critical only when the subject is empty.
    assert "X509v3 Subject Alternative Name: critical" not in text


def test_leaf_chain_verifies_with_openssl(chain: dict[str, Any], tmp_path: Path) -> None:
    leaf = run_local(
        "x509_issue",
        {
            "key_type": "ec",
            "signer": chain["int_signer"],
            "cert": spec(
                "www.example.com",
                hours=1,
                sans={
                    "dns": ["www.example.com", "api.example.com"],
                    "ip": ["10.0.0.1", "::1"],
                    "uri": ["spiffe://example.com/web"],
                    "email": ["ops@example.com"],
                    "other": ["1.3.6.1.4.1.311.20.2.3;UTF8:devops@example.com"],
                },
                key_usage=["DigitalSignature", "KeyAgreement"],
                ext_key_usage=["ServerAuth", "ClientAuth"],
                issuing_certificates=["http://ca.example.com/ca"],
                crl_distribution_points=["http://ca.example.com/crl"],
                ocsp_servers=["http://ocsp.example.com"],
            ),
        },
    )
    root = write(tmp_path, "root.pem", chain["root"]["certificate"])
    inter = write(tmp_path, "int.pem", chain["int"]["certificate"])
    path = write(tmp_path, "leaf.pem", leaf["certificate"])
    assert "leaf.pem: OK" in openssl("verify", "-CAfile", root, "-untrusted", inter, path)
    assert "int.pem: OK" in openssl("verify", "-CAfile", root, inter)
    text = openssl("x509", "-in", path, "-noout", "-text")
    for needle in (
        "DNS:www.example.com",
        "DNS:api.example.com",
        "IP Address:10.0.0.1",
        "URI:spiffe://example.com/web",
        "email:ops@example.com",
        "TLS Web Server Authentication",
        "TLS Web Client Authentication",
        "CA Issuers - URI:http://ca.example.com/ca",
        "OCSP - URI:http://ocsp.example.com",
        "URI:http://ca.example.com/crl",
        "Digital Signature, Key Agreement",
    ):
        assert needle in text, needle
    cert = x509.load_pem_x509_certificate(leaf["certificate"].encode())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    other = san.get_values_for_type(x509.OtherName)[0]
    assert other.type_id.dotted_string == "1.3.6.1.4.1.311.20.2.3"
    assert other.value == b"\x0c\x12devops@example.com"  # a DER UTF8String
    assert cert.not_valid_after_utc == dt.datetime.fromtimestamp(NOW + 3600, dt.UTC)
    assert leaf["serial_number"] == cert.serial_number.to_bytes(
        (cert.serial_number.bit_length() + 7) // 8, "big"
    ).hex(":")
    assert "BEGIN EC PRIVATE KEY" in leaf["private_key"]
    assert (
        x509.load_pem_x509_certificate(chain["int"]["certificate"].encode())
        .extensions.get_extension_for_class(x509.BasicConstraints)
        .value.path_length
        == 0
    )


def test_ca_extensions_and_name_constraints(chain: dict[str, Any], tmp_path: Path) -> None:
    csr = run_local("csr_create", {"key_type": "ec", "subject": {"common_name": "Scoped"}})
    scoped = run_local(
        "x509_sign",
        {
            "csr": csr["csr"],
            "signer": signer(chain["root"]),
            "cert": spec(
                "Scoped",
                is_ca=True,
                max_path_length=0,
                permitted_dns_domains=["example.com"],
                excluded_ip_ranges=["10.0.0.0/8"],
            ),
        },
    )
    text = openssl(
        "x509", "-in", write(tmp_path, "s.pem", scoped["certificate"]), "-noout", "-text"
    )
    assert "CA:TRUE, pathlen:0" in text
    assert "Certificate Sign, CRL Sign" in text
    assert "Permitted:" in text and "DNS:example.com" in text
    assert "IP:10.0.0.0/255.0.0.0" in text
    ok = run_local(
        "x509_issue",
        {
            "key_type": "ec",
            "signer": signer(scoped, csr["private_key"]),
            "cert": spec("a.example.com", sans={"dns": ["a.example.com"]}),
        },
    )
    bad = run_local(
        "x509_issue",
        {
            "key_type": "ec",
            "signer": signer(scoped, csr["private_key"]),
            "cert": spec("a.example.org", sans={"dns": ["a.example.org"]}),
        },
    )
    root = write(tmp_path, "root.pem", chain["root"]["certificate"])
    inter = write(tmp_path, "scoped.pem", scoped["certificate"])
    openssl(
        "verify", "-CAfile", root, "-untrusted", inter, write(tmp_path, "ok.pem", ok["certificate"])
    )
    proc = subprocess.run(
        [
            "openssl",
            "verify",
            "-CAfile",
            root,
            "-untrusted",
            inter,
            write(tmp_path, "bad.pem", bad["certificate"]),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0 and "subtree violation" in proc.stdout + proc.stderr


def test_rsa_pss_and_signature_bits(tmp_path: Path) -> None:
    root = run_local(
        "x509_issue",
        {"key_type": "rsa", "cert": spec("RSA Root", is_ca=True, use_pss=True, signature_bits=384)},
    )
    cert = x509.load_pem_x509_certificate(root["certificate"].encode())
    assert cert.signature_algorithm_parameters is not None
    assert isinstance(cert.signature_algorithm_parameters, padding.PSS)
    assert cert.signature_hash_algorithm is not None
    assert cert.signature_hash_algorithm.name == "sha384"
    assert isinstance(cert.public_key(), rsa.RSAPublicKey)
    root_path = write(tmp_path, "r.pem", root["certificate"])
    assert "r.pem: OK" in openssl("verify", "-CAfile", root_path, root_path)


def test_not_after_9999_and_explicit_serial() -> None:
    end = int(dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp())
    out = run_local(
        "x509_issue",
        {
            "key_type": "ed25519",
            "cert": {
                "subject": {"common_name": "device"},
                "not_before": NOW,
                "not_after": end,
                "serial": "01:02:03",
            },
        },
    )
    cert = x509.load_pem_x509_certificate(out["certificate"].encode())
    assert cert.not_valid_after_utc.year == 9999
    assert out["serial_number"] == "01:02:03" and out["not_after"] == end


def test_csr_parse_reads_names_key_and_extensions() -> None:
    made = run_local(
        "csr_create",
        {
            "key_type": "ec",
            "key_bits": 384,
            "subject": {
                "common_name": "svc.example.com",
                "organization": ["Acme"],
                "country": ["NL"],
            },
            "sans": {
                "dns": ["svc.example.com"],
                "ip": ["192.0.2.7"],
                "email": ["a@example.com"],
                "uri": ["https://example.com/x"],
                "other": ["1.2.3.4;UTF8:hello"],
            },
            "add_basic_constraints": True,
        },
    )
    info = run_local("csr_parse", {"csr": made["csr"]})
    assert info["subject"]["common_name"] == "svc.example.com"
    assert info["subject"]["organization"] == ["Acme"] and info["subject"]["country"] == ["NL"]
    assert info["sans"] == {
        "dns": ["svc.example.com"],
        "email": ["a@example.com"],
        "ip": ["192.0.2.7"],
        "uri": ["https://example.com/x"],
        "other": ["1.2.3.4;UTF8:hello"],
    }
    assert info["key_type"] == "ec" and info["key_bits"] == 384 and info["is_ca"] is True
    assert info["fingerprint"] == made["fingerprint"]


def test_malformed_and_forged_csrs_are_refused() -> None:
    with pytest.raises(CryptoFailure, match="malformed CSR: expected a PEM"):
        run_local("csr_parse", {"csr": "hello"})
    with pytest.raises(CryptoFailure, match="malformed CSR"):
        run_local(
            "csr_parse",
            {"csr": "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----"},
        )
    made = run_local("csr_create", {"key_type": "ec", "subject": {"common_name": "x"}})
    body = made["csr"].splitlines()
    # Flip one byte inside the signed data: still parses, but the signature no longer holds.
    line = body[2]
    body[2] = line[:10] + ("A" if line[10] != "A" else "B") + line[11:]
    with pytest.raises(CryptoFailure, match="malformed CSR"):
        run_local("csr_parse", {"csr": "\n".join(body)})


def test_sign_refusals(chain: dict[str, Any]) -> None:
    with pytest.raises(CryptoFailure, match="exactly one of csr, public_key or private_key"):
        run_local("x509_sign", {"cert": spec("x"), "signer": chain["int_signer"]})
    with pytest.raises(CryptoFailure, match="not_after must be later"):
        run_local(
            "x509_issue",
            {
                "key_type": "ec",
                "cert": {"subject": {"common_name": "x"}, "not_before": NOW, "not_after": NOW - 5},
            },
        )
    with pytest.raises(CryptoFailure, match="unknown key usage 'Flying'"):
        run_local("x509_issue", {"key_type": "ec", "cert": spec("x", key_usage=["Flying"])})
    with pytest.raises(CryptoFailure, match="invalid other SAN"):
        run_local("x509_issue", {"key_type": "ec", "cert": spec("x", sans={"other": ["oops"]})})
    with pytest.raises(CryptoFailure, match="invalid IP address"):
        run_local("x509_issue", {"key_type": "ec", "cert": spec("x", sans={"ip": ["1.2.3"]})})
    wrong = {
        "certificate": chain["root"]["certificate"],
        "private_key": run_local("generate_key", {"key_type": "ec"})["private_key"],
    }
    with pytest.raises(CryptoFailure, match="does not match its certificate"):
        run_local("x509_issue", {"key_type": "ec", "cert": spec("x"), "signer": wrong})
    with pytest.raises(CryptoFailure, match="unsupported key type"):
        run_local("x509_issue", {"key_type": "dsa", "cert": spec("x")})


def test_crl_lists_revoked_serials(chain: dict[str, Any], tmp_path: Path) -> None:
    serials = ["0a:0b:0c", "7f:ff:01:02"]
    out = run_local(
        "crl_build",
        {
            "signer": chain["int_signer"],
            "crl_number": 7,
            "this_update": NOW,
            "next_update": NOW + 3600,
            "revoked": [{"serial_number": s, "revocation_time": NOW - 60} for s in serials],
        },
    )
    path = write(tmp_path, "crl.pem", out["crl"])
    text = openssl("crl", "-in", path, "-noout", "-text")
    assert "Serial Number: 0A0B0C" in text and "Serial Number: 7FFF0102" in text
    assert re.search(r"CRL Number:\s*\n\s*7\n", text)
    inter = write(tmp_path, "int.pem", chain["int"]["certificate"])
    assert "verify OK" in (
        subprocess.run(
            ["openssl", "crl", "-in", path, "-CAfile", inter, "-noout"],
            capture_output=True,
            text=True,
            check=False,
        ).stderr
    )


def test_resign_self_issued(chain: dict[str, Any], tmp_path: Path) -> None:
    other_root = run_local("x509_issue", {"key_type": "ec", "cert": spec("Other Root", is_ca=True)})
    out = run_local(
        "cert_resign",
        {
            "certificate": other_root["certificate"],
            "signer": signer(chain["root"]),
            "crl_distribution_points": ["http://crl.example/x"],
        },
    )
    cross = x509.load_pem_x509_certificate(out["certificate"].encode())
    orig = x509.load_pem_x509_certificate(other_root["certificate"].encode())
    root = x509.load_pem_x509_certificate(chain["root"]["certificate"].encode())
    assert cross.issuer == root.subject and cross.subject == orig.subject
    assert cross.serial_number == orig.serial_number
    assert cross.public_key() == orig.public_key()
    cross.verify_directly_issued_by(root)
    leaf = run_local(
        "x509_issue", {"key_type": "ec", "cert": spec("x.example", sans={"dns": ["x.example"]})}
    )
    with pytest.raises(CryptoFailure, match="not a CA certificate"):
        run_local(
            "cert_resign", {"certificate": leaf["certificate"], "signer": signer(chain["root"])}
        )
    with pytest.raises(CryptoFailure, match="not self-issued"):
        run_local(
            "cert_resign",
            {"certificate": chain["int"]["certificate"], "signer": signer(chain["root"])},
        )
    with pytest.raises(CryptoFailure, match="does not match the issuer"):
        run_local(
            "cert_resign",
            {
                "certificate": other_root["certificate"],
                "signer": chain["int_signer"],
                "require_matching_certificate_algorithms": True,
            },
        )


def test_bundle_parse_info_and_links(chain: dict[str, Any]) -> None:
    key = chain["int_signer"]["private_key"]
    out = run_local(
        "bundle_parse",
        {"pem_bundle": "junk\n" + chain["root"]["certificate"] + key + chain["int"]["certificate"]},
    )
    assert [c["common_name"] for c in out["certificates"]] == ["Root X1", "Int X1"]
    root_info, int_info = out["certificates"]
    assert root_info["self_issued"] and root_info["is_ca"] and root_info["key_type"] == "ec"
    assert int_info["max_path_length"] == 0 and int_info["aki"] == root_info["ski"]
    assert out["keys"][0]["fingerprint"] == int_info["fingerprint"]
    links = run_local(
        "issuer_links",
        {"certificates": [chain["int"]["certificate"], chain["root"]["certificate"]]},
    )
    assert links["parents"] == [[1], [1]]
    info = run_local(
        "cert_info",
        {
            "certificate": chain["int"]["certificate"],
            "candidates": [chain["int"]["certificate"], chain["root"]["certificate"]],
        },
    )
    assert info["signed_by"] == [1]
    with pytest.raises(CryptoFailure, match="no PEM blocks"):
        run_local("bundle_parse", {"pem_bundle": "nothing here"})
    with pytest.raises(CryptoFailure, match="unsupported PEM block"):
        run_local("bundle_parse", {"pem_bundle": "-----BEGIN FOO-----\nAA==\n-----END FOO-----"})


def test_subject_order_and_eku_oids() -> None:
    out = run_local(
        "x509_issue",
        {
            "key_type": "ec",
            "cert": spec(
                "x",
                subject={
                    "common_name": "x",
                    "organization": ["Acme"],
                    "country": ["US"],
                    "ou": ["Ops"],
                    "serial_number": "42",
                },
                ext_key_usage=["CodeSigning"],
                ext_key_usage_oids=["1.3.6.1.4.1.99.1"],
                policy_identifiers=["1.2.3.4"],
            ),
        },
    )
    cert = x509.load_pem_x509_certificate(out["certificate"].encode())
    assert cert.subject.rfc4514_string() == "2.5.4.5=42,CN=x,OU=Ops,O=Acme,C=US"
    assert cert.subject.get_attributes_for_oid(NameOID.SERIAL_NUMBER)[0].value == "42"
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [
        ExtendedKeyUsageOID.CODE_SIGNING,
        x509.ObjectIdentifier("1.3.6.1.4.1.99.1"),
    ]
