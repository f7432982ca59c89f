"""A new user's PKI session with hvac, unmodified: mount, generate a root, define a role, issue,
sign, revoke, fetch the CRL; openssl verifies the chain and sees the revocation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import hvac
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.harness import start_cluster
from tests.integration.test_pki_api import add_worker, openssl, openssl_fails, pem_file

pytestmark = pytest.mark.nats


async def test_hvac_pki_flow(nats_url: str, tmp_path: Path) -> None:
    c = await start_cluster(nats_url)
    try:
        await add_worker(c)
        client = hvac.Client(url=c.secrets_url, token=c.root_token)

        def call(fn, *args, **kw):  # type: ignore[no-untyped-def]
            # hvac is synchronous and the services run in this loop: call it from a thread.
            return asyncio.to_thread(fn, *args, **kw)

        await call(
            client.sys.enable_secrets_engine, "pki", path="pki", config={"max_lease_ttl": "8760h"}
        )
        root = await call(
            client.secrets.pki.generate_root,
            "internal",
            "Hvac Root",
            extra_params={"ttl": "8760h", "key_type": "ec"},
        )
        root_pem = root["data"]["certificate"]
        await call(
            client.secrets.pki.create_or_update_role,
            "web",
            {
                "allowed_domains": ["example.com"],
                "allow_subdomains": True,
                "max_ttl": "72h",
                "key_type": "ec",
            },
        )
        role = await call(client.secrets.pki.read_role, "web")
        assert role["data"]["max_ttl"] == "72h" and role["data"]["key_type"] == "ec"
        issued = await call(
            client.secrets.pki.generate_certificate,
            "web",
            "app.example.com",
            extra_params={"ttl": "1h", "alt_names": "www.example.com"},
        )
        cert = issued["data"]["certificate"]
        root_file = pem_file(tmp_path, "root.pem", root_pem)
        leaf_file = pem_file(tmp_path, "leaf.pem", cert)
        assert "leaf.pem: OK" in openssl("verify", "-CAfile", root_file, leaf_file)
        assert "DNS:www.example.com" in openssl("x509", "-in", leaf_file, "-noout", "-text")

        key = ec.generate_private_key(ec.SECP256R1())
        csr = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.example.com")]))
            .sign(key, hashes.SHA256())
            .public_bytes(serialization.Encoding.PEM)
            .decode()
        )
        signed = await call(client.secrets.pki.sign_certificate, "web", csr, "api.example.com")
        signed_cert = x509.load_pem_x509_certificate(signed["data"]["certificate"].encode())
        assert signed_cert.public_key() == key.public_key()

        with pytest.raises(hvac.exceptions.InvalidRequest, match="not allowed by this role"):
            await call(client.secrets.pki.generate_certificate, "web", "evil.org")

        await call(client.secrets.pki.revoke_certificate, issued["data"]["serial_number"])
        crl = await call(client.secrets.pki.read_crl)
        crl_file = pem_file(tmp_path, "crl.pem", crl)
        text = openssl("crl", "-in", crl_file, "-noout", "-text")
        assert issued["data"]["serial_number"].replace(":", "").upper() in text
        assert "revoked" in openssl_fails(
            "verify", "-crl_check", "-CAfile", root_file, "-CRLfile", crl_file, leaf_file
        )
        chain = await call(client.secrets.pki.read_ca_certificate_chain)
        assert chain.strip() == root_pem.strip()
        listed = await call(client.secrets.pki.list_certificates)
        assert issued["data"]["serial_number"] in listed["data"]["keys"]
    finally:
        await c.close()
