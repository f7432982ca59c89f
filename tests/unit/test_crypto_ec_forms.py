"""A new EC key's SEC1 PEM and SPKI taken from one serialisation are `cryptography`'s own, on
every curve the engine issues (P-521's long-form lengths included), and an EC leaf carries them."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from services.crypto.ec_forms import sec1_and_spki
from services.crypto.ops import run_local
from services.crypto.ops_keys import CURVES, private_pem


@pytest.mark.parametrize("bits", sorted(CURVES))
def test_the_library_encodings(bits: int) -> None:
    for _ in range(8):  # keys whose encodings differ in length (leading zero bytes)
        key = ec.generate_private_key(CURVES[bits]())
        sec1, spki = sec1_and_spki(key)
        assert sec1 == private_pem(key, "traditional")
        assert spki == key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def test_an_ec_leaf_carries_them() -> None:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    root = run_local(
        "x509_sign",
        {
            "private_key": private_pem(ca_key),
            "cert": {
                "subject": {"common_name": "r"},
                "is_ca": True,
                "not_before": 0,
                "not_after": 2_000_000_000,
            },
        },
    )
    signer = {"certificate": root["certificate"], "private_key": private_pem(ca_key)}
    for forms in (["traditional"], ["pkcs8"], ["traditional", "pkcs8"]):
        out = run_local(
            "x509_issue",
            {
                "key_type": "ec",
                "key_bits": 384,
                "cert": {
                    "subject": {"common_name": "h.example.com"},
                    "not_before": 0,
                    "not_after": 1_900_000_000,
                },
                "signer": signer,
                "key_forms": forms,
            },
        )
        leaf = x509.load_pem_x509_certificate(out["certificate"].encode())
        leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(root["certificate"].encode()))
        pem = out["private_key"] if "traditional" in forms else out["private_key_pkcs8"]
        key = serialization.load_pem_private_key(pem.encode(), None)
        assert key.public_key() == leaf.public_key()
        assert out["private_key_type"] == "ec" and out["key_bits"] == 384
