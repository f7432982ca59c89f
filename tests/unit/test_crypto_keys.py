"""Key ops: every supported type and size, the private key formats, parsing, and refusals that
name the problem."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from services.crypto.ops import CryptoFailure, run_local


@pytest.mark.parametrize(
    ("key_type", "bits", "cls", "size"),
    [
        ("rsa", 0, rsa.RSAPrivateKey, 2048),
        ("rsa", 3072, rsa.RSAPrivateKey, 3072),
        ("ec", 0, ec.EllipticCurvePrivateKey, 256),
        ("ec", 384, ec.EllipticCurvePrivateKey, 384),
        ("ec", 521, ec.EllipticCurvePrivateKey, 521),
        ("ecdsa", 224, ec.EllipticCurvePrivateKey, 224),
        ("ed25519", 0, ed25519.Ed25519PrivateKey, 256),
    ],
)
def test_generate_key_types_and_sizes(key_type: str, bits: int, cls: type, size: int) -> None:
    out = run_local("generate_key", {"key_type": key_type, "key_bits": bits})
    key = serialization.load_pem_private_key(out["private_key"].encode(), None)
    assert isinstance(key, cls)
    assert out["key_bits"] == size
    assert out["key_type"] == ("ec" if key_type == "ecdsa" else key_type)
    assert "BEGIN PRIVATE KEY" in out["private_key"]  # PKCS#8 by default
    pub = serialization.load_pem_public_key(out["public_key"].encode())
    if size == 224:  # OpenSSH has no P-224
        assert out["public_key_openssh"] == ""
        return
    assert serialization.load_ssh_public_key(out["public_key_openssh"].encode()).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == pub.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert len(out["fingerprint"]) == 64


def test_generate_rsa_4096() -> None:
    out = run_local("generate_key", {"key_type": "rsa", "key_bits": 4096})
    assert out["key_bits"] == 4096


@pytest.mark.parametrize(
    ("key_type", "fmt", "marker"),
    [
        ("rsa", "traditional", "BEGIN RSA PRIVATE KEY"),
        ("rsa", "pkcs1", "BEGIN RSA PRIVATE KEY"),
        ("ec", "sec1", "BEGIN EC PRIVATE KEY"),
        ("ec", "pkcs8", "BEGIN PRIVATE KEY"),
        ("ed25519", "traditional", "BEGIN PRIVATE KEY"),  # Ed25519 has only PKCS#8
        ("ed25519", "openssh", "BEGIN OPENSSH PRIVATE KEY"),
    ],
)
def test_private_key_formats(key_type: str, fmt: str, marker: str) -> None:
    out = run_local("generate_key", {"key_type": key_type, "private_format": fmt})
    assert marker in out["private_key"]
    assert "BEGIN PRIVATE KEY" in out["private_key_pkcs8"]
    again = run_local("parse_private_key", {"private_key": out["private_key"]})
    assert again["fingerprint"] == out["fingerprint"]


def test_rsa_1024_only_when_asked_for() -> None:
    with pytest.raises(CryptoFailure, match="unsupported RSA key size 1024"):
        run_local("generate_key", {"key_type": "rsa", "key_bits": 1024})
    out = run_local("generate_key", {"key_type": "rsa", "key_bits": 1024, "min_rsa_bits": 1024})
    assert out["key_bits"] == 1024


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"key_type": "dsa"}, "unsupported key type 'dsa'"),
        ({"key_type": "rsa", "key_bits": 2000}, "unsupported RSA key size 2000"),
        ({"key_type": "rsa", "key_bits": 8192}, "unsupported RSA key size 8192"),
        ({"key_type": "ec", "key_bits": 255}, "unsupported EC key size 255"),
        ({"key_type": "ec", "private_format": "jks"}, "unsupported private key format"),
        ({"key_bits": 256}, "invalid arguments for generate_key"),
    ],
)
def test_generate_key_refusals(args: dict[str, object], message: str) -> None:
    with pytest.raises(CryptoFailure, match=message):
        run_local("generate_key", args)


def test_parse_public_key_pem_and_openssh() -> None:
    out = run_local("generate_key", {"key_type": "ec"})
    by_pem = run_local("parse_public_key", {"public_key": out["public_key"]})
    by_ssh = run_local("parse_public_key", {"public_key": out["public_key_openssh"] + " me@host"})
    assert by_pem["fingerprint"] == by_ssh["fingerprint"] == out["fingerprint"]
    assert by_ssh["key_type"] == "ec" and by_ssh["key_bits"] == 256


def test_parse_refusals_name_the_problem() -> None:
    with pytest.raises(CryptoFailure, match="could not parse the private key"):
        run_local(
            "parse_private_key",
            {"private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"},
        )
    with pytest.raises(CryptoFailure, match="no private key given"):
        run_local("parse_private_key", {"private_key": "  "})
    with pytest.raises(CryptoFailure, match="could not parse the public key"):
        run_local("parse_public_key", {"public_key": "ssh-rsa not-base64"})
    secp256k1 = (
        ec.generate_private_key(ec.SECP256K1())
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    with pytest.raises(CryptoFailure, match="unsupported EC curve secp256k1"):
        run_local("parse_private_key", {"private_key": secp256k1})
