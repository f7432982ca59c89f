"""A leaf's signer and role fields reach the crypto workers by digest (services/crypto/
shared_args.py): a worker that lost them (a restart) is sent them once, and while the default
issuer changes under load every leaf is still signed by the issuer its response names."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from services.crypto.service import CryptoService
from tests.integration.test_pki_api import ok, pki_cluster

pytestmark = pytest.mark.nats


def check_leaf(data: dict[str, Any], cn: str) -> x509.Certificate:
    """The leaf is signed by the response's issuing CA, which heads its chain, and matches the
    response's key; returns that CA."""
    leaf = x509.load_pem_x509_certificate(data["certificate"].encode())
    ca = x509.load_pem_x509_certificate(data["issuing_ca"].encode())
    leaf.verify_directly_issued_by(ca)
    assert data["ca_chain"][0] == data["issuing_ca"]
    assert leaf.subject.rfc4514_string() == f"CN={cn}"
    key = serialization.load_pem_private_key(data["private_key"].encode(), None)
    assert key.public_key() == leaf.public_key()
    return ca


def spy_on(worker: CryptoService) -> list[bool]:
    """Whether each call this worker resolved carried the shared bytes."""
    calls: list[bool] = []
    resolve = worker.shared.resolve

    def spy(ref: str, raw: bytes, args: dict[str, Any]) -> dict[str, Any]:
        calls.append(bool(raw))
        return resolve(ref, raw, args)

    worker.shared.resolve = spy  # type: ignore[method-assign]
    return calls


async def test_a_worker_that_lost_them_is_sent_them_once(nats_url: str) -> None:
    async with pki_cluster(nats_url) as c:
        worker = c.extra[0]
        assert isinstance(worker, CryptoService)
        await ok(
            c,
            "POST",
            "pki/root/generate/internal",
            {"common_name": "r1", "key_type": "ec", "ttl": "87600h"},
        )
        await ok(c, "POST", "pki/roles/web", {"allow_any_name": True, "key_type": "ec"})
        calls = spy_on(worker)
        for i in range(3):
            out = await ok(c, "POST", "pki/issue/web", {"common_name": f"a{i}.example.com"})
            check_leaf(out["data"], f"a{i}.example.com")
        assert calls == [False, True, False, False]  # named, refused, sent; then named only
        assert len(worker.shared.entries) == 1

        worker.shared.entries.clear()  # what a restarted worker holds
        calls.clear()
        out = await ok(c, "POST", "pki/issue/web", {"common_name": "b.example.com"})
        check_leaf(out["data"], "b.example.com")
        csr_key = serialization.load_pem_private_key(out["data"]["private_key"].encode(), None)
        csr = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(x509.Name.from_rfc4514_string("CN=c.example.com"))
            .sign(csr_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        signed = await ok(
            c,
            "POST",
            "pki/sign/web",
            {
                "csr": csr.public_bytes(serialization.Encoding.PEM).decode(),
                "common_name": "c.example.com",
            },
        )
        leaf = x509.load_pem_x509_certificate(signed["data"]["certificate"].encode())
        leaf.verify_directly_issued_by(
            x509.load_pem_x509_certificate(signed["data"]["issuing_ca"].encode())
        )
        assert calls == [False, True, False]  # the sign path names the same arguments

        # A change to what every leaf of the role carries is a new name: sent once more.
        role = {"allow_any_name": True, "key_type": "ec", "key_usage": ["DigitalSignature"]}
        await ok(c, "POST", "pki/roles/web", role)
        calls.clear()
        out = await ok(c, "POST", "pki/issue/web", {"common_name": "d.example.com"})
        check_leaf(out["data"], "d.example.com")
        leaf = x509.load_pem_x509_certificate(out["data"]["certificate"].encode())
        usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
        assert usage.digital_signature and not usage.key_agreement
        assert calls == [False, True]
        assert len(worker.shared.entries) == 2


async def test_each_leaf_signed_by_the_issuer_its_response_names(nats_url: str) -> None:
    async with pki_cluster(nats_url, workers=2) as c:
        roots = [
            (
                await ok(
                    c,
                    "POST",
                    "pki/root/generate/internal",
                    {
                        "common_name": f"rot{n}",
                        "key_type": "ec",
                        "issuer_name": f"rot{n}",
                        "ttl": "87600h",
                    },
                )
            )["data"]
            for n in range(3)
        ]
        await ok(c, "POST", "pki/roles/web", {"allow_any_name": True, "key_type": "ec"})
        seen: list[str] = []
        stop = asyncio.Event()
        progressed = asyncio.Condition()

        async def issue(lane: int) -> None:
            i = 0
            while not stop.is_set():
                cn = f"l{lane}-{i}.example.com"
                out = await ok(c, "POST", "pki/issue/web", {"common_name": cn, "ttl": "1h"})
                ca = check_leaf(out["data"], cn)
                async with progressed:
                    seen.append(ca.subject.rfc4514_string())
                    progressed.notify_all()
                i += 1

        lanes = [asyncio.create_task(issue(n)) for n in range(6)]
        try:
            for turn in range(9):
                root = roots[turn % 3]
                await ok(c, "POST", "pki/config/issuers", {"default": root["issuer_id"]})
                count = len(seen)
                async with asyncio.timeout(30), progressed:  # a few leaves under each default
                    await progressed.wait_for(lambda n=count: len(seen) >= n + 4)
        finally:
            stop.set()
            await asyncio.gather(*lanes)
        assert set(seen) == {f"CN=rot{n}" for n in range(3)}
