"""The PKI engine through the real gateway with a crypto worker, checked with independent tools
(`openssl verify`, `openssl x509 -text`, `openssl crl -text`, `cryptography` parsing)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import re
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from services.crypto.service import CryptoService
from services.secrets.core.namespaces import ROOT
from shared.bus import Bus
from tests.harness import Cluster, start_cluster

pytestmark = [
    pytest.mark.nats,
]


async def add_worker(c: Cluster) -> CryptoService:
    """An in-process crypto worker on the cluster's subjects (stopped by c.close())."""
    bus = await Bus.connect(c.settings.nats_url, "crypto")
    worker = CryptoService(bus, c.settings)
    await worker.start()
    c.extra.append(worker)
    c.buses.append(bus)
    return worker


@contextlib.asynccontextmanager
async def pki_cluster(nats_url: str, *mounts: str, workers: int = 1) -> AsyncIterator[Cluster]:
    c = await start_cluster(nats_url)
    try:
        for _ in range(workers):
            await add_worker(c)
        for mount in mounts or ("pki",):
            status, body = await c.request(
                "POST",
                f"/v1/sys/mounts/{mount}",
                json={"type": "pki", "config": {"max_lease_ttl": "87600h"}},
            )
            assert status == 204, body
        yield c
    finally:
        await c.close()


async def ok(c: Cluster, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    status, out = await c.request(method, "/v1/" + path, json=body, **kw)
    assert status in (200, 204), (path, status, out)
    return out


async def fails(c: Cluster, path: str, body: Any, status: int = 400) -> str:
    got, out = await c.request("POST", "/v1/" + path, json=body)
    assert got == status, (path, got, out)
    return " ".join(out["errors"])


async def raw_get(c: Cluster, path: str) -> tuple[int, bytes, str]:
    """GET without a token, keeping the body as bytes (DER endpoints)."""
    async with aiohttp.ClientSession() as s, s.get(c.secrets_url + "/v1/" + path) as r:
        return r.status, await r.read(), r.headers.get("Content-Type", "")


def openssl(*args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=False)
    assert proc.returncode == 0, (proc.stderr + proc.stdout).decode()
    return proc.stdout.decode()


def openssl_fails(*args: str) -> str:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    assert proc.returncode != 0, proc.stdout
    return proc.stdout + proc.stderr


def pem_file(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text if text.endswith("\n") else text + "\n")
    return str(path)


def parse(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def make_csr(
    cn: str, sans: list[str], key: Any = None, *, ca: bool = False, org: str = ""
) -> tuple[str, Any]:
    key = key or ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(s) for s in sans]), False)
    if ca:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    csr = b.sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM).decode(), key


async def root_and_intermediate(c: Cluster) -> tuple[str, str]:
    """Root in pki/, intermediate in pki_int/ signed by it (the common two-mount setup)."""
    root = await ok(
        c,
        "POST",
        "pki/root/generate/internal",
        {
            "common_name": "Example Root",
            "ttl": "8760h",
            "key_type": "ec",
            "key_bits": 384,
            "issuer_name": "root-2026",
        },
    )
    csr = await ok(
        c,
        "POST",
        "pki_int/intermediate/generate/internal",
        {"common_name": "Example Intermediate", "key_type": "rsa"},
    )
    signed = await ok(
        c,
        "POST",
        "pki/root/sign-intermediate",
        {
            "csr": csr["data"]["csr"],
            "common_name": "Example Intermediate",
            "ttl": "4380h",
            "format": "pem_bundle",
        },
    )
    await ok(
        c, "POST", "pki_int/intermediate/set-signed", {"certificate": signed["data"]["certificate"]}
    )
    return root["data"]["certificate"], signed["data"]["certificate"].split(
        "-----END CERTIFICATE-----"
    )[0] + "-----END CERTIFICATE-----"


async def test_root_intermediate_leaf_chain(nats_url: str, tmp_path: Path) -> None:
    async with pki_cluster(nats_url, "pki", "pki_int") as c:
        root_pem, int_pem = await root_and_intermediate(c)
        await ok(
            c,
            "POST",
            "pki_int/config/urls",
            {
                "issuing_certificates": "http://127.0.0.1:8200/v1/pki_int/ca",
                "crl_distribution_points": ["http://127.0.0.1:8200/v1/pki_int/crl"],
            },
        )
        await ok(
            c,
            "POST",
            "pki_int/roles/web",
            {
                "allowed_domains": ["example.com"],
                "allow_subdomains": True,
                "max_ttl": "72h",
                "key_type": "ec",
                "ttl": "24h",
            },
        )
        out = await ok(
            c,
            "POST",
            "pki_int/issue/web",
            {
                "common_name": "www.example.com",
                "alt_names": "api.example.com,me@mail.example.com",
                "ip_sans": "127.0.0.1",
                "ttl": "2h",
            },
        )
        data = out["data"]
        assert data["private_key_type"] == "ec" and "EC PRIVATE KEY" in data["private_key"]
        assert [parse(p).subject for p in data["ca_chain"]] == [
            parse(int_pem).subject,
            parse(root_pem).subject,
        ]
        assert data["issuing_ca"].strip() == int_pem.strip()
        leaf = pem_file(tmp_path, "leaf.pem", data["certificate"])
        root = pem_file(tmp_path, "root.pem", root_pem)
        inter = pem_file(tmp_path, "int.pem", int_pem)
        assert "leaf.pem: OK" in openssl("verify", "-CAfile", root, "-untrusted", inter, leaf)
        assert "int.pem: OK" in openssl("verify", "-CAfile", root, inter)
        text = openssl("x509", "-in", leaf, "-noout", "-text")
        for needle in (
            "DNS:www.example.com",
            "DNS:api.example.com",
            "email:me@mail.example.com",
            "IP Address:127.0.0.1",
            "TLS Web Server Authentication",
            "CA Issuers - URI:http://127.0.0.1:8200/v1/pki_int/ca",
            "URI:http://127.0.0.1:8200/v1/pki_int/crl",
            "Digital Signature, Key Encipherment, Key Agreement",
        ):
            assert needle in text, needle
        cert = parse(data["certificate"])
        life = cert.not_valid_after_utc - cert.not_valid_before_utc
        assert life == dt.timedelta(hours=2, seconds=30)  # ttl plus not_before_duration
        assert data["serial_number"] == cert.serial_number.to_bytes(
            (cert.serial_number.bit_length() + 7) // 8, "big"
        ).hex(":")
        # The key matches the certificate, and the intermediate's path length follows the root.
        key = serialization.load_pem_private_key(data["private_key"].encode(), None)
        assert key.public_key() == cert.public_key()
        trimmed = await ok(
            c,
            "POST",
            "pki_int/issue/web",
            {"common_name": "t.example.com", "remove_roots_from_chain": True},
        )
        assert [p.strip() for p in trimmed["data"]["ca_chain"]] == [int_pem.strip()]
        listed = await ok(c, "LIST", "pki_int/certs")
        assert data["serial_number"] in listed["data"]["keys"]
        read = await ok(c, "GET", f"pki_int/cert/{data['serial_number']}", token="")
        assert read["data"]["certificate"].strip() == data["certificate"].strip()
        assert read["data"]["revocation_time"] == 0
        # RSA leaves from an RSA role verify the same way.
        await ok(
            c,
            "POST",
            "pki_int/roles/rsa",
            {"allowed_domains": "example.com", "allow_subdomains": True},
        )
        rsa_out = await ok(c, "POST", "pki_int/issue/rsa", {"common_name": "r.example.com"})
        assert isinstance(parse(rsa_out["data"]["certificate"]).public_key(), rsa.RSAPublicKey)
        rsa_leaf = pem_file(tmp_path, "rsa.pem", rsa_out["data"]["certificate"])
        assert "rsa.pem: OK" in openssl("verify", "-CAfile", root, "-untrusted", inter, rsa_leaf)
        # Unauthenticated authority information.
        status, chain = await c.request("GET", "/v1/pki_int/ca_chain", token="")
        assert status == 200 and chain.count("BEGIN CERTIFICATE") == 2
        status, ca_pem = await c.request("GET", "/v1/pki_int/ca/pem", token="")
        assert status == 200 and ca_pem.strip() == int_pem.strip()
        roles = await ok(c, "LIST", "pki_int/roles")
        assert roles["data"]["keys"] == ["rsa", "web"]


async def test_sign_csr_and_sign_verbatim(nats_url: str, tmp_path: Path) -> None:
    async with pki_cluster(nats_url) as c:
        root = await ok(
            c,
            "POST",
            "pki/root/generate/internal",
            {"common_name": "Root", "key_type": "ec", "ttl": "720h"},
        )
        root_file = pem_file(tmp_path, "root.pem", root["data"]["certificate"])
        await ok(
            c,
            "POST",
            "pki/roles/svc",
            {
                "allowed_domains": "svc.internal",
                "allow_subdomains": True,
                "key_type": "ec",
                "server_flag": False,
                "client_flag": True,
                "max_ttl": "48h",
            },
        )
        csr, key = make_csr("a.svc.internal", ["b.svc.internal"])
        out = await ok(
            c, "POST", "pki/sign/svc", {"csr": csr, "common_name": "ignored", "ttl": "1h"}
        )
        cert = parse(out["data"]["certificate"])
        assert cert.public_key() == key.public_key()
        assert (
            cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "a.svc.internal"
        )  # use_csr_common_name
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert sorted(san.get_values_for_type(x509.DNSName)) == ["a.svc.internal", "b.svc.internal"]
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert [o.dotted_string for o in eku] == ["1.3.6.1.5.5.7.3.2"]
        path = pem_file(tmp_path, "signed.pem", out["data"]["certificate"])
        assert "signed.pem: OK" in openssl("verify", "-CAfile", root_file, path)
        # A name in the CSR the role does not allow rejects the whole request.
        bad_csr, _ = make_csr("a.svc.internal", ["b.svc.internal", "evil.com"])
        assert "evil.com not allowed" in await fails(c, "pki/sign/svc", {"csr": bad_csr})
        rsa_csr, _ = make_csr("a.svc.internal", [], rsa.generate_private_key(65537, 2048))
        assert "role requires keys of type ec" in await fails(c, "pki/sign/svc", {"csr": rsa_csr})
        # sign-verbatim keeps the CSR's subject and names, and refuses CA requests.
        vcsr, _ = make_csr("anything.example", ["x.example", "y.example"], org="Acme")
        out = await ok(
            c,
            "POST",
            "pki/sign-verbatim",
            {"csr": vcsr, "ttl": "1h", "ext_key_usage": "ServerAuth"},
        )
        vcert = parse(out["data"]["certificate"])
        assert vcert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "Acme"
        vsan = vcert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert vsan.get_values_for_type(x509.DNSName) == ["x.example", "y.example"]
        ku = vcert.extensions.get_extension_for_class(x509.KeyUsage).value
        assert ku.digital_signature and ku.key_agreement and ku.key_encipherment
        ca_csr, _ = make_csr("sub ca", [], ca=True)
        assert "will not issue" in await fails(c, "pki/sign-verbatim", {"csr": ca_csr})
        # sign-verbatim/{role} caps a ttl at the role's max_ttl, with OpenBao's warning.
        capped = await ok(c, "POST", "pki/sign-verbatim/svc", {"csr": vcsr, "ttl": "100h"})
        assert "so maxTTL is being used" in capped["warnings"][0]


async def test_output_formats(nats_url: str, tmp_path: Path) -> None:
    async with pki_cluster(nats_url) as c:
        root = await ok(
            c,
            "POST",
            "pki/root/generate/exported",
            {
                "ttl": "8760h",
                "common_name": "Root",
                "key_type": "rsa",
                "private_key_format": "pkcs8",
            },
        )
        assert "BEGIN PRIVATE KEY" in root["data"]["private_key"]
        assert root["data"]["private_key_type"] == "rsa"
        await ok(c, "POST", "pki/roles/any", {"allow_any_name": True, "key_type": "ed25519"})
        der = (await ok(c, "POST", "pki/issue/any", {"common_name": "d.example", "format": "der"}))[
            "data"
        ]
        cert = x509.load_der_x509_certificate(base64.b64decode(der["certificate"]))
        assert cert.subject.rfc4514_string() == "CN=d.example"
        serialization.load_der_private_key(base64.b64decode(der["private_key"]), None)
        assert x509.load_der_x509_certificate(base64.b64decode(der["issuing_ca"]))
        bundle = (
            await ok(
                c,
                "POST",
                "pki/issue/any",
                {"common_name": "b.example", "format": "pem_bundle", "private_key_format": "pkcs8"},
            )
        )["data"]
        # The bundle keeps the key's own form; private_key follows private_key_format.
        assert bundle["certificate"].startswith("-----BEGIN PRIVATE KEY-----")
        assert bundle["certificate"].count("BEGIN CERTIFICATE") == 2
        assert bundle["private_key"].startswith("-----BEGIN PRIVATE KEY-----")
        status, body = await c.request(
            "POST", "/v1/pki/issue/any", json={"common_name": "x.example", "format": "p12"}
        )
        assert status == 400 and "unsupported format" in body["errors"][0]
        status, ca_der, kind = await raw_get(c, "pki/ca")
        assert status == 200 and kind == "application/pkix-cert"
        assert x509.load_der_x509_certificate(ca_der).subject.rfc4514_string() == "CN=Root"


async def test_revocation_and_crls(nats_url: str, tmp_path: Path) -> None:
    async with pki_cluster(nats_url) as c:
        root = await ok(
            c,
            "POST",
            "pki/root/generate/internal",
            {"ttl": "8760h", "common_name": "Root", "key_type": "ec", "issuer_name": "r1"},
        )
        issuer_id = root["data"]["issuer_id"]
        await ok(
            c,
            "POST",
            "pki/roles/web",
            {"allowed_domains": "example.com", "allow_subdomains": True, "key_type": "ec"},
        )
        await ok(
            c,
            "POST",
            "pki/roles/fleeting",
            {
                "allowed_domains": "example.com",
                "allow_subdomains": True,
                "key_type": "ec",
                "no_store": True,
            },
        )
        kept = (await ok(c, "POST", "pki/issue/web", {"common_name": "a.example.com"}))["data"]
        other = (await ok(c, "POST", "pki/issue/web", {"common_name": "b.example.com"}))["data"]
        unstored = (await ok(c, "POST", "pki/issue/fleeting", {"common_name": "c.example.com"}))[
            "data"
        ]
        listed = (await ok(c, "LIST", "pki/certs"))["data"]["keys"]
        assert unstored["serial_number"] not in listed and kept["serial_number"] in listed
        rev = await ok(c, "POST", "pki/revoke", {"serial_number": kept["serial_number"]})
        assert rev["data"]["state"] == "revoked" and rev["data"]["revocation_time"] > 0
        again = await ok(
            c, "POST", "pki/revoke", {"serial_number": kept["serial_number"].replace(":", "-")}
        )
        assert again["data"]["revocation_time"] == rev["data"]["revocation_time"]
        # Not stored, revoked by presenting the certificate itself.
        await ok(c, "POST", "pki/revoke", {"certificate": unstored["certificate"]})
        status, crl_pem = await c.request("GET", "/v1/pki/crl/pem", token="")
        assert status == 200
        root_file = pem_file(tmp_path, "root.pem", root["data"]["certificate"])
        crl_file = pem_file(tmp_path, "crl.pem", crl_pem)
        text = openssl("crl", "-in", crl_file, "-noout", "-text")
        for revoked in (kept, unstored):
            assert "Serial Number: " + revoked["serial_number"].replace(":", "").upper() in text
        assert other["serial_number"].replace(":", "").upper() not in text
        openssl("crl", "-in", crl_file, "-CAfile", root_file, "-noout")
        # The CRL is enforced by an independent verifier.
        leaf = pem_file(tmp_path, "kept.pem", kept["certificate"])
        assert "revoked" in openssl_fails(
            "verify", "-crl_check", "-CAfile", root_file, "-CRLfile", crl_file, leaf
        )
        good = pem_file(tmp_path, "other.pem", other["certificate"])
        assert "OK" in openssl(
            "verify", "-crl_check", "-CAfile", root_file, "-CRLfile", crl_file, good
        )
        status, crl_der, kind = await raw_get(c, "pki/crl")
        assert status == 200 and kind == "application/pkix-crl"
        assert "Serial Number: " + kept["serial_number"].replace(":", "").upper() in openssl(
            "crl", "-inform", "DER", "-noout", "-text", stdin=crl_der
        )
        for path in (f"pki/issuer/{issuer_id}/crl", "pki/issuer/r1/crl", "pki/cert/crl"):
            out = await ok(c, "GET", path, token="")
            assert "BEGIN X509 CRL" in (out["data"].get("crl") or out["data"]["certificate"])
        read = await ok(c, "GET", f"pki/cert/{kept['serial_number']}", token="")
        assert read["data"]["revocation_time"] == rev["data"]["revocation_time"]
        revoked_list = (await ok(c, "LIST", "pki/certs/revoked"))["data"]["keys"]
        assert sorted(revoked_list) == sorted([kept["serial_number"], unstored["serial_number"]])
        rotated = await ok(c, "GET", "pki/crl/rotate")
        assert rotated["data"] == {"success": True}
        status, crl_pem2 = await c.request("GET", "/v1/pki/crl/pem", token="")
        text2 = openssl("crl", "-in", pem_file(tmp_path, "crl2.pem", crl_pem2), "-noout", "-text")
        assert kept["serial_number"].replace(":", "").upper() in text2
        number = re.findall(r"CRL Number:\s*\n\s*(\d+)", text)
        number2 = re.findall(r"CRL Number:\s*\n\s*(\d+)", text2)
        assert int(number2[0]) > int(number[0])
        assert "not found" in await fails(c, "pki/revoke", {"serial_number": "01:02:03"})
        assert "its own CRL" in await fails(
            c, "pki/revoke", {"serial_number": root["data"]["serial_number"]}
        )
        foreign = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "elsewhere")]))
            .public_key(ec.generate_private_key(ec.SECP256R1()).public_key())
            .serial_number(5)
            .not_valid_before(dt.datetime.now(dt.UTC))
            .not_valid_after(dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("x")]), True)
            .sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256())
        )
        assert "not issued by any issuer" in await fails(
            c,
            "pki/revoke",
            {"certificate": foreign.public_bytes(serialization.Encoding.PEM).decode()},
        )


async def test_bad_input_is_a_4xx_naming_the_problem(nats_url: str) -> None:
    async with pki_cluster(nats_url) as c:
        assert "no default issuer" in await fails(
            c, "pki/root/sign-intermediate", {"csr": make_csr("x", [])[0]}
        )
        await ok(
            c,
            "POST",
            "pki/root/generate/internal",
            {"ttl": "8760h", "common_name": "Root", "key_type": "ec"},
        )
        await ok(
            c,
            "POST",
            "pki/roles/web",
            {
                "allowed_domains": "example.com",
                "allow_subdomains": True,
                "max_ttl": "1h",
                "key_type": "ec",
                "allow_ip_sans": False,
            },
        )
        assert "unknown role: nope" in await fails(
            c, "pki/issue/nope", {"common_name": "a.example.com"}
        )
        assert "common name www.evil.com not allowed" in await fails(
            c, "pki/issue/web", {"common_name": "www.evil.com"}
        )
        assert "evil.org not allowed" in await fails(
            c,
            "pki/issue/web",
            {"common_name": "a.example.com", "alt_names": "b.example.com,evil.org"},
        )
        capped = await ok(c, "POST", "pki/issue/web", {"common_name": "a.example.com", "ttl": "2h"})
        assert capped["warnings"] == [
            'TTL "2h0m0s" is longer than permitted maxTTL "1h0m0s", so maxTTL is being used'
        ]
        assert capped["data"]["expiration"] - time.time() <= 3600
        assert "IP Subject Alternative Names are not allowed" in await fails(
            c, "pki/issue/web", {"common_name": "a.example.com", "ip_sans": "10.0.0.1"}
        )
        assert "malformed CSR" in await fails(c, "pki/sign/web", {"csr": "not a csr"})
        assert "malformed CSR" in await fails(
            c,
            "pki/sign/web",
            {
                "csr": "-----BEGIN CERTIFICATE REQUEST-----\nMIIBIjAN\n"
                "-----END CERTIFICATE REQUEST-----"
            },
        )
        assert "missing required field 'csr'" in await fails(c, "pki/sign/web", {})
        assert "unsupported bit length for RSA key: 1024" in await fails(
            c, "pki/roles/weak", {"key_type": "rsa", "key_bits": 1024}
        )
        assert "unknown key_type 'dsa'" in await fails(c, "pki/roles/dsa", {"key_type": "dsa"})
        assert "unsupported bit length for EC key: 333" in await fails(
            c,
            "pki/root/generate/internal",
            {"ttl": "8760h", "common_name": "x", "key_type": "ec", "key_bits": 333},
        )
        assert "unsupported key_type" in await fails(
            c, "pki/keys/generate/internal", {"key_type": "dsa"}
        )
        await ok(c, "POST", "pki/roles/anykey", {"allow_any_name": True, "key_type": "any"})
        assert 'role key type "any"' in await fails(
            c, "pki/issue/anykey", {"common_name": "a.example.com"}
        )
        assert "unsupported bit length for EC key: 100" in await fails(
            c,
            "pki/issue/anykey",
            {"common_name": "a.example.com", "key_type": "ec", "key_bits": 100},
        )
        assert "common_name field is required" in await fails(c, "pki/issue/web", {})
        assert "unable to find PKI issuer for reference: ghost" in await fails(
            c, "pki/issuer/ghost/issue/web", {"common_name": "a.example.com"}
        )
        assert "unable to find PKI issuer" in await fails(
            c, "pki/roles/ghostly", {"issuer_ref": "ghost"}
        )
        assert "invalid type" in await fails(
            c, "pki/root/generate/sideways", {"ttl": "8760h", "common_name": "x"}
        )
        assert "cannot parse not_after" in await fails(
            c, "pki/issue/web", {"common_name": "a.example.com", "not_after": "soon"}
        )
        assert "beyond the expiration of the CA" in await fails(
            c,
            "pki/issue/web",
            {"common_name": "a.example.com", "not_after": "9999-12-31T23:59:59Z"},
        )


async def test_issuers_keys_and_defaults(nats_url: str, tmp_path: Path) -> None:
    async with pki_cluster(nats_url) as c:
        first = (
            await ok(
                c,
                "POST",
                "pki/root/generate/internal",
                {
                    "ttl": "8760h",
                    "common_name": "Root A",
                    "key_type": "ec",
                    "issuer_name": "a",
                    "key_name": "key-a",
                },
            )
        )["data"]
        second = (
            await ok(
                c,
                "POST",
                "pki/root/rotate/internal",
                {"ttl": "8760h", "common_name": "Root B", "key_type": "ec"},
            )
        )["data"]
        assert second["issuer_name"] == "next"
        listed = await ok(c, "LIST", "pki/issuers", token="")
        assert set(listed["data"]["keys"]) == {first["issuer_id"], second["issuer_id"]}
        assert listed["data"]["key_info"][first["issuer_id"]]["is_default"] is True
        cfg = await ok(c, "GET", "pki/config/issuers")
        assert cfg["data"]["default"] == first["issuer_id"]
        by_name = await ok(c, "GET", "pki/issuer/a")
        assert by_name["data"]["issuer_id"] == first["issuer_id"]
        assert by_name["data"]["key_id"] == first["key_id"]
        assert by_name["data"]["usage"] == "read-only,issuing-certificates,crl-signing,ocsp-signing"
        await ok(c, "POST", "pki/root/replace", {})  # default -> "next"
        assert (await ok(c, "GET", "pki/issuer/default"))["data"]["issuer_id"] == second[
            "issuer_id"
        ]
        await ok(c, "POST", "pki/config/issuers", {"default": "a"})
        patched = await ok(
            c,
            "PATCH",
            "pki/issuer/next",
            {"issuer_name": "b", "leaf_not_after_behavior": "truncate"},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert patched["data"]["issuer_name"] == "b"
        assert patched["data"]["leaf_not_after_behavior"] == "truncate"
        await ok(c, "POST", "pki/roles/any", {"allow_any_name": True, "key_type": "ec"})
        # The issuer is chosen by the path, overriding the role's.
        via_b = (
            await ok(c, "POST", "pki/issuer/b/issue/any", {"common_name": "x.test", "ttl": "1h"})
        )["data"]
        assert parse(via_b["certificate"]).issuer == parse(second["certificate"]).subject
        via_role = (await ok(c, "POST", "pki/issue/any", {"common_name": "y.test"}))["data"]
        assert parse(via_role["certificate"]).issuer == parse(first["certificate"]).subject
        # "truncate" caps a leaf at the issuer's end instead of refusing.
        long = (
            await ok(
                c,
                "POST",
                "pki/issuer/b/issue/any",
                {"common_name": "z.test", "not_after": "9999-12-31T23:59:59Z"},
            )
        )["data"]
        assert long["expiration"] == second["expiration"]
        keys = await ok(c, "LIST", "pki/keys")
        assert len(keys["data"]["keys"]) == 2
        key = await ok(c, "GET", "pki/key/key-a")
        skid = key["data"].pop("subject_key_id")  # as Vault: the key id its certificates carry
        assert key["data"] == {"key_id": first["key_id"], "key_name": "key-a", "key_type": "ec"}
        assert re.fullmatch(r"([0-9a-f]{2}:){19}[0-9a-f]{2}", skid)
        status, body = await c.request("DELETE", "/v1/pki/key/key-a")
        assert status == 400 and "still used by issuers" in body["errors"][0]
        # An external CA (made here with cryptography) imported with its key can issue.
        ext_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "External CA")])
        now = dt.datetime.now(dt.UTC)
        ext = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(ext_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(ext_key, hashes.SHA256())
        )
        ext_pem = ext.public_bytes(serialization.Encoding.PEM).decode()
        key_pem = ext_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode()
        imported = (
            await ok(c, "POST", "pki/issuers/import/bundle", {"pem_bundle": key_pem + ext_pem})
        )["data"]
        assert len(imported["imported_issuers"]) == 1 and len(imported["imported_keys"]) == 1
        ext_id = imported["imported_issuers"][0]
        assert imported["mapping"][ext_id] == imported["imported_keys"][0]
        again = (await ok(c, "POST", "pki/config/ca", {"pem_bundle": ext_pem + key_pem}))["data"]
        assert again["imported_issuers"] is None and again["existing_issuers"] == [ext_id]
        out = (
            await ok(
                c, "POST", f"pki/issuer/{ext_id}/issue/any", {"common_name": "e.test", "ttl": "1h"}
            )
        )["data"]
        leaf = pem_file(tmp_path, "e.pem", out["certificate"])
        assert "OK" in openssl("verify", "-CAfile", pem_file(tmp_path, "ext.pem", ext_pem), leaf)
        assert "non-CA certificate" in await fails(
            c, "pki/issuers/import/cert", {"pem_bundle": out["certificate"]}
        )
        assert "private keys cannot be imported" in await fails(
            c, "pki/issuers/import/cert", {"pem_bundle": key_pem}
        )
        # Deleting the default issuer clears the default with a warning.
        await ok(c, "POST", "pki/config/issuers", {"default": ext_id})
        status, body = await c.request("DELETE", f"/v1/pki/issuer/{ext_id}")
        assert status == 200 and "default issuer" in body["warnings"][0]
        assert "no default issuer" in await fails(c, "pki/issue/any", {"common_name": "q.test"})


async def test_sign_self_issued_needs_sudo_on_root_path(nats_url: str) -> None:
    async with pki_cluster(nats_url) as c:
        await ok(
            c,
            "POST",
            "pki/root/generate/internal",
            {"ttl": "8760h", "common_name": "Root", "key_type": "ec", "issuer_name": "main"},
        )
        other = (
            await ok(
                c,
                "POST",
                "pki/root/generate/internal",
                {
                    "ttl": "8760h",
                    "common_name": "Other Root",
                    "key_type": "ec",
                    "issuer_name": "other",
                },
            )
        )["data"]
        await ok(
            c,
            "PUT",
            "sys/policies/acl/signer",
            {
                "policy": """
            path "pki/root/sign-self-issued" { capabilities = ["update"] }
            path "pki/issuer/+/sign-self-issued" { capabilities = ["update"] }
        """
            },
        )
        await ok(
            c,
            "PUT",
            "sys/policies/acl/sudoer",
            {
                "policy": """
            path "pki/root/sign-self-issued" { capabilities = ["update", "sudo"] }
        """
            },
        )
        plain = (await ok(c, "POST", "auth/token/create", {"policies": ["signer"]}))["auth"][
            "client_token"
        ]
        sudo = (await ok(c, "POST", "auth/token/create", {"policies": ["sudoer"]}))["auth"][
            "client_token"
        ]
        body = {"certificate": other["certificate"]}
        status, _ = await c.request("POST", "/v1/pki/root/sign-self-issued", json=body, token=plain)
        assert status == 403
        status, out = await c.request(
            "POST", "/v1/pki/issuer/main/sign-self-issued", json=body, token=plain
        )
        assert status == 200, out
        status, out = await c.request(
            "POST", "/v1/pki/root/sign-self-issued", json=body, token=sudo
        )
        assert status == 200, out
        cross = parse(out["data"]["certificate"])
        assert cross.subject == parse(other["certificate"]).subject
        assert cross.issuer == parse(out["data"]["issuing_ca"]).subject
        cross.verify_directly_issued_by(parse(out["data"]["issuing_ca"]))


async def test_roles_crud_and_read_shape(nats_url: str) -> None:
    async with pki_cluster(nats_url) as c:
        await ok(
            c,
            "POST",
            "pki/roles/web",
            {
                "allowed_domains": "example.com,example.org",
                "ttl": "6h",
                "max_ttl": "12h",
                "allowed_other_sans": "1.3.6.1.4.1.311.20.2.3;UTF8:*",
            },
        )
        data = (await ok(c, "GET", "pki/roles/web"))["data"]
        assert data["allowed_domains"] == ["example.com", "example.org"]
        assert (data["ttl"], data["max_ttl"]) == ("6h", "12h")
        assert (data["key_type"], data["key_bits"], data["issuer_ref"]) == ("rsa", 2048, "default")
        assert data["allow_ip_sans"] is True and data["allow_localhost"] is True
        assert data["server_flag"] is True and data["code_signing_flag"] is False
        assert data["allowed_other_sans"] == ["1.3.6.1.4.1.311.20.2.3;UTF8:*"]
        assert data["not_before_duration"] == 30 and data["no_store"] is False
        await ok(
            c,
            "PATCH",
            "pki/roles/web",
            {"key_type": "ec"},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        data = (await ok(c, "GET", "pki/roles/web"))["data"]
        assert (data["key_type"], data["key_bits"], data["ttl"]) == ("ec", 256, "6h")
        await ok(c, "POST", "pki/roles/web", {"allowed_domains": "x.com"})
        assert (await ok(c, "GET", "pki/roles/web"))["data"]["ttl"] == "0s"  # POST replaces
        await ok(c, "DELETE", "pki/roles/web")
        status, _ = await c.request("GET", "/v1/pki/roles/web")
        assert status == 404
        status, _ = await c.request("LIST", "/v1/pki/roles")
        assert status == 404


async def test_leases_no_store_and_tidy(nats_url: str) -> None:
    async with pki_cluster(nats_url) as c:
        await ok(
            c,
            "POST",
            "pki/root/generate/internal",
            {"ttl": "8760h", "common_name": "Root", "key_type": "ec"},
        )
        await ok(
            c,
            "POST",
            "pki/roles/leased",
            {"allow_any_name": True, "key_type": "ec", "generate_lease": True},
        )
        out = await ok(c, "POST", "pki/issue/leased", {"common_name": "l.test", "ttl": "1h"})
        assert out["lease_id"].startswith("pki/issue/leased/")
        assert 3500 < out["lease_duration"] <= 3600 and out["renewable"] is False
        await ok(c, "PUT", "sys/leases/revoke", {"lease_id": out["lease_id"]})
        read = await ok(c, "GET", f"pki/cert/{out['data']['serial_number']}", token="")
        assert read["data"]["revocation_time"] > 0  # the lease's end revoked the certificate
        await ok(c, "POST", "pki/roles/brief", {"allow_any_name": True, "key_type": "ec"})
        brief = (await ok(c, "POST", "pki/issue/brief", {"common_name": "b.test", "ttl": "1s"}))[
            "data"
        ]
        lasting = (await ok(c, "POST", "pki/issue/brief", {"common_name": "c.test"}))["data"]
        await asyncio.sleep(2.2)
        # As OpenBao: a tidy with its defaults (nothing enabled) is accepted and says so.
        status, body = await c.request("POST", "/v1/pki/tidy")
        assert status == 202 and "no tidy operations were set" in body["warnings"][0]
        status, body = await c.request(
            "POST",
            "/v1/pki/tidy",
            json={"tidy_cert_store": True, "tidy_revoked_certs": True, "safety_buffer": "1s"},
        )
        assert status == 202 and "Tidy operation successfully started" in body["warnings"][0]
        for _ in range(100):
            st = (await ok(c, "GET", "pki/tidy-status"))["data"]
            if st["state"] != "Running":
                break
            await asyncio.sleep(0.05)
        assert st["state"] == "Finished", st
        assert st["cert_store_deleted_count"] >= 1
        listed = (await ok(c, "LIST", "pki/certs"))["data"]["keys"]
        assert brief["serial_number"] not in listed and lasting["serial_number"] in listed


async def add_pki_replica(c: Cluster, limit: float = 10.0) -> None:
    """Start a second secrets replica and wait until its peer unsealed it and it serves pki/."""
    await c.add_secrets_replica()
    deadline = time.monotonic() + limit
    while not all(
        s.core is not None and not s.core.barrier.sealed and "pki/" in s.core.table(ROOT).backends
        for s in c.secrets
    ):
        assert time.monotonic() < deadline, "the new replica never served pki/"
        await asyncio.sleep(0.05)


async def test_role_changes_reach_every_replica(nats_url: str) -> None:
    """Each replica caches roles and issuers; a change made through one is seen by the next
    request on any of them (requests spread over both replicas by the queue group)."""
    async with pki_cluster(nats_url) as c:
        await add_pki_replica(c)
        await ok(
            c,
            "POST",
            "pki/root/generate/internal",
            {"ttl": "8760h", "common_name": "Root", "key_type": "ec"},
        )
        await ok(
            c, "POST", "pki/roles/web", {"allow_any_name": True, "key_type": "ec", "max_ttl": "1h"}
        )
        body = {"common_name": "a.example.com", "ttl": "2h"}
        # Over the role's max_ttl the ttl is capped with a warning (as OpenBao), so the warning
        # tells which version of the role each replica answered with.
        for _ in range(8):
            status, out = await c.request("POST", "/v1/pki/issue/web", json=body)
            assert status == 200 and out["warnings"], out
        await ok(
            c, "POST", "pki/roles/web", {"allow_any_name": True, "key_type": "ec", "max_ttl": "3h"}
        )
        for _ in range(8):
            status, out = await c.request("POST", "/v1/pki/issue/web", json=body)
            assert status == 200 and not out["warnings"], out
        await ok(c, "DELETE", "pki/roles/web")
        for _ in range(8):
            status, _ = await c.request("POST", "/v1/pki/issue/web", json=body)
            assert status == 400


async def test_issuer_changes_reach_every_replica(nats_url: str) -> None:
    """The cached issuers, issuer config and URLs: a new default issuer, an issuer's own AIA URLs
    and its removal, each made through one replica, decide the next leaf on every replica."""
    async with pki_cluster(nats_url) as c:
        await add_pki_replica(c)
        roots = [
            (
                await ok(
                    c,
                    "POST",
                    "pki/root/generate/internal",
                    {"ttl": "8760h", "common_name": cn, "key_type": "ec", "issuer_name": cn},
                )
            )["data"]
            for cn in ("first", "second")
        ]
        await ok(c, "POST", "pki/roles/web", {"allow_any_name": True, "key_type": "ec"})

        async def leaves() -> list[x509.Certificate]:
            got = []
            for i in range(8):  # spread over both replicas by the queue group
                body = {"common_name": f"h{i}.example.com", "ttl": "1h"}
                out = await ok(c, "POST", "pki/issue/web", body)
                got.append(x509.load_pem_x509_certificate(out["data"]["certificate"].encode()))
            return got

        def issuer_cn(cert: x509.Certificate) -> str:
            return str(cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)

        assert {issuer_cn(leaf) for leaf in await leaves()} == {"first"}
        await ok(c, "POST", "pki/config/issuers", {"default": roots[1]["issuer_id"]})
        assert {issuer_cn(leaf) for leaf in await leaves()} == {"second"}

        url = "http://ca.example.com/second.der"
        await ok(
            c,
            "PATCH",
            "pki/issuer/second",
            {"issuing_certificates": [url]},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        for leaf in await leaves():
            aia = leaf.extensions.get_extension_for_class(x509.AuthorityInformationAccess)
            assert [a.access_location.value for a in aia.value] == [url]

        await ok(c, "POST", "pki/config/issuers", {"default": roots[0]["issuer_id"]})
        await ok(c, "DELETE", "pki/issuer/second")
        assert {issuer_cn(leaf) for leaf in await leaves()} == {"first"}
        for _ in range(4):
            await fails(c, "pki/issuer/second/issue/web", {"common_name": "x.example.com"})


async def test_keys_existing_key_roots_and_exported_intermediates(
    nats_url: str, tmp_path: Path
) -> None:
    async with pki_cluster(nats_url) as c:
        gen = (
            await ok(
                c,
                "POST",
                "pki/keys/generate/exported",
                {"key_type": "ec", "key_bits": 384, "key_name": "k1"},
            )
        )["data"]
        assert "EC PRIVATE KEY" in gen["private_key"] and gen["key_type"] == "ec"
        root = (
            await ok(
                c,
                "POST",
                "pki/root/generate/existing",
                {"ttl": "8760h", "common_name": "Reused Key Root", "key_ref": "k1"},
            )
        )["data"]
        assert root["key_id"] == gen["key_id"]
        pub = serialization.load_pem_private_key(gen["private_key"].encode(), None).public_key()
        assert parse(root["certificate"]).public_key() == pub
        assert "private_key" not in root  # existing/internal never return the key
        imported_key = ec.generate_private_key(ec.SECP256R1())
        key_pem = imported_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        imp = (
            await ok(c, "POST", "pki/keys/import", {"pem_bundle": key_pem, "key_name": "imported"})
        )["data"]
        assert imp["key_name"] == "imported" and imp["key_type"] == "ec"
        assert (await ok(c, "GET", "pki/config/keys"))["data"]["default"] == gen["key_id"]
        await ok(c, "POST", "pki/config/keys", {"default": "imported"})
        await ok(c, "POST", "pki/key/imported", {"key_name": "renamed"})
        assert (await ok(c, "GET", "pki/key/default"))["data"]["key_name"] == "renamed"
        inter = (
            await ok(
                c,
                "POST",
                "pki/intermediate/generate/exported",
                {
                    "common_name": "Exported Int",
                    "key_type": "ed25519",
                    "format": "pem_bundle",
                    "ou": "Ops",
                    "organization": "Acme",
                },
            )
        )["data"]
        assert inter["csr"].startswith("-----BEGIN PRIVATE KEY-----")
        csr = x509.load_pem_x509_csr(
            inter["csr"].split("-----END PRIVATE KEY-----")[1].strip().encode()
        )
        assert csr.subject.rfc4514_string() == "CN=Exported Int,OU=Ops,O=Acme"
        signed = (
            await ok(
                c,
                "POST",
                "pki/root/sign-intermediate",
                {
                    "csr": csr.public_bytes(serialization.Encoding.PEM).decode(),
                    "use_csr_values": True,
                    "ttl": "24h",
                    "max_path_length": 3,
                },
            )
        )["data"]
        cert = parse(signed["certificate"])
        assert cert.subject == csr.subject
        bc = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        assert bc.ca and bc.path_length == 3
        root_file = pem_file(tmp_path, "root.pem", root["certificate"])
        assert "OK" in openssl(
            "verify", "-CAfile", root_file, pem_file(tmp_path, "int.pem", signed["certificate"])
        )
